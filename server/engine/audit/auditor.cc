#include "server/engine/audit/auditor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/build_version.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "server/engine/audit/batches.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/execution.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Mean next-token NLL per sequence (nats/token over positions 1..T-1),
// computed in float32 from logits of any dtype, returned as float64 [B].
at::Tensor SequenceNll(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t T = ids.size(1);
  at::Tensor lp = at::log_softmax(logits.slice(1, 0, T - 1).to(at::kFloat), -1);
  at::Tensor target = ids.slice(1, 1, T).unsqueeze(-1).to(lp.device());
  return -lp.gather(-1, target).squeeze(-1).to(at::kDouble).mean(1).cpu();
}

// Windows [begin, end) as an int64 [end - begin, T] tensor.
at::Tensor BatchIds(const WindowSet& w, int64_t begin, int64_t end) {
  const int64_t T = w.window_length;
  return at::from_blob(const_cast<int32_t*>(w.ids.data()) + begin * T, {end - begin, T}, at::kInt)
      .to(at::kLong);
}

// Writes values [n] (float64) to (*out)[at .. at + n).
void WriteAt(std::vector<double>* out, const at::Tensor& values, int64_t at) {
  auto acc = values.accessor<double, 1>();
  for (int64_t i = 0; i < values.size(0); ++i) (*out)[at + i] = acc[i];
}

bool Contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

absl::Status ValidateOptions(const AuditOptions& o) {
  for (const std::string& name : o.interventions) {
    if (!Contains(AllInterventions(), name)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown intervention '%s' (known: %s)", name, InterventionList()));
    }
  }
  FCA_RETURN_IF_ERROR(ValidateDependenceOptions(o));
  if (o.batch_size < 1 || o.batch_size > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch_size %d is outside [1, 4096]", o.batch_size));
  }
  if (o.bootstrap_resamples < 1 || o.bootstrap_resamples > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bootstrap_resamples %d is outside [1, 1000000]", o.bootstrap_resamples));
  }
  if (!(o.ci_level > 0 && o.ci_level < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("ci_level %g is outside (0, 1)", o.ci_level));
  }
  if (o.timing_repeats < 0 || o.timing_repeats > 1000 || o.timing_warmup < 0) {
    return absl::InvalidArgumentError("timing_repeats must be in [0, 1000], warmup >= 0");
  }
  if (o.timing_max_repeats < 0 || o.timing_max_repeats > 100000 ||
      !(o.timing_budget_seconds >= 0) || !(o.timing_relative_precision >= 0) ||
      !(o.timing_resolution >= 0)) {
    return absl::InvalidArgumentError(
        "timing_max_repeats must be in [0, 100000]; the timing budget, precision and "
        "resolution >= 0");
  }
  if (!(o.fidelity_tolerance >= 0)) {
    return absl::InvalidArgumentError("fidelity_tolerance must be >= 0");
  }
  if (o.fidelity_check_every < 1 || o.fidelity_check_every > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fidelity_check_every %d is outside [1, 1000000]", o.fidelity_check_every));
  }
  return absl::OkStatus();
}

// Everything needed to audit one model; members keep the phases small.
class ModelAudit {
 public:
  ModelAudit(const AuditRequest& req, const std::vector<std::string>& interventions, int64_t index,
             double* units_done, double units_total)
      : req_(req),
        opt_(req.options),
        interventions_(interventions),
        model_(*req.models[index]),
        index_(index),
        units_done_(units_done),
        units_total_(units_total) {}

  absl::StatusOr<ModelReport> Run() {
    const Clock::time_point start = Clock::now();
    FCA_RETURN_IF_ERROR(MakeWindowSets());
    report_.model = model_.info();
    report_.sites = model_.sites();
    // Asked before any pass, so a model without them fails in a moment,
    // not after its LIVE passes.
    FCA_ASSIGN_OR_RETURN(neutral_, model_.NeutralCoefficients());
    FCA_RETURN_IF_ERROR(CheckNeutralAvailable());
    // The passes' FLOPs: the model's counters grow with every forward until
    // the execution audit resets them.
    const double flops_before = model_.counters().flops;
    const Clock::time_point passes_start = Clock::now();
    FCA_RETURN_IF_ERROR(LiveEvalPass());
    FCA_RETURN_IF_ERROR(LiveCalibPass());
    FCA_ASSIGN_OR_RETURN(calib_stats_, ComputeCalibrationStats(calib_coeff_, model_.sites()));
    for (const std::string& name : interventions_) {
      if (name != kCorrect) FCA_RETURN_IF_ERROR(ReplayPass(name));
    }
    FCA_RETURN_IF_ERROR(DependencePasses());
    report_.pass_seconds = Seconds(passes_start);
    report_.pass_flops = model_.counters().flops - flops_before;
    Summarize();
    FCA_RETURN_IF_ERROR(ExecutionAudit());
    report_.seconds = Seconds(start);
    {
      absl::MutexLock lock(&mu_);
      report_.forward_seconds = forward_seconds_;
      report_.forward_tokens = forward_tokens_;
      report_.cache_read_seconds = cache_read_seconds_;
      report_.cache_write_seconds = cache_write_seconds_;
    }
    Progress("done", 0, 0);
    return std::move(report_);
  }

