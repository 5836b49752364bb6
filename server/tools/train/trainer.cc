#include "server/tools/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
// clip_grad.h needs torch/types.h and does not include it.
// clang-format off
#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>  // torch::nn::utils::clip_grad_norm_
// clang-format on
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/stopwatch.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/moe_init.h"
#include "server/engine/models/moe_net.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"
#include "server/engine/models/transformer_net.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;
using ProgressFn = std::function<void(const TrainProgress&)>;
constexpr double kPi = 3.14159265358979323846;
constexpr char kLoadBalancingLoss[] =
    "per layer E * sum_e f_e * P_e (f_e: tokens choosing expert e over N; P_e: its mean router "
    "probability), averaged over the layers; added to the NLL times aux_loss_coef";

absl::Status Require(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError("training options: " + what);
}

// `vocab_size` and `max_seq_len`: the model's.
absl::Status ValidateOptions(const TrainOptions& o, int64_t vocab_size, int64_t max_seq_len) {
  const int64_t T = o.window_length;
  FCA_RETURN_IF_ERROR(Require(vocab_size >= 256, "vocab_size must be at least 256 (bytes)"));
  FCA_RETURN_IF_ERROR(
      Require(T >= 2 && T <= max_seq_len,
              absl::StrFormat("window_length %d must be in [2, max_seq_len %d]", T, max_seq_len)));
  FCA_RETURN_IF_ERROR(Require(o.batch_size >= 1, "batch_size must be at least 1"));
  FCA_RETURN_IF_ERROR(Require(o.steps >= 1, "steps must be at least 1"));
  FCA_RETURN_IF_ERROR(Require(o.warmup_steps >= 0 && o.warmup_steps <= o.steps,
                              "warmup_steps must be in [0, steps]"));
  FCA_RETURN_IF_ERROR(Require(o.learning_rate > 0, "learning_rate must be positive"));
  FCA_RETURN_IF_ERROR(Require(o.min_learning_rate >= 0 && o.min_learning_rate <= o.learning_rate,
                              "min_learning_rate must be in [0, learning_rate]"));
  FCA_RETURN_IF_ERROR(Require(o.weight_decay >= 0, "weight_decay must not be negative"));
  FCA_RETURN_IF_ERROR(Require(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
                              "beta1 and beta2 must be in [0, 1)"));
  FCA_RETURN_IF_ERROR(Require(o.adam_eps > 0, "adam_eps must be positive"));
  FCA_RETURN_IF_ERROR(Require(o.grad_clip >= 0, "grad_clip must not be negative"));
  FCA_RETURN_IF_ERROR(Require(o.log_interval >= 1, "log_interval must be at least 1"));
  FCA_RETURN_IF_ERROR(
      Require(o.eval_interval >= 0 && o.eval_max_windows >= 0 && o.final_eval_max_windows >= 0,
              "eval_interval and the eval window limits must not be negative"));
  FCA_RETURN_IF_ERROR(Require(o.init_std > 0, "init_std must be positive"));
  FCA_RETURN_IF_ERROR(Require(o.aux_loss_coef >= 0, "aux_loss_coef must not be negative"));
  FCA_RETURN_IF_ERROR(Require(o.compute_dtype == "float32" || o.compute_dtype == "bfloat16",
                              "compute_dtype must be float32 or bfloat16"));
  FCA_RETURN_IF_ERROR(Require(o.storage_dtype == "float32" || o.storage_dtype == "bfloat16",
                              "storage_dtype must be float32 or bfloat16"));
  FCA_RETURN_IF_ERROR(
      Require(static_cast<int64_t>(o.train_text.size()) >= T,
              absl::StrFormat("the training text has %d bytes: not one window of %d",
                              o.train_text.size(), T)));
  FCA_RETURN_IF_ERROR(
      Require(static_cast<int64_t>(o.eval_text.size()) >= T,
              absl::StrFormat("the evaluation text has %d bytes: not one window of %d",
                              o.eval_text.size(), T)));
  return Require(!o.out_dir.empty(), "out_dir is required");
}

