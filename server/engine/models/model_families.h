// The model families a folder's config.json may name ("model_type"), each
// with its config parser, its loader and what it supports: the one table the
// folder loader dispatches on (model_loader.cc) and the contract suite walks
// (tests/engine/models/family_contract_test.cc). A new family is one row of
// it (model_families.cc), its forward, and its row in the suite's table.
// Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_MODEL_FAMILIES_H_
#define FCA_SERVER_ENGINE_MODELS_MODEL_FAMILIES_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// Where a family's folder keeps its weights.
enum class WeightsFormat {
  kSafetensors,  // model.safetensors or a sharded index (TensorSource::OpenDir)
  kTorchScript,  // model.pt: the module's code and tensors together
};

// What NeutralCoefficients gives (docs/fca.md, "Interventions": `neutral`).
enum class NeutralKind {
  kNoSites,            // a model without sites: an empty list (dense)
  kControllerRemoved,  // FeatureGate every gate 1; MUDDPythia dense_bs alone
  // A router has no "controller removed": the coefficients of zero router
  // logits, probabilities 1/E and a shared gate of sigmoid(0) (docs/moe.md).
  kZeroLogits,
  kModule,  // the module's own neutral(), when it has one (docs/torchscript.md)
};

// What a family supports, known before any config is read.
struct FamilyCapabilities {
  WeightsFormat weights = WeightsFormat::kSafetensors;
  // The coefficient families its models may declare; empty for a family
  // without sites and for one whose config.json declares them (torchscript).
  std::vector<std::string> site_families;
  bool sites_from_config = false;  // config.json lists the sites (torchscript)
  bool routes = false;             // RoutedExperts/ChosenExperts: a mixture of experts
  NeutralKind neutral = NeutralKind::kNoSites;
};

// A folder's weights as the loader opened them for the family's format:
// `tensors` for safetensors, `module_path` (model.pt) for torchscript.
struct FolderWeights {
  const TensorSource* tensors = nullptr;
  std::string module_path;
};

struct ModelFamily {
  std::string name;  // config.json's model_type
  FamilyCapabilities capabilities;
  // Parses and validates config.json (INVALID_ARGUMENT starting with
  // "config.json:" and naming the key), sets the fields of `info` that
  // follow from it (family, vocab_size, max_seq_len, num_layers) and returns
  // the coefficient sites of such a model in sites() order: what
  // DescribeModel reports before any weight is read.
  absl::StatusOr<std::vector<CoefficientSite>> (*describe)(std::string_view config_json,
                                                           ModelInfo* info);
  // Builds the model of config.json from the folder's weights, with
  // `info`'s name and compute; its info() and sites() agree with describe's.
  absl::StatusOr<std::unique_ptr<ControlledModel>> (*create)(std::string_view config_json,
                                                             const FolderWeights& weights,
                                                             ModelInfo info);
};

// Every family, in the order an unsupported model_type's message lists them.
const std::vector<ModelFamily>& ModelFamilies();

// The family named `model_type`; INVALID_ARGUMENT naming the known ones
// otherwise.
[[nodiscard]] absl::StatusOr<const ModelFamily*> FindModelFamily(std::string_view model_type);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MODEL_FAMILIES_H_
