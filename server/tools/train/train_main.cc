// fca-train: trains `dense`, `featuregate` and `olmoe` byte-level models on
// the fortunes corpus and writes model folders the server loads.
//
//   fca-train split --corpus=/usr/share/games/fortunes --out=DIR
//       writes DIR/train.txt, calib.txt, eval.txt and split.json
//   fca-train train --family=featuregate --seed=1 --out=models/featuregate-s1
//       splits the corpus the same way in memory, trains on the training part
//       and evaluates on the evaluation part; writes config.json,
//       model.safetensors and training_log.json into --out
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags_usage.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"
#include "server/tools/model_flags.h"
#include "server/tools/tool_main.h"
#include "server/tools/train/corpus_split.h"
#include "server/tools/train/trainer.h"

ABSL_FLAG(std::string, corpus, "/usr/share/games/fortunes", "fortune files folder");
ABSL_FLAG(std::vector<std::string>, eval_files, {"fortunes"}, "corpus files for evaluation");
ABSL_FLAG(std::vector<std::string>, calib_files, {"literature"},
          "corpus files for calibration (kept out of training)");
ABSL_FLAG(std::string, out, "", "split: folder for the texts; train: model folder");
ABSL_FLAG(std::string, log, "", "train: training log path (default OUT/training_log.json)");
ABSL_FLAG(int64_t, window, 128, "window length T (also the model's max_seq_len)");
ABSL_FLAG(int64_t, batch, 16, "windows per step");
ABSL_FLAG(int64_t, steps, 4000, "optimisation steps");
ABSL_FLAG(int64_t, warmup, 200, "warm-up steps");
ABSL_FLAG(double, lr, 3e-3, "peak learning rate");
ABSL_FLAG(double, min_lr, 3e-4, "learning rate at the end of the cosine");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay (matrices)");
ABSL_FLAG(double, grad_clip, 1.0, "gradient norm clip (0 = off)");
ABSL_FLAG(int64_t, log_interval, 50, "steps per log entry");
ABSL_FLAG(int64_t, eval_interval, 250, "steps between evaluations (0 = only at the end)");
ABSL_FLAG(int64_t, eval_windows, 64, "windows of the periodic evaluations (0 = all)");
ABSL_FLAG(int64_t, final_eval_windows, 0, "windows of the final evaluation (0 = all)");
ABSL_FLAG(uint64_t, seed, 1, "weights and window sampling seed");
ABSL_FLAG(std::string, compute_dtype, "bfloat16", "float32 | bfloat16 (float32 master weights)");
ABSL_FLAG(std::string, storage_dtype, "bfloat16", "model.safetensors dtype: float32 | bfloat16");
ABSL_FLAG(bool, freeze_controller, false, "keep the controller at its initial weights");
ABSL_FLAG(int, threads, 0, "torch threads (0 = one per core)");
// The MoE shape (--family=olmoe): unset means MoeTrainShape's.
ABSL_FLAG(std::optional<int64_t>, num_experts, std::nullopt, "olmoe: routed experts per layer E");
ABSL_FLAG(std::optional<int64_t>, experts_per_token, std::nullopt, "olmoe: top-k");
ABSL_FLAG(std::optional<int64_t>, expert_width, std::nullopt,
          "olmoe: each expert's intermediate_size");
ABSL_FLAG(double, aux_loss_coef, 0.01, "olmoe: weight of the load-balancing loss");

