// ControlledModel: a language model whose blocks are modulated by controller
// coefficients that can be recorded and replayed.
//
// Torch-free header: tensors are forward-declared and only engine .cc files
// (which include torch) call Forward. Other layers hold models through this
// interface and the auditor.
#ifndef FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_

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
    return *this;
  }
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

class WeightsHashCache;  // server/engine/io/weights_hash_cache.h

// Loads a model folder (config.json + model.safetensors or a sharded index).
// `name` is what info().name will say. info().weights_sha256 is read from
// `weights_hash_cache` (optional, not owned) when the weight files have not
// changed since it hashed them, else computed from every byte (and taught
// to the cache). NOT_FOUND when files are missing, INVALID_ARGUMENT for
// malformed or mismatching config/weights.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModel(
    const std::string& dir, const std::string& name, const ComputeOptions& compute,
    WeightsHashCache* weights_hash_cache = nullptr);

// What a model folder holds, known without reading its weights: what
// ListModels shows and what the model repository budgets memory by.
struct ModelDescription {
  // name, family, vocab_size, max_seq_len, num_layers and compute as the
  // loaded model's info() will say; num_parameters counts the elements of
  // every tensor in the checkpoint headers (what a valid checkpoint loads);
  // weights_sha256 is empty (hashing reads every byte of the weights).
  ModelInfo info;
  std::vector<CoefficientSite> sites;  // as the loaded model's sites()
  std::string config_json;             // the folder's config.json, verbatim
  int64_t weight_file_bytes = 0;       // sizes of the weight files together
  // Bytes the loaded weights take on the compute device: num_parameters
  // times the size of one element of the compute dtype. An estimate: the
  // activations of a forward come on top.
  int64_t estimated_memory_bytes = 0;
};

// Describes the folder `dir` from config.json and the safetensors headers
// (the data areas are not read). The family, sites and sizes come from the
// same code that builds a loaded model, so they agree with LoadModel's.
// NOT_FOUND when files are missing, INVALID_ARGUMENT for a malformed
// config.json or header, an unsupported family or compute dtype. A folder
// that describes may still fail to load (say, a tensor of the wrong shape).
[[nodiscard]] absl::StatusOr<ModelDescription> DescribeModel(const std::string& dir,
                                                             const std::string& name,
                                                             const ComputeOptions& compute);

// OK when a tokenizer of a folder may drive a model of `info`: it may cover
// fewer ids than the embedding has rows (Pythia pads its embedding), never
// more (INVALID_ARGUMENT).
[[nodiscard]] absl::Status CheckTokenizerFits(const Tokenizer& tokenizer, const ModelInfo& info);

// The tokenizer LoadModel gives a model of `dir`: the GPT-NeoX BPE of
// `dir`/tokenizer.json when that file exists, else one id per byte. Loads no
// weights (cheap next to LoadModel). INVALID_ARGUMENT for a malformed
// tokenizer.json.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFolderTokenizer(
    const std::string& dir);

// How a process spends its cores on torch.
enum class Parallelism {
  // Inference (the audit): independent batches run at once, each forward on
  // one thread. A small model's operators are too short to split across
  // threads without the threads waiting on each other (and spinning, which
  // on a shared machine costs a busy neighbour's time).
  kAcrossBatches,
  // Training: one forward/backward at a time, each operator split across
  // the threads (torch intra-op parallelism).
  kWithinOps,
};

// Process-wide settings; call at start-up and from each worker thread
// before it audits. Also keeps glibc from returning activation-sized blocks
// to the kernel after every forward (torch_util.cc says why).
struct RuntimeOptions {
  int num_threads = 0;  // cores to compute on; 0: one per hardware core
  Parallelism parallelism = Parallelism::kAcrossBatches;
};
void ConfigureRuntime(const RuntimeOptions& options);
// "1.13.1": recorded with results.
std::string TorchVersion();
// Threads an audit computes on: concurrent forwards times torch intra-op
// threads of the calling thread (set by ConfigureRuntime).
int TorchThreads();
// Forwards an audit runs at once (kAcrossBatches: num_threads; else 1).
int AuditThreads();

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_CONTROLLED_MODEL_H_
