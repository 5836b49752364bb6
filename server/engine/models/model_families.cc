#include "server/engine/models/model_families.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/moe_model.h"
#include "server/engine/models/muddpythia_model.h"
#include "server/engine/models/torchscript_config.h"
#include "server/engine/models/torchscript_model.h"
#include "server/engine/models/transformer_model.h"

namespace fca::engine {
namespace {

// A family's describe from its parser and its Describe<Family>.
template <typename Config, absl::StatusOr<Config> (*kParse)(std::string_view),
          std::vector<CoefficientSite> (*kDescribe)(const Config&, ModelInfo*)>
absl::StatusOr<std::vector<CoefficientSite>> DescribeFrom(std::string_view config_json,
                                                          ModelInfo* info) {
  FCA_ASSIGN_OR_RETURN(const Config config, kParse(config_json));
  return kDescribe(config, info);
}

// A safetensors family's create from its parser and its Create<Family>Model.
template <typename Config, absl::StatusOr<Config> (*kParse)(std::string_view),
          absl::StatusOr<std::unique_ptr<ControlledModel>> (*kCreate)(
              const Config&, const TensorSource&, ModelInfo)>
absl::StatusOr<std::unique_ptr<ControlledModel>> CreateFrom(std::string_view config_json,
                                                            const FolderWeights& weights,
                                                            ModelInfo info) {
  FCA_ASSIGN_OR_RETURN(const Config config, kParse(config_json));
  return kCreate(config, *weights.tensors, std::move(info));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTorchScript(std::string_view config_json,
                                                                   const FolderWeights& weights,
                                                                   ModelInfo info) {
  FCA_ASSIGN_OR_RETURN(const TorchScriptConfig config, ParseTorchScriptConfig(config_json));
  return CreateTorchScriptModel(weights.module_path, config, std::move(info));
}

constexpr auto kDescribeTransformer =
    DescribeFrom<TransformerConfig, ParseTransformerConfig, DescribeTransformer>;
constexpr auto kCreateTransformer =
    CreateFrom<TransformerConfig, ParseTransformerConfig, CreateTransformerModel>;
constexpr auto kDescribeMoe = DescribeFrom<MoeConfig, ParseMoeConfig, DescribeMoe>;
constexpr auto kCreateMoe = CreateFrom<MoeConfig, ParseMoeConfig, CreateMoeModel>;

FamilyCapabilities Safetensors(std::vector<std::string> site_families, NeutralKind neutral,
                               bool routes) {
  FamilyCapabilities c;
  c.site_families = std::move(site_families);
  c.neutral = neutral;
  c.routes = routes;
  return c;
}

std::vector<ModelFamily> MakeFamilies() {
  FamilyCapabilities module;
  module.weights = WeightsFormat::kTorchScript;
  module.sites_from_config = true;
  module.neutral = NeutralKind::kModule;
  return {
      {"dense", Safetensors({}, NeutralKind::kNoSites, false), kDescribeTransformer,
       kCreateTransformer},
      {"featuregate",
       Safetensors({"attn_gate", "mlp_gate"}, NeutralKind::kControllerRemoved, false),
       kDescribeTransformer, kCreateTransformer},
      {"muddpythia",
       Safetensors({"q", "k", "v", "r", "out"}, NeutralKind::kControllerRemoved, false),
       DescribeFrom<MuddPythiaConfig, ParseMuddPythiaConfig, DescribeMuddPythia>,
       CreateFrom<MuddPythiaConfig, ParseMuddPythiaConfig, CreateMuddPythiaModel>},
      {"olmoe", Safetensors({"router"}, NeutralKind::kZeroLogits, true), kDescribeMoe, kCreateMoe},
      {"qwen2_moe", Safetensors({"router", "shared_gate"}, NeutralKind::kZeroLogits, true),
       kDescribeMoe, kCreateMoe},
      {"mixtral", Safetensors({"router"}, NeutralKind::kZeroLogits, true), kDescribeMoe,
       kCreateMoe},
      {"torchscript", module,
       DescribeFrom<TorchScriptConfig, ParseTorchScriptConfig, DescribeTorchScript>,
       CreateTorchScript},
  };
}

}  // namespace

const std::vector<ModelFamily>& ModelFamilies() {
  static const std::vector<ModelFamily>* const families =
      new std::vector<ModelFamily>(MakeFamilies());
  return *families;
}

absl::StatusOr<const ModelFamily*> FindModelFamily(std::string_view model_type) {
  for (const ModelFamily& family : ModelFamilies()) {
    if (family.name == model_type) return &family;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "config.json: model_type '%s' is not supported (known: %s)", model_type,
      absl::StrJoin(ModelFamilies(), ", ",
                    [](std::string* out, const ModelFamily& f) { out->append(f.name); })));
}

}  // namespace fca::engine