namespace fca {
namespace {

engine::CorpusSplitOptions SplitOptions() {
  engine::CorpusSplitOptions o;
  o.corpus_dir = absl::GetFlag(FLAGS_corpus);
  o.eval_files = absl::GetFlag(FLAGS_eval_files);
  o.calib_files = absl::GetFlag(FLAGS_calib_files);
  o.check_window = absl::GetFlag(FLAGS_window);
  return o;
}

void PrintSplit(const engine::CorpusSplit& s) {
  std::fprintf(stderr, "split rule: %s\n", s.rule.c_str());
  for (const engine::CorpusFile& f : s.files) {
    if (f.part == "train" && f.dropped_records == 0) continue;
    std::fprintf(stderr, "  %-14s %-5s %7lld bytes, %4lld records, %lld dropped as repeats\n",
                 f.name.c_str(), f.part.c_str(), static_cast<long long>(f.bytes),
                 static_cast<long long>(f.records), static_cast<long long>(f.dropped_records));
  }
  int train_files = 0;
  for (const engine::CorpusFile& f : s.files) train_files += f.part == "train";
  std::fprintf(stderr, "  train %zu bytes (%d files), calib %zu bytes, eval %zu bytes\n",
               s.train.size(), train_files, s.calib.size(), s.eval.size());
}

absl::Status Split() {
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  FCA_ASSIGN_OR_RETURN(engine::CorpusSplit split, engine::SplitCorpus(SplitOptions()));
  PrintSplit(split);
  FCA_RETURN_IF_ERROR(engine::WriteCorpusSplit(split, absl::GetFlag(FLAGS_out)));
  std::fprintf(stderr, "wrote %s/{train,calib,eval}.txt and split.json\n",
               absl::GetFlag(FLAGS_out).c_str());
  return absl::OkStatus();
}

std::string MinSec(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

// A progress bar redrawn in place on a terminal; plain lines at log points
// (and evaluations) otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(fileno(stderr)) != 0) {}

  void operator()(const engine::TrainProgress& p) {
    const double eta = (p.steps - p.step) * p.wall_seconds / p.step;
    if (p.eval_loss) last_eval_ = absl::StrFormat("%.4f", *p.eval_loss);
    const std::string stats =
        absl::StrFormat("step %d/%d loss %.4f eval %s lr %.2e %.0f tok/s elapsed %s eta %s", p.step,
                        p.steps, p.train_loss, last_eval_, p.learning_rate, p.tokens_per_second,
                        MinSec(p.wall_seconds), MinSec(eta));
    if (!tty_) {
      if (p.logged) std::fprintf(stderr, "%s\n", stats.c_str());
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (p.step != p.steps && !p.eval_loss && now - last_draw_ < std::chrono::milliseconds(200)) {
      return;
    }
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * p.step / p.steps);
    std::fprintf(stderr, "\r[%s%s] %s\033[K", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), stats.c_str());
    if (p.eval_loss || p.step == p.steps) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::string last_eval_ = "-";
  std::chrono::steady_clock::time_point last_draw_;
};

// The bundled models' shape (docs/user-guide.md "The bundled models"), where no flag
// sets it.
engine::TransformerConfig TrainShape() {
  engine::TransformerConfig c;
  c.family = "featuregate";
  c.d_model = 192;
  c.n_layers = 4;
  c.n_heads = 6;
  c.n_groups = 8;
  c.d_ff = 768;
  c.controller_width = 64;
  return c;
}

// The bundled MoE's shape (docs/user-guide.md "The bundled models"): the
// seeds' width, depth and heads; 8 experts, top-2, each 256 wide, so that the
// two experts a token runs hold the dense twin's MLP parameters
// (2 x 3 x 192 x 256 = 2 x 192 x 768).
engine::MoeConfig MoeTrainShape(const engine::TransformerConfig& flags, int64_t window) {
  engine::MoeConfig c;
  c.model_type = flags.family;
  c.vocab_size = 256;
  c.hidden_size = flags.d_model;
  c.num_hidden_layers = flags.n_layers;
  c.num_attention_heads = flags.n_heads;
  c.num_key_value_heads = flags.n_heads;
  c.max_position_embeddings = window;
  c.num_experts = absl::GetFlag(FLAGS_num_experts).value_or(8);
  c.num_experts_per_tok = absl::GetFlag(FLAGS_experts_per_token).value_or(2);
  c.expert_intermediate_size = absl::GetFlag(FLAGS_expert_width).value_or(256);
  c.rms_norm_eps = 1e-5;
  return c;
}

bool MoeFlagsGiven() {
  return absl::GetFlag(FLAGS_num_experts) || absl::GetFlag(FLAGS_experts_per_token) ||
         absl::GetFlag(FLAGS_expert_width);
}

void PrintStart(const std::string& shape, const engine::TrainOptions& o) {
  std::fprintf(stderr, "training %s for %lld steps of %lld x %lld tokens (%s compute, seed %llu)\n",
               shape.c_str(), static_cast<long long>(o.steps), static_cast<long long>(o.batch_size),
               static_cast<long long>(o.window_length), o.compute_dtype.c_str(),
               static_cast<unsigned long long>(o.seed));
}

absl::Status Train() {
  engine::TrainOptions o;
  o.out_dir = absl::GetFlag(FLAGS_out);
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  FCA_ASSIGN_OR_RETURN(engine::CorpusSplit split, engine::SplitCorpus(SplitOptions()));
  PrintSplit(split);
  engine::UseCorpusSplit(std::move(split), &o);
  o.log_path = absl::GetFlag(FLAGS_log);
  o.window_length = absl::GetFlag(FLAGS_window);
  o.batch_size = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup);
  o.learning_rate = absl::GetFlag(FLAGS_lr);
  o.min_learning_rate = absl::GetFlag(FLAGS_min_lr);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.log_interval = absl::GetFlag(FLAGS_log_interval);
  o.eval_interval = absl::GetFlag(FLAGS_eval_interval);
  o.eval_max_windows = absl::GetFlag(FLAGS_eval_windows);
  o.final_eval_max_windows = absl::GetFlag(FLAGS_final_eval_windows);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.compute_dtype = absl::GetFlag(FLAGS_compute_dtype);
  o.storage_dtype = absl::GetFlag(FLAGS_storage_dtype);
  o.freeze_controller = absl::GetFlag(FLAGS_freeze_controller);
  o.aux_loss_coef = absl::GetFlag(FLAGS_aux_loss_coef);

