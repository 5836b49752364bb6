// Training of byte-level models (fca-train): `dense` and `featuregate`
// (TransformerNet), and the mixture-of-experts families (MoeNet; fca-train
// trains `olmoe`).
//
// The loop runs the same forward the server uses, with autograd: AdamW, linear warm-up then cosine
// decay of the learning rate, global gradient-norm clipping, periodic evaluation, all seeded. The
// result is a model folder the server loads (config.json, model.safetensors) plus a JSON training
// log. Torch-free header.
#ifndef FCA_SERVER_TOOLS_TRAIN_TRAINER_H_
#define FCA_SERVER_TOOLS_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/moe_config.h"
#include "server/tools/train/corpus_split.h"

namespace fca::engine {

struct TrainOptions {
  // Byte text (the byte tokenizer: one token per byte). Training windows are
  // random `window_length`-token slices of train_text; evaluation windows are
  // the consecutive non-overlapping windows of eval_text, as an audit forms
  // them. Loss and NLL are over positions 1..T-1 of each window (fca.md).
  std::string train_text;
  std::string eval_text;
  int64_t window_length = 128;  // T; at most config.max_seq_len
  int64_t batch_size = 16;      // windows per step
  int64_t steps = 4000;
  int64_t warmup_steps = 200;       // linear from 0 to learning_rate
  double learning_rate = 3e-3;      // peak
  double min_learning_rate = 3e-4;  // reached by the cosine at the last step
  double weight_decay = 0.1;        // decoupled (AdamW), on matrices only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;              // max global L2 norm of gradients; 0 = off
  int64_t log_interval = 10;           // steps per log entry (train loss averaged over them)
  int64_t eval_interval = 250;         // steps between evaluations; 0 = only at the end
  int64_t eval_max_windows = 64;       // windows of periodic evaluations (0 = all)
  int64_t final_eval_max_windows = 0;  // windows of the final evaluation (0 = all)
  uint64_t seed = 1;                   // initial weights and window sampling
  double init_std = 0.02;
  // "float32", or "bfloat16": bf16 forward/backward with float32 master
  // weights, optimizer state and loss.
  std::string compute_dtype = "float32";
  std::string storage_dtype = "bfloat16";  // of model.safetensors: float32 | bfloat16
  // Leaves the controller (featuregate ctrl.*, an MoE's routers) at its
  // initial weights: no gradient is computed for it and the optimizer does
  // not hold it.
  bool freeze_controller = false;
  // MoE only: weight of the load-balancing loss added to the NLL (OLMoE's
  // router_aux_loss_coef; docs/moe.md "Training"). 0 = none.
  double aux_loss_coef = 0.01;
  std::string out_dir;   // model folder to write (created)
  std::string log_path;  // default: out_dir + "/training_log.json"
  // Recorded verbatim under "corpus" in the log (split rule, file hashes).
  json::Value provenance;
};

// Takes the training and evaluation texts of `split` into `o` and records
// the split (rule, file and part hashes) as its provenance. The provenance
// is computed before the texts move: logs written before this existed
// recorded the moved-from (empty) train and eval parts.
void UseCorpusSplit(CorpusSplit split, TrainOptions* o);

// One entry of the training log.
struct TrainLogEntry {
  int64_t step = 0;                 // steps done
  double learning_rate = 0;         // of the last step
  double train_loss = 0;            // NLL, mean over the steps since the previous entry
  std::optional<double> aux_loss;   // MoE: load-balancing loss, the same mean
  std::optional<double> eval_loss;  // periodic evaluation, when one ran at this step
  int64_t tokens_seen = 0;          // window tokens consumed so far
  double wall_seconds = 0;          // since the start of training
};

struct TrainProgress {
  int64_t step = 0;  // steps done, 1..steps
  int64_t steps = 0;
  double learning_rate = 0;
  double train_loss = 0;            // of this step
  std::optional<double> eval_loss;  // set at the steps that evaluate
  int64_t tokens_seen = 0;
  double wall_seconds = 0;
  double tokens_per_second = 0;  // training steps only, excluding evaluations
  bool logged = false;           // a log entry was written at this step
};

struct TrainReport {
  std::vector<TrainLogEntry> log;
  // NLL (nats/byte) of the model as written (storage dtype, loaded with
  // LoadModel, float32 compute on CPU) on the final evaluation windows.
  double final_eval_nll = 0;
  int64_t final_eval_windows = 0;
  int64_t tokens_seen = 0;
  double train_seconds = 0;  // optimisation steps only
  double wall_seconds = 0;   // everything, evaluations and writing included
  double tokens_per_second = 0;
  int64_t num_parameters = 0;
  std::string weights_sha256;
  std::string model_dir;
  std::string log_path;
};

// Trains a model of `config` (its vocab_size must cover bytes: >= 256) and
// writes options.out_dir and the log. The result depends only on the options,
// the config and the torch thread count. INVALID_ARGUMENT for bad options
// (named); INTERNAL for a torch failure or a non-finite loss; errors writing
// files pass through. `progress` (may be empty) is called after every step
// on the calling thread.
[[nodiscard]] absl::StatusOr<TrainReport> TrainModel(
    const TrainOptions& options, const TransformerConfig& config,
    const std::function<void(const TrainProgress&)>& progress);

// The same for a mixture-of-experts model of `config` (any family MoeNet
// runs; its vocab_size must cover bytes and its max_position_embeddings the
// window). The loss adds options.aux_loss_coef times the load-balancing
// loss; the folder is a Hugging Face one (MoeConfigToJson, the state dict's
// names).
[[nodiscard]] absl::StatusOr<TrainReport> TrainModel(
    const TrainOptions& options, const MoeConfig& config,
    const std::function<void(const TrainProgress&)>& progress);

}  // namespace fca::engine

#endif  // FCA_SERVER_TOOLS_TRAIN_TRAINER_H_