std::vector<int32_t> ByteIds(const std::string& text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

// The consecutive windows of `text` as int64 [N, T].
absl::StatusOr<at::Tensor> EvalWindows(const std::string& text, int64_t T, int64_t max_windows) {
  FCA_ASSIGN_OR_RETURN(WindowSet w, MakeWindows(ByteIds(text), T, max_windows, "eval"));
  return at::from_blob(w.ids.data(), {w.count(), T}, at::kInt).to(at::kLong);
}

// Mean next-token NLL per window over positions 1..T-1 (fca.md), float32 [B],
// from logits of any dtype.
at::Tensor WindowNll(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t T = ids.size(1);
  at::Tensor lp = at::log_softmax(logits.slice(1, 0, T - 1).to(at::kFloat), -1);
  return -lp.gather(-1, ids.slice(1, 1, T).unsqueeze(-1)).squeeze(-1).mean(1);
}

// Mean of WindowNll over `windows`, in batches of `batch`.
absl::StatusOr<double> MeanNll(
    const at::Tensor& windows, int64_t batch,
    const std::function<absl::StatusOr<at::Tensor>(const at::Tensor&)>& logits_of) {
  double sum = 0;
  const int64_t n = windows.size(0);
  for (int64_t b = 0; b < n; b += batch) {
    const at::Tensor ids = windows.slice(0, b, std::min(n, b + batch));
    FCA_ASSIGN_OR_RETURN(at::Tensor logits, logits_of(ids));
    sum += WindowNll(logits, ids).to(at::kDouble).sum().item<double>();
  }
  return sum / static_cast<double>(n);
}

TensorData ToTensorData(const std::string& name, const at::Tensor& t, DType dtype) {
  at::Tensor c =
      t.detach().to(dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat).contiguous().cpu();
  return TensorData{name, dtype, c.sizes().vec(),
                    std::string(static_cast<const char*>(c.data_ptr()), c.nbytes())};
}

json::Value Num(double v) { return json::Value::Number(v); }
json::Value Int(int64_t v) { return json::Value::Int(v); }

// `aux_loss`: the family has one (MoE), so its coefficient is a setting.
json::Value HyperparametersToJson(const TrainOptions& o, bool aux_loss) {
  json::Value h = json::Value::MakeObject();
  h.Set("window_length", Int(o.window_length));
  h.Set("batch_size", Int(o.batch_size));
  h.Set("steps", Int(o.steps));
  h.Set("warmup_steps", Int(o.warmup_steps));
  h.Set("schedule", json::Value::String("linear warm-up, then cosine to min_learning_rate"));
  h.Set("learning_rate", Num(o.learning_rate));
  h.Set("min_learning_rate", Num(o.min_learning_rate));
  h.Set("optimizer", json::Value::String("AdamW (weight decay on tensors of rank >= 2)"));
  h.Set("weight_decay", Num(o.weight_decay));
  h.Set("beta1", Num(o.beta1));
  h.Set("beta2", Num(o.beta2));
  h.Set("adam_eps", Num(o.adam_eps));
  h.Set("grad_clip", Num(o.grad_clip));
  h.Set("log_interval", Int(o.log_interval));
  h.Set("eval_interval", Int(o.eval_interval));
  h.Set("eval_max_windows", Int(o.eval_max_windows));
  h.Set("final_eval_max_windows", Int(o.final_eval_max_windows));
  h.Set("seed", Int(static_cast<int64_t>(o.seed)));
  h.Set("init_std", Num(o.init_std));
  h.Set("compute_dtype", json::Value::String(o.compute_dtype));
  h.Set("storage_dtype", json::Value::String(o.storage_dtype));
  h.Set("freeze_controller", json::Value::Bool(o.freeze_controller));
  if (aux_loss) {
    h.Set("aux_loss", json::Value::String(kLoadBalancingLoss));
    h.Set("aux_loss_coef", Num(o.aux_loss_coef));
  }
  h.Set("torch_threads", Int(at::get_num_threads()));
  return h;
}

// What the loop needs of a family: initial weights, the differentiable
// forward over a list of weights in the family's spec order, and the folder
// the server loads.
class Family {
 public:
  struct Output {
    at::Tensor logits;    // [B, T, V]
    at::Tensor aux_loss;  // scalar float32; undefined where the family has none
  };
  virtual ~Family() = default;
  virtual absl::StatusOr<std::vector<TensorData>> InitialWeights(const InitOptions& init) const = 0;
  // `training`: the auxiliary loss is wanted as well.
  virtual absl::StatusOr<Output> Forward(std::vector<at::Tensor> weights, const at::Tensor& ids,
                                         bool training) const = 0;
  virtual absl::Status WriteDir(const std::string& dir,
                                const std::vector<TensorData>& weights) const = 0;
  virtual json::Value ConfigJson() const = 0;
  virtual bool HasAuxLoss() const = 0;
  // The weights --freeze_controller leaves alone.
  virtual bool IsController(const std::string& name) const = 0;
};

class TransformerFamily : public Family {
 public:
  explicit TransformerFamily(const TransformerConfig& config) : c_(config) {}

  absl::StatusOr<std::vector<TensorData>> InitialWeights(const InitOptions& init) const override {
    return InitTransformerWeights(c_, init);
  }
  absl::StatusOr<Output> Forward(std::vector<at::Tensor> weights, const at::Tensor& ids,
                                 bool /*training*/) const override {
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<TransformerNet> net,
                         TransformerNet::Create(c_, std::move(weights)));
    FCA_ASSIGN_OR_RETURN(at::Tensor logits,
                         net->Forward(ids, CoefficientMode::kLive, nullptr, nullptr));
    return Output{logits, at::Tensor()};
  }
  absl::Status WriteDir(const std::string& dir,
                        const std::vector<TensorData>& weights) const override {
    return WriteTransformerModelDir(dir, c_, weights);
  }
  json::Value ConfigJson() const override { return TransformerConfigToJson(c_); }
  bool HasAuxLoss() const override { return false; }
  bool IsController(const std::string& name) const override {
    return name.find(".ctrl.") != std::string::npos;
  }

 private:
  const TransformerConfig& c_;
};