  // Dense-twin timings gathered while timing this model.
  const std::vector<double>& dense_timings() const { return dense_us_per_token_; }

 private:
  // Whether this model's audit may take coefficients from the cache: not
  // until one cached batch has matched a fresh recording (JudgeCache).
  enum class CacheTrust { kUnchecked, kTrusted, kIgnored };

  absl::Status MakeWindowSets() {
    Progress("windowing", 0, 0);
    const Tokenizer& tok = model_.tokenizer();
    // Only as many tokens as the windows take, plus one window to tell
    // whether max_*_windows left windows out (NoteCapped).
    FCA_ASSIGN_OR_RETURN(std::vector<int32_t> e,
                         TokenStream(req_.eval, tok, TokensFor(opt_.max_eval_windows)));
    FCA_ASSIGN_OR_RETURN(std::vector<int32_t> c,
                         TokenStream(req_.calib, tok, TokensFor(opt_.max_calib_windows)));
    FCA_ASSIGN_OR_RETURN(eval_,
                         MakeWindows(e, opt_.window_length, opt_.max_eval_windows, req_.eval.name));
    FCA_ASSIGN_OR_RETURN(
        calib_, MakeWindows(c, opt_.window_length, opt_.max_calib_windows, req_.calib.name));
    FCA_RETURN_IF_ERROR(CheckNoOverlap(eval_, calib_, opt_.allow_overlap));
    FCA_RETURN_IF_ERROR(CheckFits(eval_, req_.eval.name));
    FCA_RETURN_IF_ERROR(CheckFits(calib_, req_.calib.name));
    NoteCapped("evaluation", req_.eval.name, e, opt_.max_eval_windows);
    NoteCapped("calibration", req_.calib.name, c, opt_.max_calib_windows);
    eval_ids_ = BatchIds(eval_, 0, eval_.count()).clone();
    calib_ids_ = BatchIds(calib_, 0, calib_.count()).clone();
    if (model_.sites().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model '%s' (family %s) has no controller coefficients to audit; name it as the "
          "dense twin instead",
          model_.info().name, model_.info().family));
    }
    report_.eval_windows = eval_.count();
    report_.calib_windows = calib_.count();
    report_.window_length = opt_.window_length;
    report_.eval_window_hashes = eval_.hashes;
    report_.calib_window_hashes = calib_.hashes;
    return absl::OkStatus();
  }

  int64_t TokensFor(int64_t max_windows) const {
    return max_windows > 0 ? (max_windows + 1) * opt_.window_length : 0;
  }

  // "All windows" is bounded by max_*_windows (the server's --max_windows
  // by default): say so when the dataset had more, never drop them silently.
  void NoteCapped(const char* set, const std::string& dataset, const std::vector<int32_t>& stream,
                  int64_t max_windows) const {
    const int64_t complete = static_cast<int64_t>(stream.size()) / opt_.window_length;
    if (max_windows <= 0 || complete <= max_windows || !req_.on_note) return;
    req_.on_note(absl::StrFormat(
        "model '%s': the %s dataset '%s' has more than %d windows of %d tokens; the audit uses "
        "the first %d (max_%s_windows)",
        model_.info().name, set, dataset, max_windows, opt_.window_length, max_windows,
        set[0] == 'e' ? "eval" : "calib"));
  }

  absl::Status CheckFits(const WindowSet& w, const std::string& dataset) const {
    const ModelInfo& info = model_.info();
    if (w.window_length > info.max_seq_len) {
      return absl::InvalidArgumentError(
          absl::StrFormat("window length %d exceeds model '%s' maximum %d", w.window_length,
                          info.name, info.max_seq_len));
    }
    for (size_t i = 0; i < w.ids.size(); ++i) {
      if (w.ids[i] >= info.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dataset '%s': token %d at position %d is outside model '%s' vocabulary of %d", dataset,
            w.ids[i], i, info.name, info.vocab_size));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     SiteTensors* coeff) {
    const Clock::time_point t0 = Clock::now();
    auto logits = model_.Forward(ids, mode, coeff);
    const double seconds = Seconds(t0);
    absl::MutexLock lock(&mu_);
    forward_seconds_ += seconds;
    forward_tokens_ += ids.numel();
    return logits;
  }

  absl::Status CheckCancelled() const {
    if (req_.cancelled != nullptr && req_.cancelled->load()) {
      return absl::CancelledError("the audit was cancelled");
    }
    return absl::OkStatus();
  }

  // Threads this audit runs batches on.
  int Threads() const { return req_.threads > 0 ? req_.threads : AuditThreads(); }

  // Runs `fn(b, e)` on every batch of windows [0, n) on Threads() threads,
  // with progress (`units` per window) and cancellation on this thread.
  // `serial_first`: the first batch runs alone before the others, to settle
  // what they share (the full-set tensors, whether the cache is trusted).
  absl::Status Pass(const std::string& phase, int64_t n, double units, bool serial_first,
                    const std::function<absl::Status(int64_t, int64_t)>& fn) {
    int64_t reported = 0;
    auto after = [&](int64_t done) -> absl::Status {
      Advance(units * static_cast<double>(done - reported));
      reported = done;
      FlushNotes();
      Progress(phase, done, n);
      return CheckCancelled();
    };
    FCA_RETURN_IF_ERROR(CheckCancelled());
    int64_t first = 0;
    if (serial_first && n > 0) {
      first = std::min(n, opt_.batch_size);
      FCA_RETURN_IF_ERROR(fn(0, first));
      FCA_RETURN_IF_ERROR(after(first));
    }
    absl::Status status = RunBatches(first, n, opt_.batch_size, Threads(), fn, after);
    FlushNotes();
    return status;
  }

  // Copies a batch's recorded coefficients into the full-set tensors (made
  // by the first batch, which runs alone; later batches write disjoint rows).
  static void Store(SiteTensors* all, const SiteTensors& batch, int64_t begin, int64_t n) {
    if (all->empty()) {
      for (const at::Tensor& b : batch) {
        all->push_back(at::empty({n, b.size(1), b.size(2)}, b.options()));
      }
    }
    for (size_t s = 0; s < batch.size(); ++s) {
      (*all)[s].slice(0, begin, begin + batch[s].size(0)).copy_(batch[s]);
    }
  }

  // LIVE+record over E. The `correct` replay of a batch runs right after its
  // LIVE pass on the batches the fidelity gate samples (FidelityChecked), so
  // the gate compares logits without keeping them; on the other batches
  // NLL(correct) is the LIVE NLL, which the gate shows a replay reproduces.
  // Batches found whole in the cache skip LIVE, except the first.
  absl::Status LiveEvalPass() {
    const int64_t n = eval_.count();
    live_nll_.assign(n, 0.0);
    correct_nll_.assign(n, 0.0);
    FCA_RETURN_IF_ERROR(Pass("live", n, 1.0, /*serial_first=*/true,
                             [this](int64_t b, int64_t e) { return EvalBatch(b, e); }));
    report_.live_nll = Mean(live_nll_);
    nll_[kCorrect] = correct_nll_;
    Note("evaluation", report_.cached_eval_windows, n);
    return absl::OkStatus();
  }

  absl::Status EvalBatch(int64_t b, int64_t e) {
    const at::Tensor ids = BatchIds(eval_, b, e);
    SiteTensors cached = CachedBatch(eval_, b, e);
    SiteTensors rec;
    if (!cached.empty() && Trust() == CacheTrust::kTrusted) {
      rec = std::move(cached);
      FCA_RETURN_IF_ERROR(ReplayCachedBatch(ids, rec, b));
      absl::MutexLock lock(&mu_);
      report_.cached_eval_windows += e - b;
    } else {
      FCA_RETURN_IF_ERROR(LiveBatch(ids, b, e, cached, &rec));
    }
    Store(&eval_coeff_, rec, b, eval_.count());
    return absl::OkStatus();
  }

  // A model may have no neutral coefficients (a TorchScript module without
  // neutral()): then the neutral intervention cannot be replayed.
  absl::Status CheckNeutralAvailable() const {
    const bool wanted =
        std::find(interventions_.begin(), interventions_.end(), kNeutral) != interventions_.end();
    if (!wanted || model_.sites().empty() || !neutral_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s' has no neutral coefficients (its TorchScript module exports no neutral()); "
        "leave the neutral intervention out",
        model_.info().name));
  }

  // Whether the fidelity gate compares the batch starting at window `b`
  // with its replay: the first batch and every fidelity_check_every-th.
  bool FidelityChecked(int64_t b) const {
    const int64_t k = b / opt_.batch_size;
    return opt_.fidelity_check_every <= 1 || k % opt_.fidelity_check_every == 0;
  }

  // LIVE+record, then (on sampled batches) the fidelity-checked replay.
  absl::Status LiveBatch(const at::Tensor& ids, int64_t b, int64_t e, const SiteTensors& cached,
                         SiteTensors* rec) {
    FCA_ASSIGN_OR_RETURN(at::Tensor live_logits, Forward(ids, CoefficientMode::kLiveRecord, rec));
    if (!cached.empty()) JudgeCache(cached, *rec, "evaluation", b, e);
    const at::Tensor live = SequenceNll(live_logits, ids);
    at::Tensor correct = live;
    if (FidelityChecked(b)) {
      SiteTensors replay = *rec;
      FCA_ASSIGN_OR_RETURN(at::Tensor replay_logits,
                           Forward(ids, CoefficientMode::kReplay, &replay));
      FCA_RETURN_IF_ERROR(CheckFidelity(live_logits, replay_logits, b, e));
      correct = SequenceNll(replay_logits, ids);
    }
    WriteAt(&live_nll_, live, b);
    WriteAt(&correct_nll_, correct, b);
    if (cached.empty() || Trust() == CacheTrust::kIgnored) PutBatch(eval_, *rec, b);
    return absl::OkStatus();
  }

  // A cached batch skips LIVE; its `correct` replay stands for both.
  absl::Status ReplayCachedBatch(const at::Tensor& ids, const SiteTensors& rec, int64_t b) {
    SiteTensors replay = rec;
    FCA_ASSIGN_OR_RETURN(at::Tensor logits, Forward(ids, CoefficientMode::kReplay, &replay));
    const at::Tensor nll = SequenceNll(logits, ids);
    WriteAt(&live_nll_, nll, b);
    WriteAt(&correct_nll_, nll, b);
    return absl::OkStatus();
  }

  absl::Status CheckFidelity(const at::Tensor& live, const at::Tensor& replay, int64_t b,
                             int64_t e) {
    const double diff = (live.to(at::kFloat) - replay.to(at::kFloat)).abs().max().item<double>();
    absl::MutexLock lock(&mu_);
    report_.replay_max_abs_diff = std::max(report_.replay_max_abs_diff, diff);
    if (diff <= opt_.fidelity_tolerance) {
      report_.fidelity_checked_windows += e - b;
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "model '%s' is refused for audit: replay is not faithful (max |logit(REPLAY) - "
        "logit(LIVE)| = %.3g > %.3g on evaluation windows %d..%d)",
        model_.info().name, diff, opt_.fidelity_tolerance, b, e - 1));
  }

  // A batch found in the cache before any was checked is also recorded LIVE
  // and compared: entries made in another batch layout differ by rounding
  // (trusted within the fidelity tolerance, plus one unit in the last place
  // of a 16-bit dtype); entries that differ by more (a corrupt cache, a
  // model that is not deterministic) are ignored for this model and
  // rewritten, never allowed to fail the audit. Ignoring is final.
  void JudgeCache(const SiteTensors& cached, const SiteTensors& rec, const char* set, int64_t b,
                  int64_t e) {
    const double rtol = model_.info().compute.dtype == "bfloat16"  ? 1.0 / 128
                        : model_.info().compute.dtype == "float16" ? 1.0 / 1024
                                                                   : 0.0;
    double max_diff = 0, worst_excess = 0;
    for (size_t s = 0; s < cached.size(); ++s) {
      const at::Tensor fresh = rec[s].to(cached[s].device()).to(at::kFloat);
      const at::Tensor diff = (cached[s].to(at::kFloat) - fresh).abs();
      if (diff.numel() == 0) continue;
      max_diff = std::max(max_diff, diff.max().item<double>());
      const at::Tensor excess = diff - (opt_.fidelity_tolerance + rtol * fresh.abs());
      worst_excess = std::max(worst_excess, excess.max().item<double>());
    }
    absl::MutexLock lock(&mu_);
    report_.cache_max_abs_diff = std::max(report_.cache_max_abs_diff, max_diff);
    if (worst_excess <= 0) {
      if (cache_trust_ == CacheTrust::kUnchecked) cache_trust_ = CacheTrust::kTrusted;
      return;
    }
    if (cache_trust_ == CacheTrust::kIgnored) return;
    cache_trust_ = CacheTrust::kIgnored;
    pending_notes_.push_back(absl::StrFormat(
        "model '%s': cached coefficients of %s windows %d..%d differ from a fresh LIVE recording "
        "(max |diff| %.3g); the cache is not used for this model and its entries are rewritten",
        model_.info().name, set, b, e - 1, max_diff));
  }

  // Calibration needs coefficients only: kRecordOnly stops each forward
  // once they are known.
  absl::Status LiveCalibPass() {
    const int64_t n = calib_.count();
    FCA_RETURN_IF_ERROR(Pass("calibration", n, 0.5, /*serial_first=*/true,
                             [this](int64_t b, int64_t e) { return CalibBatch(b, e); }));
    Note("calibration", report_.cached_calib_windows, n);
    return absl::OkStatus();
  }

  absl::Status CalibBatch(int64_t b, int64_t e) {
    SiteTensors cached = CachedBatch(calib_, b, e);
    SiteTensors rec;
    if (!cached.empty() && Trust() == CacheTrust::kTrusted) {
      rec = std::move(cached);
      absl::MutexLock lock(&mu_);
      report_.cached_calib_windows += e - b;
    } else {
      FCA_RETURN_IF_ERROR(
          Forward(BatchIds(calib_, b, e), CoefficientMode::kRecordOnly, &rec).status());
      if (!cached.empty()) JudgeCache(cached, rec, "calibration", b, e);
      if (cached.empty() || Trust() == CacheTrust::kIgnored) PutBatch(calib_, rec, b);
    }
    Store(&calib_coeff_, rec, b, calib_.count());
    return absl::OkStatus();
  }

  CacheTrust Trust() const {
    absl::MutexLock lock(&mu_);
    return cache_trust_;
  }

  // The cached coefficients of windows [b, e) as [e-b, T, d_s] tensors, or
  // an empty list unless every window is cached.
  SiteTensors CachedBatch(const WindowSet& w, int64_t b, int64_t e) {
    if (req_.cache == nullptr || Trust() == CacheTrust::kIgnored) return {};
    const Clock::time_point t0 = Clock::now();
    SiteTensors out = ReadCache(w, b, e);
    const double seconds = Seconds(t0);
    absl::MutexLock lock(&mu_);
    cache_read_seconds_ += seconds;
    return out;
  }

  SiteTensors ReadCache(const WindowSet& w, int64_t b, int64_t e) const {
    std::vector<std::string> blobs;
    {
      // CoefficientCache is thread-compatible: one call at a time.
      absl::MutexLock lock(&cache_mu_);
      for (int64_t i = b; i < e; ++i) {
        auto blob = req_.cache->Get(CacheKey(w.hashes[i]));
        if (!blob || blob->size() != WindowBytes()) return {};
        blobs.push_back(std::move(*blob));
      }
    }
    return DecodeWindows(blobs);
  }

  size_t WindowBytes() const {
    size_t elements = 0;
    for (const CoefficientSite& s : model_.sites()) elements += s.channels;
    return elements * opt_.window_length * ElementSize();
  }

  size_t ElementSize() const { return model_.info().compute.dtype == "float32" ? 4 : 2; }

  SiteTensors DecodeWindows(const std::vector<std::string>& blobs) const {
    const int64_t T = opt_.window_length;
    const auto dtype = model_.info().compute.dtype == "float32"    ? at::kFloat
                       : model_.info().compute.dtype == "bfloat16" ? at::kBFloat16
                                                                   : at::kHalf;
    SiteTensors out;
    size_t offset = 0;
    for (const CoefficientSite& s : model_.sites()) {
      std::vector<at::Tensor> rows;
      for (const std::string& blob : blobs) {
        rows.push_back(
            at::from_blob(const_cast<char*>(blob.data()) + offset, {T, s.channels}, dtype).clone());
      }
      offset += T * s.channels * ElementSize();
      out.push_back(at::stack(rows).to(c10::Device(model_.info().compute.device)));
    }
    return out;
  }

  void PutBatch(const WindowSet& w, const SiteTensors& rec, int64_t b) {
    if (req_.cache == nullptr) return;
    const Clock::time_point t0 = Clock::now();
    WriteCache(w, rec, b);
    const double seconds = Seconds(t0);
    absl::MutexLock lock(&mu_);
    cache_write_seconds_ += seconds;
  }

  void WriteCache(const WindowSet& w, const SiteTensors& rec, int64_t b) const {
    std::vector<at::Tensor> host;
    for (const at::Tensor& t : rec) host.push_back(t.cpu().contiguous());
    for (int64_t i = 0; i < host[0].size(0); ++i) {
      std::string bytes;
      bytes.reserve(WindowBytes());
      for (const at::Tensor& t : host) {
        at::Tensor row = t[i];
        bytes.append(static_cast<const char*>(row.data_ptr()), row.nbytes());
      }
      absl::MutexLock lock(&cache_mu_);
      req_.cache->Put(CacheKey(w.hashes[b + i]), bytes);
    }
  }

  CoefficientCacheKey CacheKey(const std::string& window_hash) const {
    const ModelInfo& info = model_.info();
    return {info.weights_sha256, window_hash, info.compute.dtype, info.compute.device};
  }

  void Note(const char* set, int64_t cached, int64_t total) {
    if (!req_.on_note || req_.cache == nullptr) return;
    double read = 0, written = 0;
    {
      absl::MutexLock lock(&mu_);
      read = cache_read_seconds_;
      written = cache_write_seconds_;
    }
    req_.on_note(absl::StrFormat(
        "model '%s': %d of %d %s windows came from the coefficient cache%s; cache reads so far "
        "%.3f s, writes %.3f s",
        model_.info().name, cached, total, set, cached > 0 ? " (their LIVE pass was skipped)" : "",
        read, written));
  }

  InterventionContext Context() const {
    InterventionContext ctx;
    ctx.eval = &eval_coeff_;
    ctx.calib = &calib_stats_;
    ctx.sites = &model_.sites();
    ctx.seed = opt_.seed;
    ctx.per_site_shuffle = opt_.per_site_shuffle;
    ctx.eval_ids = &eval_ids_;
    ctx.calib_ids = &calib_ids_;
    ctx.calib_coeff = &calib_coeff_;
    ctx.neutral = &neutral_;
    return ctx;
  }

  absl::Status ReplayPass(const std::string& name) {
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(name, Context()));
    FCA_ASSIGN_OR_RETURN(nll_[name], Replay(*plan, "replay:" + name));
    if (name == kStaticToken) {
      FCA_ASSIGN_OR_RETURN(report_.static_token_coverage, CountUnseenTokens(eval_ids_, calib_ids_));
    }
    return absl::OkStatus();
  }

  // Per-sequence NLL of E under `plan`.
  absl::StatusOr<std::vector<double>> Replay(const Intervention& plan, const std::string& phase) {
    const int64_t n = eval_.count();
    std::vector<double> nll(n, 0.0);
    FCA_RETURN_IF_ERROR(
        Pass(phase, n, 0.5, /*serial_first=*/false, [&](int64_t b, int64_t e) -> absl::Status {
          const at::Tensor ids = BatchIds(eval_, b, e);
          SiteTensors a = plan.Batch(b, e);
          FCA_ASSIGN_OR_RETURN(at::Tensor logits, Forward(ids, CoefficientMode::kReplay, &a));
          WriteAt(&nll, SequenceNll(logits, ids), b);
          return absl::OkStatus();
        }));
    return nll;
  }

  // One replay per (intervention, group): I at the group's sites, correct
  // elsewhere (fca.md "Per-group dependence").
  absl::Status DependencePasses() {
    FCA_ASSIGN_OR_RETURN(const std::vector<SiteGroup> groups,
                         DependenceGroups(model_.sites(), opt_.per_layer_scope));
    for (const std::string& name : opt_.per_layer_interventions) {
      for (const SiteGroup& g : groups) {
        FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> inner,
                             MakeIntervention(name, Context()));
        const auto plan = RestrictToGroup(std::move(inner), eval_coeff_, g);
        GroupDependence d;
        d.intervention = name;
        d.scope = opt_.per_layer_scope;
        d.group = g.name;
        FCA_ASSIGN_OR_RETURN(std::vector<double> nll,
                             Replay(*plan, absl::StrFormat("replay:%s@%s", name, g.name)));
        d.nll = Mean(nll);
        d.penalty = d.nll - Mean(nll_[kCorrect]);
        d.penalty_ci = PairedBootstrapCI(nll, nll_[kCorrect], opt_.bootstrap_resamples,
                                         opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
        report_.dependence.push_back(std::move(d));
      }
    }
    return absl::OkStatus();
  }

  void Summarize() {
    const std::vector<double>& ref = nll_[kCorrect];
    for (const std::string& name : interventions_) {
      InterventionResult r;
      r.name = name;
      r.nll_per_sequence = nll_[name];
      r.nll = Mean(r.nll_per_sequence);
      r.penalty = r.nll - Mean(ref);
      if (name != kCorrect) {
        r.penalty_ci = PairedBootstrapCI(r.nll_per_sequence, ref, opt_.bootstrap_resamples,
                                         opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
      }
      report_.interventions.push_back(std::move(r));
    }
    if (nll_.count(kGlobalMean)) {
      Retention(kStaticLayer, &report_.retention_static_layer, &report_.retention_static_layer_ci);
      Retention(kStaticLayerPosition, &report_.retention_static_layer_position,
                &report_.retention_static_layer_position_ci);
      Retention(kStaticToken, &report_.retention_static_token, &report_.retention_static_token_ci);
    }
    Variation v = ComputeVariation(eval_coeff_, model_.sites());
    report_.variation = std::move(v.families);
    report_.site_variation = std::move(v.sites);
  }

  void Retention(const std::string& profile, std::optional<double>* value,
                 std::optional<Interval>* ci) {
    if (!nll_.count(profile)) return;
    const std::vector<double>& g = nll_[kGlobalMean];
    const std::vector<double>& p = nll_[profile];
    const std::vector<double>& c = nll_[kCorrect];
    *value = GapRetentionPercent(Mean(g), Mean(p), Mean(c), opt_.retention_min_gap);
    if (!value->has_value()) return;
    *ci = RetentionBootstrapCI(g, p, c, opt_.retention_min_gap, opt_.bootstrap_resamples,
                               opt_.ci_level, DeriveSeed(opt_.seed, "retention"));
  }

  // The execution audit (execution.cc) on the first batch of E, with the
  // batch's `correct` coefficients for the REPLAY count.
  absl::Status ExecutionAudit() {
    const int64_t rows = std::min<int64_t>(eval_.count(), opt_.batch_size);
    const at::Tensor ids = BatchIds(eval_, 0, rows);
    SiteTensors replay;
    for (const at::Tensor& t : eval_coeff_) replay.push_back(t.slice(0, 0, rows));
    ExecutionInputs in{
        &model_, req_.dense_twin, &ids, &replay, opt_, [this](int64_t done, int64_t total) {
          Progress("timing", done, total);
          return CheckCancelled();
        }};
    FCA_ASSIGN_OR_RETURN(ExecutionOutcome out, AuditExecution(in));
    report_.execution = std::move(out.result);
    dense_us_per_token_ = std::move(out.twin_us_per_token);
    {
      absl::MutexLock lock(&mu_);
      forward_seconds_ += out.forward_seconds;
      forward_tokens_ += out.forward_tokens;
    }
    if (req_.on_note && out.stop != TimingStop::kContinue) {
      req_.on_note(absl::StrFormat("model '%s': timed %d pairs against the dense twin; stopped: %s",
                                   model_.info().name, report_.execution.timing_repeats,
                                   TimingStopName(out.stop)));
    }
    return absl::OkStatus();
  }

  void Advance(double windows) { *units_done_ += windows; }

  // Notes queued by batches on other threads, passed on from this one.
  void FlushNotes() {
    std::vector<std::string> notes;
    {
      absl::MutexLock lock(&mu_);
      notes.swap(pending_notes_);
    }
    if (!req_.on_note) return;
    for (const std::string& note : notes) req_.on_note(note);
  }

  void Progress(const std::string& phase, int64_t done, int64_t total) const {
    if (!req_.on_progress) return;
    AuditProgress p;
    p.phase = phase;
    p.model = model_.info().name;
    p.model_index = index_;
    p.model_count = static_cast<int64_t>(req_.models.size());
    p.windows_done = done;
    p.windows_total = total;
    p.fraction = units_total_ > 0 ? std::min(1.0, *units_done_ / units_total_) : 0;
    req_.on_progress(p);
  }

  const AuditRequest& req_;
  const AuditOptions& opt_;
  const std::vector<std::string>& interventions_;
  ControlledModel& model_;
  int64_t index_;
  double* units_done_;
  double units_total_;
  WindowSet eval_, calib_;
  at::Tensor eval_ids_, calib_ids_;  // [N, T] / [M, T] int64: static_token
  SiteTensors eval_coeff_, calib_coeff_;
  SiteTensors neutral_;  // the model's NeutralCoefficients()
  CalibrationStats calib_stats_;
  std::map<std::string, std::vector<double>> nll_;
  std::vector<double> dense_us_per_token_;
  // Per-sequence NLL of the LIVE pass and of `correct` on E, by window.
  std::vector<double> live_nll_, correct_nll_;
  ModelReport report_;
  // Guards what batches running at once share: the report's counters and
  // maxima, the cache verdict, queued notes and the forward totals.
  mutable absl::Mutex mu_;
  CacheTrust cache_trust_ ABSL_GUARDED_BY(mu_) = CacheTrust::kUnchecked;
  double forward_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forward_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  double cache_read_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double cache_write_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> pending_notes_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex cache_mu_;  // one CoefficientCache call at a time
};

