// MoeModel: the ControlledModel of the `olmoe`, `qwen2_moe` and `mixtral`
// families. It loads a checkpoint and runs MoeNet (moe_net.cc, the forward
// and its conventions) for inference, with coefficient record and replay.
#include "server/engine/models/moe_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/moe_net.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

constexpr char kRouterFamily[] = "router";

absl::StatusOr<TensorView> CheckedView(const TensorSource& src, const WeightSpec& spec,
                                       const std::string& family) {
  if (!src.Has(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("checkpoint has no tensor '%s', which a %s model with this config.json "
                        "needs",
                        spec.name, family));
  }
  FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(spec.name));
  if (view.shape != spec.shape) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' has shape [%s]; config.json implies [%s]", spec.name,
                        absl::StrJoin(view.shape, ", "), absl::StrJoin(spec.shape, ", ")));
  }
  if (view.dtype != DType::kF32 && view.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' is stored as %s; %s weights must be F32 or BF16", spec.name,
                        std::string(DTypeName(view.dtype)), family));
  }
  return view;
}

// ---------------------------------------------------------------------------
// The model

class MoeModel : public ControlledModel {
 public:
  MoeModel(MoeConfig config, ModelInfo info) : config_(std::move(config)), info_(std::move(info)) {
    sites_ = DescribeMoe(config_, &info_);
  }

  absl::Status Load(const TensorSource& src) {
    const std::vector<WeightSpec> specs = MoeWeightSpecs(config_);
    std::vector<TensorView> views;
    std::set<std::string> expected;
    int64_t params = 0;
    for (const WeightSpec& spec : specs) {
      FCA_ASSIGN_OR_RETURN(TensorView view, CheckedView(src, spec, config_.model_type));
      params += view.numel();
      expected.insert(spec.name);
      views.push_back(std::move(view));
    }
    for (const std::string& name : src.Names()) {
      if (expected.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor '%s' is not part of a %s model with this config.json", name,
                            config_.model_type));
      }
    }
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> loaded, LoadTensors(src, views, info_.compute));
    info_.num_parameters = params;
    FCA_ASSIGN_OR_RETURN(net_, MoeNet::Create(config_, std::move(loaded)));
    return absl::OkStatus();
  }

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return sites_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  ExecutionCounters counters() const override { return counters_.Get(); }
  void ResetCounters() override { counters_.Reset(); }

  // The coefficients of zero controller logits: router probabilities 1/E
  // (the top-k then takes experts 0..k-1, ties going to the lower index),
  // a shared-expert gate of sigmoid(0) = 0.5.
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return GuardTorch(
        "model '" + info_.name + "' neutral coefficients",
        [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
          const auto f32 =
              at::TensorOptions().dtype(at::kFloat).device(net_->weights().front().device());
          std::vector<at::Tensor> out;
          for (const CoefficientSite& s : sites_) {
            const double value = s.family == kRouterFamily ? 1.0 / s.channels : 0.5;
            out.push_back(at::full({s.channels}, value, f32));
          }
          return out;
        });
  }

  std::vector<int64_t> RoutedExperts() const override {
    std::vector<int64_t> k;
    for (const CoefficientSite& s : sites_) {
      k.push_back(s.family == kRouterFamily ? config_.num_experts_per_tok : 0);
    }
    return k;
  }

  // What REPLAY would choose from `coefficients`: converted to float32 and
  // through the forward's own RouterTopK.
  absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const override {
    if (coefficients.size() != sites_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chosen experts: %d coefficient tensors for %d sites",
                          coefficients.size(), sites_.size()));
    }
    return GuardTorch("model '" + info_.name + "' chosen experts",
                      [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
                        c10::InferenceMode guard;
                        std::vector<at::Tensor> out;
                        for (size_t s = 0; s < sites_.size(); ++s) {
                          if (sites_[s].family != kRouterFamily) {
                            out.emplace_back();
                            continue;
                          }
                          FCA_ASSIGN_OR_RETURN(at::Tensor chosen, ChosenAt(coefficients[s], s));
                          out.push_back(std::move(chosen));
                        }
                        return out;
                      });
  }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    FCA_RETURN_IF_ERROR(CheckForwardInputs(ids, mode, coefficients, info_, sites_,
                                           config_.max_position_embeddings, config_.vocab_size));
    return GuardTorch("model '" + info_.name + "' forward", [&]() -> absl::StatusOr<at::Tensor> {
      c10::InferenceMode guard;
      std::vector<at::Tensor> recorded;
      const at::Tensor on_device = ids.to(net_->weights().front().device());
      ExecutionCounters counted;
      FCA_ASSIGN_OR_RETURN(
          at::Tensor logits,
          net_->Forward(on_device, mode, Records(mode) ? &recorded : coefficients, &counted));
      counters_.Add(counted);
      if (Records(mode)) *coefficients = std::move(recorded);
      return logits;
    });
  }

 private:
  // A router site's [B, T, E] coefficients -> the chosen experts [B, T, k]
  // in increasing index.
  absl::StatusOr<at::Tensor> ChosenAt(const at::Tensor& a, size_t site) const {
    const int64_t E = config_.num_experts, k = config_.num_experts_per_tok;
    if (a.dim() != 3 || a.size(2) != E) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chosen experts: site '%s' needs [B, T, %d] coefficients", sites_[site].name, E));
    }
    const at::Tensor experts = RouterTopK(a.reshape({-1, E}).to(at::kFloat), k).second;
    return std::get<0>(at::sort(experts, -1)).view({a.size(0), a.size(1), k});
  }

  MoeConfig config_;
  ModelInfo info_;
  std::vector<CoefficientSite> sites_;
  ByteTokenizer tokenizer_;
  SharedCounters counters_;
  std::unique_ptr<MoeNet> net_;
};

}  // namespace

std::vector<CoefficientSite> DescribeMoe(const MoeConfig& config, ModelInfo* info) {
  info->family = config.model_type;
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_position_embeddings;
  info->num_layers = config.num_hidden_layers;
  std::vector<CoefficientSite> sites;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    sites.push_back({absl::StrCat("router.", l), kRouterFamily, l, config.num_experts});
    if (config.has_shared_expert()) {
      sites.push_back({absl::StrCat("shared_gate.", l), "shared_gate", l, 1});
    }
  }
  return sites;
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateMoeModel(const MoeConfig& config,
                                                                const TensorSource& weights,
                                                                ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateCompute(info.compute));
  if (info.compute.dtype != ComputeDType::kFloat32 &&
      info.compute.dtype != ComputeDType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrFormat("%s computes in float32 or bfloat16, not %s",
                                                      config.model_type,
                                                      ComputeDTypeName(info.compute.dtype)));
  }
  auto model = std::make_unique<MoeModel>(config, std::move(info));
  FCA_RETURN_IF_ERROR(model->Load(weights));
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
