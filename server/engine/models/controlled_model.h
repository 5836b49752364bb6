// ControlledModel: a language model whose blocks are modulated by controller
// coefficients that can be recorded and replayed.
//
// Torch-free header: tensors are forward-declared and only engine .cc files
// (which include torch) call Forward. Other layers hold models through this
// interface and the auditor.
#ifndef FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/vocabulary.h"
#include "server/engine/text/tokenizer.h"

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// One place where the controller's output enters the network.
struct CoefficientSite {
  std::string name;    // "attn_gate.3"
  std::string family;  // "attn_gate"; sites of one family share statistics
  int64_t layer = 0;
  int64_t channels = 0;  // d_s
};

enum class CoefficientMode {
  kLive,        // the controller runs
  kLiveRecord,  // the controller runs and its outputs are returned
  kReplay,      // the controller does not run; given coefficients are used
  // As kLiveRecord, but no logits: the model stops once every coefficient
  // is known (calibration needs coefficients only) and returns an undefined
  // tensor. Counters count what ran.
  kRecordOnly,
};

// Where and in what precision a model computes.
struct ComputeOptions {
  std::string device = "cpu";                   // any torch device string: "cpu", "cuda:0"
  ComputeDType dtype = ComputeDType::kFloat32;  // common/vocabulary.h
};

// Counted by the model while it runs (not derived from its config), so an
// execution audit reports what happened.
struct ExecutionCounters {
  int64_t tokens = 0;           // token positions processed (B * T per call)
  int64_t blocks_executed = 0;  // sum over calls of (blocks run) * tokens
  int64_t blocks_total = 0;     // sum over calls of (blocks in model) * tokens
  double flops = 0;             // matmul FLOPs (2 per multiply-add) executed
  // Sum over tokens of the parameters each token's forward read (a
  // mixture of experts reads only its routed experts); 0: not counted.
  double parameters_read = 0;
  // Mixture-of-experts families: (token, expert) assignments that ran, per
  // layer and expert, layer-major ([layer * experts_per_layer + expert]);
  // empty for the other families.
  std::vector<int64_t> expert_tokens;
  int64_t experts_per_layer = 0;
  // Wall seconds in parts of the forward, timed on the CPU only (on a GPU a
  // part's time would need a synchronisation per part, which changes what is
  // timed): a mixture of experts' router (logits and softmax), dispatch
  // (top-k, grouping by expert, gathering the tokens, the weighted combine)
  // and experts (routed and shared); a dense or featuregate model's MLP
  // branches (the MLP after its norm). fca.md "Execution" says how they are read.
  struct PartSeconds {
    double router = 0, dispatch = 0, experts = 0, mlp = 0;
  } seconds;

  ExecutionCounters& operator+=(const ExecutionCounters& o) {
    tokens += o.tokens;
    blocks_executed += o.blocks_executed;
    blocks_total += o.blocks_total;
    flops += o.flops;
    parameters_read += o.parameters_read;
    if (expert_tokens.size() < o.expert_tokens.size()) {
      expert_tokens.resize(o.expert_tokens.size(), 0);
    }
    for (size_t i = 0; i < o.expert_tokens.size(); ++i) expert_tokens[i] += o.expert_tokens[i];
    if (o.experts_per_layer > 0) experts_per_layer = o.experts_per_layer;
    seconds.router += o.seconds.router;
    seconds.dispatch += o.seconds.dispatch;
    seconds.experts += o.seconds.experts;
    seconds.mlp += o.seconds.mlp;
    return *this;
  }
};

// Adds the wall time since the last Lap (or Restart) to one part of
// `seconds`; does nothing when `seconds` is null (no counters, or not on the
// CPU).
class PartTimer {
 public:
  using Part = double ExecutionCounters::PartSeconds::*;
  explicit PartTimer(ExecutionCounters::PartSeconds* seconds) : seconds_(seconds) { Restart(); }
  void Restart() {
    if (seconds_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void Lap(Part part) {
    if (seconds_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    seconds_->*part += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  ExecutionCounters::PartSeconds* seconds_;
  std::chrono::steady_clock::time_point last_;
};

struct ModelInfo {
  std::string name;            // folder name in the model repository
  std::string family;          // "dense", "featuregate", "muddpythia"
  std::string weights_sha256;  // identity of the weights
  int64_t vocab_size = 0;      // rows of the embedding / logits columns
  int64_t max_seq_len = 0;
  int64_t num_layers = 0;
  int64_t num_parameters = 0;
  ComputeOptions compute;
  // The width of the residual stream and the attention heads, as the
  // config states them; 0 where the family does not say (a dense twin is
  // matched on them: fca.md "Execution").
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
};

// Thread-safe: Forward may run concurrently on one instance (the auditor runs
// independent batches at once); the counters add up every call's work.
class ControlledModel {
 public:
  virtual ~ControlledModel() = default;

  virtual const ModelInfo& info() const = 0;
  // The coefficient sites in a fixed order; empty for a dense model.
  virtual const std::vector<CoefficientSite>& sites() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;

  // ids: int64 [B, T] with 1 <= T <= max_seq_len and ids < vocab_size.
  // Returns logits [B, T, vocab_size] in the compute dtype.
  // kLiveRecord: `coefficients` receives one tensor per site, [B, T, d_s],
  //   in the compute dtype, in sites() order. kRecordOnly: the same, and the
  //   returned tensor is undefined.
  // kReplay: `coefficients` must hold exactly that; the controller does not run.
  // INVALID_ARGUMENT for bad ids or coefficient shapes; INTERNAL for a torch
  // failure, naming the model.
  [[nodiscard]] virtual absl::StatusOr<at::Tensor> Forward(
      const at::Tensor& ids, CoefficientMode mode, std::vector<at::Tensor>* coefficients) = 0;

  // The coefficients with the controller removed, one [d_s] tensor per site
  // in sites() order, in the compute dtype and on the compute device (a
  // replay broadcasts each to every token): FeatureGate every gate 1 (the
  // block unscaled), MUDDPythia the static dense_bs alone (no dynamic part).
  // Empty for a dense model; INTERNAL for a torch failure.
  [[nodiscard]] virtual absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const = 0;

  // Mixture-of-experts routing (docs/moe.md). Per site in sites() order, the
  // experts the model's top-k chooses per token there (k), 0 at a site that
  // routes nothing; empty for a model without routers (the default).
  virtual std::vector<int64_t> RoutedExperts() const;
  // The experts the model's own top-k chooses from `coefficients` (one
  // [B, T, d_s] tensor per site, as Forward takes them), exactly as REPLAY
  // would: per site, int64 [B, T, k] holding each position's chosen set in
  // increasing expert index, an undefined tensor at a site that routes
  // nothing. Empty for a model without routers (the default);
  // INVALID_ARGUMENT for misshapen coefficients.
  [[nodiscard]] virtual absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const;

  virtual ExecutionCounters counters() const = 0;
  virtual void ResetCounters() = 0;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_