std::vector<std::string> ResolveInterventions(const AuditOptions& o) {
  const std::vector<std::string>& wanted =
      o.interventions.empty() ? AllInterventions() : o.interventions;
  std::vector<std::string> out = {kCorrect};
  for (const std::string& name : AllInterventions()) {
    if (name == kCorrect) continue;
    for (const std::string& w : wanted) {
      if (w == name) {
        out.push_back(name);
        break;
      }
    }
  }
  return out;
}

std::string DatasetHash(const Dataset& d) {
  if (!d.sha256.empty()) return d.sha256;
  if (d.kind == Dataset::Kind::kText) return Sha256Hex(d.text);
  return Sha256Hex(std::string_view(reinterpret_cast<const char*>(d.tokens.data()),
                                    d.tokens.size() * sizeof(int32_t)));
}

// Rough work estimate for progress: per model, E (live + correct) counts 1
// per window, C and each other replay 0.5 per window.
double TotalUnits(const AuditRequest& req, size_t interventions) {
  const double t = static_cast<double>(req.options.window_length);
  auto windows = [&](const Dataset& d, int64_t max) {
    double tokens = d.kind == Dataset::Kind::kText ? d.text.size() : d.tokens.size();
    double n = std::floor(tokens / t);
    return max > 0 ? std::min(n, double(max)) : n;
  };
  const double e = windows(req.eval, req.options.max_eval_windows);
  const double c = windows(req.calib, req.options.max_calib_windows);
  double groups = 0;  // per-group dependence replays, over all models
  for (const ControlledModel* m : req.models) {
    auto g = DependenceGroups(m->sites(), req.options.per_layer_scope);
    if (g.ok()) groups += g->size() * req.options.per_layer_interventions.size();
  }
  return req.models.size() * (e + 0.5 * c + 0.5 * e * (interventions - 1)) + 0.5 * e * groups;
}