class MoeFamily : public Family {
 public:
  explicit MoeFamily(const MoeConfig& config) : c_(config) {}

  absl::StatusOr<std::vector<TensorData>> InitialWeights(const InitOptions& init) const override {
    return InitMoeWeights(c_, init);
  }
  absl::StatusOr<Output> Forward(std::vector<at::Tensor> weights, const at::Tensor& ids,
                                 bool training) const override {
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<MoeNet> net, MoeNet::Create(c_, std::move(weights)));
    std::vector<at::Tensor> coefficients;
    FCA_ASSIGN_OR_RETURN(
        at::Tensor logits,
        net->Forward(ids, training ? CoefficientMode::kLiveRecord : CoefficientMode::kLive,
                     &coefficients, nullptr));
    Output out{logits, at::Tensor()};
    if (training) out.aux_loss = LoadBalancingLoss(coefficients);
    return out;
  }
  absl::Status WriteDir(const std::string& dir,
                        const std::vector<TensorData>& weights) const override {
    return WriteMoeModelDir(dir, c_, weights);
  }
  json::Value ConfigJson() const override { return MoeConfigToJson(c_); }
  bool HasAuxLoss() const override { return true; }
  // The routers (mlp.gate, block_sparse_moe.gate) and Qwen's
  // shared_expert_gate; not the experts' gate_proj.
  bool IsController(const std::string& name) const override {
    constexpr std::string_view kTail = "gate.weight";
    return name.size() >= kTail.size() &&
           name.compare(name.size() - kTail.size(), kTail.size(), kTail) == 0;
  }

 private:
  // Per layer, E * sum_e f_e * P_e (Switch Transformer): f_e the share of
  // the N * k top-k choices that went to expert e, times k (the number of
  // tokens that chose e over N), P_e the mean router probability of e. Its
  // minimum, k, is perfectly even routing. Averaged over the layers; only
  // P_e carries a gradient.
  at::Tensor LoadBalancingLoss(const std::vector<at::Tensor>& coefficients) const {
    const int64_t E = c_.num_experts;
    at::Tensor total;
    int64_t layers = 0;
    for (const at::Tensor& site : coefficients) {
      if (site.size(-1) != E) continue;  // qwen2_moe's shared-expert gates
      const at::Tensor probs = site.reshape({-1, E});
      const at::Tensor chosen = RouterTopK(probs.detach(), c_.num_experts_per_tok).second;
      const at::Tensor tokens_per_expert =
          at::bincount(chosen.reshape(-1), {}, E).to(at::kFloat) / probs.size(0);
      const at::Tensor loss = E * (tokens_per_expert * probs.mean(0)).sum();
      total = total.defined() ? total + loss : loss;
      ++layers;
    }
    return total / layers;
  }

  const MoeConfig& c_;
};

class Trainer {
 public:
  Trainer(const TrainOptions& options, const Family& family, const ProgressFn& progress)
      : o_(options),
        family_(family),
        progress_(progress),
        rng_(DeriveSeed(options.seed, "windows")) {}

