// MoeModel: the SafetensorsModel of the `olmoe`, `qwen2_moe` and `mixtral`
// families. It loads a checkpoint and runs MoeNet (moe_net.cc, the forward
// and its conventions) for inference, with coefficient record and replay.
#include "server/engine/models/moe_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/models/moe_net.h"
#include "server/engine/models/safetensors_model.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

constexpr char kRouterFamily[] = "router";

// ---------------------------------------------------------------------------
// The model

class MoeModel : public SafetensorsModel {
 public:
  // `info` and `sites` as DescribeMoe(config) set and returned them.
  MoeModel(MoeConfig config, ModelInfo info, std::vector<CoefficientSite> sites)
      : SafetensorsModel(std::move(info), std::move(sites),
                         CheckpointRules{config.model_type, true, "config.json implies"}),
        config_(std::move(config)) {}

  std::vector<int64_t> RoutedExperts() const override {
    std::vector<int64_t> k;
    for (const CoefficientSite& s : sites()) {
      k.push_back(s.family == kRouterFamily ? config_.num_experts_per_tok : 0);
    }
    return k;
  }

  // What REPLAY would choose from `coefficients`: converted to float32 and
  // through the forward's own RouterTopK.
  absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const override {
    if (coefficients.size() != sites().size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chosen experts: %d coefficient tensors for %d sites",
                          coefficients.size(), sites().size()));
    }
    return GuardTorch("model '" + info().name + "' chosen experts",
                      [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
                        c10::InferenceMode guard;
                        std::vector<at::Tensor> out;
                        for (size_t s = 0; s < sites().size(); ++s) {
                          if (sites()[s].family != kRouterFamily) {
                            out.emplace_back();
                            continue;
                          }
                          FCA_ASSIGN_OR_RETURN(at::Tensor chosen, ChosenAt(coefficients[s], s));
                          out.push_back(std::move(chosen));
                        }
                        return out;
                      });
  }

 private:
  absl::StatusOr<std::vector<WeightSpec>> WeightSpecs(const TensorSource&) const override {
    return MoeWeightSpecs(config_);
  }

  absl::Status Bind(const std::vector<WeightSpec>& specs,
                    std::vector<at::Tensor> weights) override {
    FCA_ASSIGN_OR_RETURN(weights, WithHostGemmLayout(specs, std::move(weights)));
    FCA_ASSIGN_OR_RETURN(net_, MoeNet::Create(config_, std::move(weights)));
    return absl::OkStatus();
  }

  // The coefficients of zero controller logits: router probabilities 1/E
  // (the top-k then takes experts 0..k-1, ties going to the lower index),
  // a shared-expert gate of sigmoid(0) = 0.5.
  std::vector<at::Tensor> Neutral() const override {
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(AnyWeight().device());
    std::vector<at::Tensor> out;
    for (const CoefficientSite& s : sites()) {
      const double value = s.family == kRouterFamily ? 1.0 / s.channels : 0.5;
      out.push_back(at::full({s.channels}, value, f32));
    }
    return out;
  }

  const at::Tensor& AnyWeight() const override { return net_->weights().front(); }

  absl::StatusOr<at::Tensor> Run(const at::Tensor& ids, CoefficientMode mode,
                                 std::vector<at::Tensor>* coefficients,
                                 ExecutionCounters* counted) override {
    // Without a controller (MoeConfig::is_dense) there is nothing to record
    // or replay: the network's own weights of 1 stay inside it.
    if (config_.is_dense()) {
      if (mode == CoefficientMode::kRecordOnly) return at::Tensor();
      mode = CoefficientMode::kLive;
    }
    return net_->Forward(ids, mode, coefficients, counted);
  }

  // A router site's [B, T, E] coefficients -> the chosen experts [B, T, k]
  // in increasing index.
  absl::StatusOr<at::Tensor> ChosenAt(const at::Tensor& a, size_t site) const {
    const int64_t E = config_.num_experts, k = config_.num_experts_per_tok;
    if (a.dim() != 3 || a.size(2) != E) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chosen experts: site '%s' needs [B, T, %d] coefficients", sites()[site].name, E));
    }
    const at::Tensor experts = RouterTopK(a.reshape({-1, E}).to(at::kFloat), k).second;
    return std::get<0>(at::sort(experts, -1)).view({a.size(0), a.size(1), k});
  }

  MoeConfig config_;
  std::unique_ptr<MoeNet> net_;
};

}  // namespace

std::vector<CoefficientSite> DescribeMoe(const MoeConfig& config, ModelInfo* info) {
  info->family = config.model_type;
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_position_embeddings;
  info->num_layers = config.num_hidden_layers;
  info->hidden_size = config.hidden_size;
  info->num_heads = config.num_attention_heads;
  std::vector<CoefficientSite> sites;
  for (int64_t l = 0; l < config.num_hidden_layers && !config.is_dense(); ++l) {
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
  std::vector<CoefficientSite> sites = DescribeMoe(config, &info);
  return LoadSafetensorsModel(std::make_unique<MoeModel>(config, std::move(info), std::move(sites)),
                              weights);
}

}  // namespace fca::engine