// The dense twin's own execution figures: counted on the first batch of E,
// timed interleaved with every audited model.
absl::StatusOr<ExecutionResult> DenseTwinExecution(const AuditRequest& req,
                                                   const std::vector<double>& us_per_token) {
  ControlledModel& dense = *req.dense_twin;
  const AuditOptions& o = req.options;
  FCA_ASSIGN_OR_RETURN(std::vector<int32_t> stream,
                       TokenStream(req.eval, dense.tokenizer(), o.batch_size * o.window_length));
  FCA_ASSIGN_OR_RETURN(WindowSet w,
                       MakeWindows(stream, o.window_length, o.batch_size, req.eval.name));
  at::Tensor ids = BatchIds(w, 0, w.count());
  dense.ResetCounters();
  FCA_RETURN_IF_ERROR(dense.Forward(ids, CoefficientMode::kLive, nullptr).status());
  const ExecutionCounters c = dense.counters();
  ExecutionResult x;
  x.model = dense.info().name;
  x.parameters = dense.info().num_parameters;
  x.blocks_per_token = double(c.blocks_executed) / double(c.tokens);
  x.blocks_executed_fraction = double(c.blocks_executed) / double(c.blocks_total);
  x.flops_per_token = x.replay_flops_per_token = c.flops / double(c.tokens);
  x.latency_us_per_token = us_per_token.empty() ? 0.0 : Median(us_per_token);
  x.timing_repeats = static_cast<int64_t>(us_per_token.size());
  return x;
}