  absl::StatusOr<TrainReport> Run() {
    start_ = Clock::now();
    FCA_RETURN_IF_ERROR(GuardTorch("training setup", [&] { return Setup(); }));
    for (int64_t step = 1; step <= o_.steps; ++step) FCA_RETURN_IF_ERROR(Step(step));
    report_.tokens_per_second = report_.tokens_seen / std::max(1e-9, report_.train_seconds);
    FCA_RETURN_IF_ERROR(GuardTorch("writing the model", [&] { return WriteModel(); }));
    FCA_RETURN_IF_ERROR(GuardTorch("final evaluation", [&] { return FinalEval(); }));
    report_.wall_seconds = SecondsSince(start_);
    FCA_RETURN_IF_ERROR(WriteLog());
    return report_;
  }

 private:
  absl::Status Setup() {
    const std::vector<int32_t> bytes = ByteIds(o_.train_text);
    train_ids_ = at::from_blob(const_cast<int32_t*>(bytes.data()),
                               {static_cast<int64_t>(bytes.size())}, at::kInt)
                     .to(at::kLong);
    FCA_ASSIGN_OR_RETURN(eval_windows_,
                         EvalWindows(o_.eval_text, o_.window_length, o_.eval_max_windows));
    InitOptions init;
    init.seed = o_.seed;
    init.init_std = o_.init_std;
    FCA_ASSIGN_OR_RETURN(std::vector<TensorData> initial, family_.InitialWeights(init));
    std::vector<at::Tensor> decay, no_decay;
    for (const TensorData& d : initial) {
      at::Tensor w = at::from_blob(const_cast<char*>(d.bytes.data()), d.shape, at::kFloat).clone();
      const bool frozen = o_.freeze_controller && family_.IsController(d.name);
      w.requires_grad_(!frozen);
      names_.push_back(d.name);
      masters_.push_back(w);
      report_.num_parameters += w.numel();
      if (frozen) continue;
      trainable_.push_back(w);
      (w.dim() >= 2 ? decay : no_decay).push_back(w);
    }
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(o_.learning_rate)
              .betas(std::make_tuple(o_.beta1, o_.beta2))
              .eps(o_.adam_eps)
              .weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, opts(o_.weight_decay));
    groups.emplace_back(no_decay, opts(0.0));
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        std::move(groups), torch::optim::AdamWOptions(o_.learning_rate));
    return absl::OkStatus();
  }

  double LearningRate(int64_t step) const {
    if (step <= o_.warmup_steps) return o_.learning_rate * step / o_.warmup_steps;
    const double span = static_cast<double>(std::max<int64_t>(1, o_.steps - o_.warmup_steps));
    const double progress = (step - o_.warmup_steps) / span;
    return o_.min_learning_rate +
           0.5 * (o_.learning_rate - o_.min_learning_rate) * (1.0 + std::cos(kPi * progress));
  }

  // Random T-token slices of the training text, int64 [B, T].
  at::Tensor SampleBatch() {
    const int64_t T = o_.window_length, B = o_.batch_size;
    const uint64_t starts = static_cast<uint64_t>(train_ids_.size(0) - T + 1);
    std::vector<int64_t> index(B * T);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = static_cast<int64_t>(rng_.Uniform(starts));
      for (int64_t t = 0; t < T; ++t) index[b * T + t] = s + t;
    }
    at::Tensor idx = at::from_blob(index.data(), {B * T}, at::kLong);
    return train_ids_.index_select(0, idx).view({B, T});
  }

  // The master weights, or bfloat16 copies of them (whose gradients flow
  // back to the float32 masters through the cast).
  std::vector<at::Tensor> ComputeWeights(bool for_training) const {
    if (!for_training || o_.compute_dtype == "float32") return masters_;
    std::vector<at::Tensor> cast;
    for (const at::Tensor& m : masters_) cast.push_back(m.to(at::kBFloat16));
    return cast;
  }

  // One optimisation step; `nll` and `aux` (0 without one) are its losses.
  absl::Status TrainStep(double lr, double* nll, double* aux) {
    for (auto& group : optimizer_->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
    const at::Tensor ids = SampleBatch();
    FCA_ASSIGN_OR_RETURN(Family::Output out, family_.Forward(ComputeWeights(true), ids, true));
    const at::Tensor nll_loss = WindowNll(out.logits, ids).mean();
    at::Tensor loss = nll_loss;
    if (out.aux_loss.defined()) loss = loss + o_.aux_loss_coef * out.aux_loss;
    optimizer_->zero_grad();
    loss.backward();
    if (o_.grad_clip > 0) torch::nn::utils::clip_grad_norm_(trainable_, o_.grad_clip);
    optimizer_->step();
    *nll = nll_loss.item<double>();
    *aux = out.aux_loss.defined() ? out.aux_loss.item<double>() : 0.0;
    return absl::OkStatus();
  }

  // Periodic evaluation: the float32 master weights, without autograd.
  absl::StatusOr<double> EvalMasters() const {
    c10::InferenceMode guard;
    return MeanNll(eval_windows_, o_.batch_size,
                   [&](const at::Tensor& ids) -> absl::StatusOr<at::Tensor> {
                     FCA_ASSIGN_OR_RETURN(Family::Output out,
                                          family_.Forward(ComputeWeights(false), ids, false));
                     return out.logits;
                   });
  }

  absl::Status Step(int64_t step) {
    const double lr = LearningRate(step);
    const Clock::time_point t0 = Clock::now();
    double loss = 0, aux = 0;
    FCA_RETURN_IF_ERROR(GuardTorch(absl::StrFormat("training step %d", step),
                                   [&] { return TrainStep(lr, &loss, &aux); }));
    if (!std::isfinite(loss)) {
      return absl::InternalError(absl::StrFormat(
          "training diverged: loss is %g at step %d (lower learning_rate or use float32)", loss,
          step));
    }
    report_.train_seconds += SecondsSince(t0);
    report_.tokens_seen += o_.batch_size * o_.window_length;
    interval_loss_ += loss;
    interval_aux_ += aux;
    ++interval_steps_;

    TrainProgress p;
    p.step = step;
    p.steps = o_.steps;
    p.learning_rate = lr;
    p.train_loss = loss;
    p.tokens_seen = report_.tokens_seen;
    p.tokens_per_second = report_.tokens_seen / std::max(1e-9, report_.train_seconds);
    if (o_.eval_interval > 0 && (step % o_.eval_interval == 0 || step == o_.steps)) {
      FCA_ASSIGN_OR_RETURN(double nll, GuardTorch(absl::StrFormat("evaluation at step %d", step),
                                                  [&] { return EvalMasters(); }));
      p.eval_loss = nll;
    }
    p.wall_seconds = SecondsSince(start_);
    if (step % o_.log_interval == 0 || step == o_.steps || p.eval_loss) {
      TrainLogEntry e;
      e.step = step;
      e.learning_rate = lr;
      e.train_loss = interval_loss_ / interval_steps_;
      if (family_.HasAuxLoss()) e.aux_loss = interval_aux_ / interval_steps_;
      e.eval_loss = p.eval_loss;
      e.tokens_seen = report_.tokens_seen;
      e.wall_seconds = p.wall_seconds;
      report_.log.push_back(e);
      interval_loss_ = 0;
      interval_aux_ = 0;
      interval_steps_ = 0;
      p.logged = true;
    }
    if (progress_) progress_(p);
    return absl::OkStatus();
  }

  absl::Status WriteModel() {
    const DType dtype = o_.storage_dtype == "bfloat16" ? DType::kBF16 : DType::kF32;
    std::vector<TensorData> out;
    for (size_t i = 0; i < masters_.size(); ++i) {
      out.push_back(ToTensorData(names_[i], masters_[i], dtype));
    }
    report_.model_dir = o_.out_dir;
    return family_.WriteDir(o_.out_dir, out);
  }

  // The model as written, through the server's loader, in float32 on CPU.
  absl::Status FinalEval() {
    const std::string name = std::filesystem::path(o_.out_dir).filename().string();
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<ControlledModel> model,
                         LoadModel(o_.out_dir, name, ComputeOptions{}));
    FCA_ASSIGN_OR_RETURN(at::Tensor windows,
                         EvalWindows(o_.eval_text, o_.window_length, o_.final_eval_max_windows));
    FCA_ASSIGN_OR_RETURN(report_.final_eval_nll,
                         MeanNll(windows, o_.batch_size, [&](const at::Tensor& ids) {
                           return model->Forward(ids, CoefficientMode::kLive, nullptr);
                         }));
    report_.final_eval_windows = windows.size(0);
    report_.weights_sha256 = model->info().weights_sha256;
    return absl::OkStatus();
  }

  absl::Status WriteLog() {
    report_.log_path = o_.log_path.empty() ? o_.out_dir + "/training_log.json" : o_.log_path;
    json::Value v = json::Value::MakeObject();
    v.Set("tool", json::Value::String("fca-train"));
    v.Set("torch_version", json::Value::String(TorchVersion()));
    v.Set("config", family_.ConfigJson());
    v.Set("hyperparameters", HyperparametersToJson(o_, family_.HasAuxLoss()));
    v.Set("corpus", o_.provenance);
    json::Value data = json::Value::MakeObject();
    data.Set("train_bytes", Int(static_cast<int64_t>(o_.train_text.size())));
    data.Set("train_sha256", json::Value::String(Sha256Hex(o_.train_text)));
    data.Set("eval_bytes", Int(static_cast<int64_t>(o_.eval_text.size())));
    data.Set("eval_sha256", json::Value::String(Sha256Hex(o_.eval_text)));
    data.Set("periodic_eval_windows", Int(eval_windows_.size(0)));
    v.Set("data", std::move(data));
    json::Value steps = json::Value::MakeArray();
    for (const TrainLogEntry& e : report_.log) {
      json::Value s = json::Value::MakeObject();
      s.Set("step", Int(e.step));
      s.Set("learning_rate", Num(e.learning_rate));
      s.Set("train_loss", Num(e.train_loss));
      if (e.aux_loss) s.Set("aux_loss", Num(*e.aux_loss));
      if (e.eval_loss) s.Set("eval_loss", Num(*e.eval_loss));
      s.Set("tokens_seen", Int(e.tokens_seen));
      s.Set("wall_seconds", Num(e.wall_seconds));
      steps.mutable_array().push_back(std::move(s));
    }
    v.Set("steps", std::move(steps));
    json::Value r = json::Value::MakeObject();
    r.Set("final_eval_nll_nats_per_byte", Num(report_.final_eval_nll));
    r.Set("final_eval_windows", Int(report_.final_eval_windows));
    r.Set("tokens_seen", Int(report_.tokens_seen));
    r.Set("train_seconds", Num(report_.train_seconds));
    r.Set("wall_seconds", Num(report_.wall_seconds));
    r.Set("tokens_per_second", Num(report_.tokens_per_second));
    r.Set("num_parameters", Int(report_.num_parameters));
    r.Set("weights_sha256", json::Value::String(report_.weights_sha256));
    v.Set("result", std::move(r));
    std::ofstream out(report_.log_path, std::ios::trunc);
    out << json::Write(v, /*pretty=*/true) << "\n";
    if (!out.good())
      return absl::InternalError("cannot write the training log " + report_.log_path);
    return absl::OkStatus();
  }

  const TrainOptions& o_;
  const Family& family_;
  const ProgressFn& progress_;
  Rng rng_;
  Clock::time_point start_;
  at::Tensor train_ids_;     // int64 [bytes]
  at::Tensor eval_windows_;  // int64 [N, T], periodic evaluation
  std::vector<std::string> names_;
  std::vector<at::Tensor> masters_;    // float32, the family's spec order
  std::vector<at::Tensor> trainable_;  // masters the optimizer updates
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  double interval_loss_ = 0;  // NLL
  double interval_aux_ = 0;
  int64_t interval_steps_ = 0;
  TrainReport report_;
};

}  // namespace

void UseCorpusSplit(CorpusSplit split, TrainOptions* o) {
  o->provenance = CorpusSplitToJson(split);
  o->train_text = std::move(split.train);
  o->eval_text = std::move(split.eval);
}

absl::StatusOr<TrainReport> TrainModel(const TrainOptions& options, const TransformerConfig& config,
                                       const ProgressFn& progress) {
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  FCA_RETURN_IF_ERROR(ValidateOptions(options, config.vocab_size, config.max_seq_len));
  const TransformerFamily family(config);
  return Trainer(options, family, progress).Run();
}

absl::StatusOr<TrainReport> TrainModel(const TrainOptions& options, const MoeConfig& config,
                                       const ProgressFn& progress) {
  // The one validation of an MoE config is the parser's: round-trip it.
  FCA_RETURN_IF_ERROR(ParseMoeConfig(json::Write(MoeConfigToJson(config))).status());
  FCA_RETURN_IF_ERROR(ValidateOptions(options, config.vocab_size, config.max_position_embeddings));
  const MoeFamily family(config);
  return Trainer(options, family, progress).Run();
}

}  // namespace fca::engine
