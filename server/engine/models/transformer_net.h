// TransformerNet: the forward computation of the `dense` and `featuregate`
// families over a set of weight tensors. It is the one implementation of the
// network: TransformerModel runs it for inference (under InferenceMode, with
// coefficient record and replay) and the trainer runs it with autograd.
// Torch-free header: tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_TRANSFORMER_NET_H_
#define FCA_SERVER_ENGINE_MODELS_TRANSFORMER_NET_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_config.h"

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// Thread-compatible; Forward is const and may run concurrently only when the
// caller does not modify the weights meanwhile.
class TransformerNet {
 public:
  // `weights` holds one tensor per TransformerWeightSpecs(config) entry, in
  // that order, all of one dtype and device. The net shares (does not copy)
  // them, so in-place updates by an optimizer are seen by the next Forward.
  // INVALID_ARGUMENT naming the first tensor of the wrong count or shape.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TransformerNet>> Create(
      const TransformerConfig& config, std::vector<at::Tensor> weights);
  ~TransformerNet();
  TransformerNet(const TransformerNet&) = delete;
  TransformerNet& operator=(const TransformerNet&) = delete;

  // Logits [B, T, vocab_size] in the weights' dtype for int64 ids [B, T] on
  // the weights' device. Ids are not validated here (TransformerModel checks
  // them). kLiveRecord appends one gate tensor [B, T, n_groups] per site to
  // `coefficients` (attn_gate.l, mlp_gate.l for each layer l); kReplay takes
  // them from `coefficients`, whose shapes the caller has checked. Autograd
  // records the computation unless the caller holds an InferenceMode or
  // NoGrad guard. `counters` (may be null) accumulates what ran. INTERNAL for
  // a torch failure; nothing throws.
  [[nodiscard]] absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                                   std::vector<at::Tensor>* coefficients,
                                                   ExecutionCounters* counters) const;

  const TransformerConfig& config() const { return config_; }
  // The tensors given to Create, in TransformerWeightSpecs order.
  const std::vector<at::Tensor>& weights() const;

  struct Layout;  // the weights by role; defined in transformer_net.cc

 private:
  TransformerNet(TransformerConfig config, std::unique_ptr<Layout> layout);

  TransformerConfig config_;
  std::unique_ptr<Layout> layout_;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_TRANSFORMER_NET_H_
