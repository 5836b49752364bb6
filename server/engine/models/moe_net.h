// MoeNet: the forward computation of the mixture-of-experts families
// (`olmoe`, `qwen2_moe`, `mixtral`) over a set of weight tensors, and their
// checkpoint layout. It is the one implementation of the network: MoeModel
// runs it for inference (under InferenceMode, with coefficient record and
// replay) and the trainer runs it with autograd. Torch-free header: tensors
// are forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_MOE_NET_H_
#define FCA_SERVER_ENGINE_MODELS_MOE_NET_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/transformer_model.h"  // WeightSpec, InitOptions

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// Every tensor of the Hugging Face state dict of `config`, in a fixed order.
// A checkpoint must hold exactly these.
std::vector<WeightSpec> MoeWeightSpecs(const MoeConfig& config);

// The top-k of each row of `probs` [N, E] float32 by a stable descending
// sort, so ties go to the lower expert index: the k values and the k
// experts, both [N, k], largest first. The forward's routing (LIVE and
// REPLAY) and every "which experts were chosen" question choose here.
std::pair<at::Tensor, at::Tensor> RouterTopK(const at::Tensor& probs, int64_t k);

// Thread-compatible; Forward is const and may run concurrently only when the
// caller does not modify the weights meanwhile.
class MoeNet {
 public:
  // `weights` holds one tensor per MoeWeightSpecs(config) entry, in that
  // order, all of one dtype and device. The net shares (does not copy) them,
  // so in-place updates by an optimizer are seen by the next Forward.
  // INVALID_ARGUMENT naming the first tensor of the wrong count or shape.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MoeNet>> Create(
      const MoeConfig& config, std::vector<at::Tensor> weights);
  ~MoeNet();
  MoeNet(const MoeNet&) = delete;
  MoeNet& operator=(const MoeNet&) = delete;

  // Logits [B, T, vocab_size] in the weights' dtype for int64 ids [B, T] on
  // the weights' device (undefined for kRecordOnly). Ids are not validated
  // here (MoeModel checks them). kLiveRecord and kRecordOnly append the
  // router probabilities [B, T, E] float32 per layer (and the shared-expert
  // gate [B, T, 1] after it for qwen2_moe) to `coefficients`; kReplay takes
  // them from `coefficients`, whose shapes the caller has checked. Autograd
  // records the computation unless the caller holds an InferenceMode or
  // NoGrad guard. `counters` (may be null) accumulates what ran. INTERNAL
  // for a torch failure; nothing throws.
  [[nodiscard]] absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                                   std::vector<at::Tensor>* coefficients,
                                                   ExecutionCounters* counters) const;

  const MoeConfig& config() const { return config_; }
  // The tensors given to Create, in MoeWeightSpecs order.
  const std::vector<at::Tensor>& weights() const;
  int64_t num_parameters() const { return num_parameters_; }
  // The parameters of one routed expert.
  int64_t expert_parameters() const {
    return 3 * config_.hidden_size * config_.expert_intermediate_size;
  }

  struct Layout;  // the weights by role; defined in moe_net.cc

 private:
  MoeNet(MoeConfig config, std::unique_ptr<Layout> layout, int64_t num_parameters);

  MoeConfig config_;
  std::unique_ptr<Layout> layout_;
  int64_t num_parameters_;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_NET_H_