  engine::TransformerConfig c = tools::ModelConfigFromFlags(TrainShape());
  c.max_seq_len = o.window_length;
  ProgressPrinter printer;
  const auto progress = [&](const engine::TrainProgress& p) { printer(p); };
  absl::StatusOr<engine::TrainReport> trained;
  if (c.family == "olmoe") {
    const engine::MoeConfig moe = MoeTrainShape(c, o.window_length);
    PrintStart(
        absl::StrFormat("%s hidden_size=%d layers=%d experts=%d top-%d width %d", moe.model_type,
                        moe.hidden_size, moe.num_hidden_layers, moe.num_experts,
                        moe.num_experts_per_tok, moe.expert_intermediate_size),
        o);
    trained = engine::TrainModel(o, moe, progress);
  } else {
    if (MoeFlagsGiven()) {
      return absl::InvalidArgumentError(
          "--num_experts, --experts_per_token and --expert_width apply to --family=olmoe only");
    }
    PrintStart(absl::StrFormat("%s d_model=%d n_layers=%d", c.family, c.d_model, c.n_layers), o);
    trained = engine::TrainModel(o, c, progress);
  }
  FCA_ASSIGN_OR_RETURN(engine::TrainReport r, std::move(trained));
  std::printf(
      "model %s: %lld parameters, final eval NLL %.4f nats/byte over %lld windows; "
      "%lld tokens in %.1f s of training (%.0f tok/s), %.1f s in all; log %s\n",
      r.model_dir.c_str(), static_cast<long long>(r.num_parameters), r.final_eval_nll,
      static_cast<long long>(r.final_eval_windows), static_cast<long long>(r.tokens_seen),
      r.train_seconds, r.tokens_per_second, r.wall_seconds, r.log_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  // The libraries' diagnostics; this tool's own progress, notes and report
  // are its output, printed as they are.
  fca::InitServerLogging(argv[0]);
  fca::tools::ConfigureToolUsage(
      "fca-train", "server/tools/train/train_main.cc",
      absl::StrCat("fca-train split|train [flags]: byte-level models on fortunes; the model "
                   "shape where no flag sets it: ",
                   fca::tools::ModelShapeText(fca::TrainShape()),
                   "; --family=olmoe: 8 experts, top-2, expert_width=256"));
  fca::ExitZeroAfterHelp(argc, argv);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  // One training step at a time: its operators use the threads.
  fca::engine::ConfigureRuntime(
      {absl::GetFlag(FLAGS_threads), fca::engine::Parallelism::kWithinOps});
  return fca::tools::RunSubcommand("fca-train", args,
                                   {{"split", fca::Split}, {"train", fca::Train}});
}