absl::Status ValidateModels(const AuditRequest& req) {
  if (req.models.empty()) return absl::InvalidArgumentError("the audit names no model");
  for (const ControlledModel* m : req.models) {
    if (m == nullptr) return absl::InvalidArgumentError("the audit names a null model");
  }
  if (req.dense_twin != nullptr && !req.dense_twin->sites().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense twin '%s' has controller coefficients; a dense twin must have none",
                        req.dense_twin->info().name));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& AllInterventions() {
  static const std::vector<std::string> kAll = {
      kCorrect,    kCrossInput,  kTokenShuffle, kStaticLayer, kStaticLayerPosition,
      kGlobalMean, kStaticToken, kNeutral};
  return kAll;
}

std::string EngineVersion() { return BuildVersion(); }

absl::StatusOr<AuditReport> RunAudit(const AuditRequest& req) {
  FCA_RETURN_IF_ERROR(ValidateModels(req));
  FCA_RETURN_IF_ERROR(ValidateOptions(req.options));
  const std::vector<std::string> interventions = ResolveInterventions(req.options);
  AuditReport report;
  report.options = req.options;
  report.eval_dataset_sha256 = DatasetHash(req.eval);
  report.calib_dataset_sha256 = DatasetHash(req.calib);
  report.runtime = CurrentRuntime();
  double done = 0;
  const double total = TotalUnits(req, interventions.size());
  std::vector<double> dense_times;
  for (size_t i = 0; i < req.models.size(); ++i) {
    ModelAudit audit(req, interventions, static_cast<int64_t>(i), &done, total);
    FCA_ASSIGN_OR_RETURN(ModelReport mr,
                         GuardTorch("auditing model '" + req.models[i]->info().name + "'",
                                    [&] { return audit.Run(); }));
    dense_times.insert(dense_times.end(), audit.dense_timings().begin(),
                       audit.dense_timings().end());
    if (req.on_model_done) req.on_model_done(mr);
    report.models.push_back(std::move(mr));
  }
  if (req.dense_twin != nullptr) {
    FCA_ASSIGN_OR_RETURN(report.dense_twin, GuardTorch("timing the dense twin", [&] {
                           return DenseTwinExecution(req, dense_times);
                         }));
  }
  report.aggregate = Aggregate(report.models);
  return report;
}

}  // namespace fca::engine
