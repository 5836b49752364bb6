#include "server/engine/audit/model_audit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/batches.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/execution.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/lookup.h"
#include "server/engine/audit/model_cache.h"
#include "server/engine/audit/routing.h"
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

bool HasRouters(const ControlledModel& model) {
  const std::vector<int64_t> routed = model.RoutedExperts();
  return std::any_of(routed.begin(), routed.end(), [](int64_t k) { return k > 0; });
}

// Whether the model has neutral coefficients for its sites (a model
// without sites has nothing to replace, so neutral is a no-op that applies).
bool HasNeutral(const ControlledModel& model) {
  if (model.sites().empty()) return true;
  const absl::StatusOr<std::vector<at::Tensor>> neutral = model.NeutralCoefficients();
  // An error is the audit's to report, when it asks again.
  return !neutral.ok() || !neutral->empty();
}

}  // namespace

std::vector<InterventionId> ApplicableInterventions(const std::vector<InterventionId>& all,
                                                    const AuditOptions& options,
                                                    const ControlledModel& model,
                                                    std::vector<SkippedIntervention>* skipped) {
  if (!options.interventions.empty()) return all;
  const bool routers = HasRouters(model);
  const bool neutral = HasNeutral(model);
  std::vector<InterventionId> out;
  for (InterventionId id : all) {
    // random_route belongs to the mixture-of-experts families: left out of
    // any other model's list without a note, which every FeatureGate or
    // MUDDPythia audit would otherwise carry.
    if (id == InterventionId::kRandomRoute && !routers) continue;
    const char* reason = nullptr;
    if (id == InterventionId::kNeutral && !neutral) {
      reason =
          "the model has no neutral coefficients (its TorchScript module exports no "
          "neutral())";
    }
    if (reason == nullptr) {
      out.push_back(id);
    } else if (skipped != nullptr) {
      skipped->push_back({id, reason});
    }
  }
  return out;
}

namespace {

// Everything needed to audit one model; members keep the phases small.
class ModelAudit {
 public:
  ModelAudit(const AuditRequest& req, const std::vector<InterventionId>& interventions,
             int64_t index, double* units_done, double units_total)
      : req_(req),
        opt_(req.options),
        model_(*req.models[index]),
        interventions_(ApplicableInterventions(interventions, opt_, model_, &skipped_)),
        cache_(req.cache, model_, opt_),
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
    FCA_RETURN_IF_ERROR(CheckRoutersAvailable());
    NoteSkipped();
    // The passes' FLOPs: the model's counters grow with every forward until
    // the execution audit resets them.
    const double flops_before = model_.counters().flops;
    const Clock::time_point passes_start = Clock::now();
    FCA_RETURN_IF_ERROR(LiveEvalPass());
    FCA_RETURN_IF_ERROR(LiveCalibPass());
    FCA_ASSIGN_OR_RETURN(calib_stats_, ComputeCalibrationStats(calib_coeff_, model_.sites()));
    for (InterventionId id : interventions_) {
      if (id != InterventionId::kCorrect) FCA_RETURN_IF_ERROR(ReplayPass(id));
    }
    FCA_RETURN_IF_ERROR(CalibrationResamples());
    FCA_RETURN_IF_ERROR(DependencePasses());
    FCA_RETURN_IF_ERROR(TopkAgreements());
    FCA_RETURN_IF_ERROR(RoutingFlips());
    report_.pass_seconds = Seconds(passes_start);
    report_.pass_flops = model_.counters().flops - flops_before;
    Summarize();
    FCA_RETURN_IF_ERROR(ExecutionAudit());
    report_.seconds = Seconds(start);
    {
      absl::MutexLock lock(&mu_);
      report_.forward_seconds = forward_seconds_;
      report_.forward_tokens = forward_tokens_;
    }
    report_.cache_read_seconds = cache_.read_seconds();
    report_.cache_write_seconds = cache_.write_seconds();
    report_.cache_max_abs_diff = cache_.max_abs_diff();
    Progress("done", 0, 0);
    return std::move(report_);
  }

  // Dense-twin timings gathered while timing this model.
  const std::vector<double>& dense_timings() const { return dense_us_per_token_; }

 private:
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

  // A forward, timed on the device. Replayed coefficients come from the
  // host: to the device in one copy, before the clock starts.
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     SiteTensors* coeff) {
    const std::string& device = model_.info().compute.device;
    if (mode == CoefficientMode::kReplay) *coeff = ToDevice(*coeff, device);
    const Clock::time_point t0 = Clock::now();
    auto logits = model_.Forward(ids, mode, coeff);
    SynchronizeDevice(device);
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

  // Threads this audit runs batches on. One on a GPU: forwards at once would
  // share its stream, gaining nothing, and each hold a batch's activations.
  int Threads() const {
    if (!IsCpuDevice(model_.info().compute.device)) return 1;
    return req_.threads > 0 ? req_.threads : AuditThreads();
  }

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

  // Copies a batch's recorded coefficients (on the host: ToHost) into the
  // full-set tensors, which live on the host (made by the first batch, which
  // runs alone; later batches write disjoint rows).
  static void Store(SiteTensors* all, const SiteTensors& batch, int64_t begin, int64_t n) {
    if (all->empty()) {
      for (const at::Tensor& b : batch) {
        all->push_back(at::empty({n, b.size(1), b.size(2)}, b.options().device(at::kCPU)));
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
    nll_[InterventionId::kCorrect] = correct_nll_;
    Note("evaluation", report_.cached_eval_windows, n);
    return absl::OkStatus();
  }

  absl::Status EvalBatch(int64_t b, int64_t e) {
    const at::Tensor ids = BatchIds(eval_, b, e);
    SiteTensors cached = cache_.Read(eval_, b, e);
    SiteTensors rec;
    if (!cached.empty() && cache_.trust() == ModelCache::Trust::kTrusted) {
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
    const bool wanted = std::find(interventions_.begin(), interventions_.end(),
                                  InterventionId::kNeutral) != interventions_.end();
    if (!wanted || model_.sites().empty() || !neutral_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s' has no neutral coefficients (its TorchScript module exports no neutral()); "
        "leave the neutral intervention out",
        model_.info().name));
  }

  // The default list's interventions that do not apply to this model, as a
  // job note: the job runs the others instead of failing.
  void NoteSkipped() const {
    if (skipped_.empty() || !req_.on_note) return;
    std::vector<std::string> parts;
    for (const SkippedIntervention& s : skipped_) {
      parts.push_back(absl::StrFormat("%s (%s)", InterventionName(s.id), s.reason));
    }
    req_.on_note(absl::StrFormat("model '%s': skipped %s; the other interventions ran",
                                 model_.info().name, absl::StrJoin(parts, ", ")));
  }

  // random_route named for a model without routers (as an intervention or
  // a per-group one) cannot be replayed.
  absl::Status CheckRoutersAvailable() const {
    auto named = [](const std::vector<InterventionId>& ids) {
      return std::find(ids.begin(), ids.end(), InterventionId::kRandomRoute) != ids.end();
    };
    if (HasRouters(model_) || !(named(interventions_) || named(opt_.per_layer_interventions))) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s' (family %s) has no mixture-of-experts router; random_route applies to "
        "routers only: leave it out",
        model_.info().name, model_.info().family));
  }

  // Whether the fidelity gate compares the batch starting at window `b`
  // with its replay: the first batch and every fidelity_check_every-th.
  bool FidelityChecked(int64_t b) const {
    const int64_t k = b / opt_.batch_size;
    return opt_.fidelity_check_every <= 1 || k % opt_.fidelity_check_every == 0;
  }

  // LIVE+record, then (on sampled batches) the fidelity-checked replay.
  // `*rec`: the recording on the host; the replay takes the device's.
  absl::Status LiveBatch(const at::Tensor& ids, int64_t b, int64_t e, const SiteTensors& cached,
                         SiteTensors* rec) {
    SiteTensors recorded;
    FCA_ASSIGN_OR_RETURN(at::Tensor live_logits,
                         Forward(ids, CoefficientMode::kLiveRecord, &recorded));
    *rec = ToHost(recorded);
    if (!cached.empty()) QueueNote(cache_.Judge(cached, *rec, "evaluation", b, e));
    const at::Tensor live = SequenceNll(live_logits, ids);
    at::Tensor correct = live;
    if (FidelityChecked(b)) {
      SiteTensors replay = std::move(recorded);
      FCA_ASSIGN_OR_RETURN(at::Tensor replay_logits,
                           Forward(ids, CoefficientMode::kReplay, &replay));
      FCA_RETURN_IF_ERROR(CheckFidelity(live_logits, replay_logits, b, e));
      correct = SequenceNll(replay_logits, ids);
    }
    WriteAt(&live_nll_, live, b);
    WriteAt(&correct_nll_, correct, b);
    if (cached.empty() || cache_.trust() == ModelCache::Trust::kIgnored)
      cache_.Write(eval_, *rec, b);
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
    SiteTensors cached = cache_.Read(calib_, b, e);
    SiteTensors rec;
    if (!cached.empty() && cache_.trust() == ModelCache::Trust::kTrusted) {
      rec = std::move(cached);
      absl::MutexLock lock(&mu_);
      report_.cached_calib_windows += e - b;
    } else {
      SiteTensors recorded;
      FCA_RETURN_IF_ERROR(
          Forward(BatchIds(calib_, b, e), CoefficientMode::kRecordOnly, &recorded).status());
      rec = ToHost(recorded);
      if (!cached.empty()) QueueNote(cache_.Judge(cached, rec, "calibration", b, e));
      if (cached.empty() || cache_.trust() == ModelCache::Trust::kIgnored)
        cache_.Write(calib_, rec, b);
    }
    Store(&calib_coeff_, rec, b, calib_.count());
    return absl::OkStatus();
  }

  void Note(const char* set, int64_t cached, int64_t total) {
    if (!req_.on_note || !cache_.enabled()) return;
    const double read = cache_.read_seconds(), written = cache_.write_seconds();
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
    ctx.token_min_count = opt_.static_token_min_count;
    ctx.neutral = &neutral_;
    ctx.routed = model_.RoutedExperts();
    return ctx;
  }

  absl::Status ReplayPass(InterventionId id) {
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, Context()));
    FCA_ASSIGN_OR_RETURN(nll_[id], Replay(*plan, absl::StrCat("replay:", InterventionName(id))));
    if (id == InterventionId::kStaticToken) {
      FCA_ASSIGN_OR_RETURN(report_.static_token_coverage, CountUnseenTokens(eval_ids_, calib_ids_));
      FCA_ASSIGN_OR_RETURN(report_.static_token_cells,
                           CountTokenCells(calib_ids_, false, opt_.static_token_min_count));
    }
    if (id == InterventionId::kStaticTokenPosition) {
      FCA_ASSIGN_OR_RETURN(report_.static_token_position_cells,
                           CountTokenCells(calib_ids_, true, opt_.static_token_min_count));
    }
    return absl::OkStatus();
  }

  // The interventions of this audit estimated on C, whose profiles
  // calibration resampling re-estimates (none when it is off).
  std::vector<InterventionId> Recalibrated() const {
    std::vector<InterventionId> out;
    if (opt_.calib_resamples <= 0) return out;
    for (InterventionId id : interventions_) {
      if (InterventionDefOf(id).calibrated) out.push_back(id);
    }
    return out;
  }

  // Calibration uncertainty (fca.md "Calibration uncertainty"): for each of
  // calib_resamples moving-block resamples of C's windows, the statistics
  // and token tables are re-estimated from the recorded coefficients (no
  // forward) and each calibrated intervention is replayed over E: one
  // replay per resample and intervention.
  absl::Status CalibrationResamples() {
    const std::vector<InterventionId> ids = Recalibrated();
    if (ids.empty()) return absl::OkStatus();
    const int64_t m = calib_.count();
    const int64_t block =
        opt_.bootstrap_block_length > 0 ? opt_.bootstrap_block_length : AutoBlockLength(m);
    for (int r = 0; r < opt_.calib_resamples; ++r) {
      const std::vector<int64_t> picked =
          BlockResampleIndices(m, block, DeriveSeed(opt_.seed, "calib_resample", r));
      const at::Tensor index = at::tensor(picked, at::kLong);
      SiteTensors coeff;
      for (const at::Tensor& t : calib_coeff_) {
        coeff.push_back(t.index_select(0, index.to(t.device())));
      }
      const at::Tensor ids_r = calib_ids_.index_select(0, index);
      FCA_ASSIGN_OR_RETURN(CalibrationStats stats, ComputeCalibrationStats(coeff, model_.sites()));
      InterventionContext ctx = Context();
      ctx.calib = &stats;
      ctx.calib_coeff = &coeff;
      ctx.calib_ids = &ids_r;
      for (InterventionId id : ids) {
        FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, ctx));
        FCA_ASSIGN_OR_RETURN(
            std::vector<double> nll,
            Replay(*plan, absl::StrFormat("calib %d/%d:%s", r + 1, opt_.calib_resamples,
                                          InterventionName(id))));
        calib_nll_[id].push_back(std::move(nll));
      }
    }
    return absl::OkStatus();
  }

  // The penalty's calibration-inclusive CI and the replicates' sd, seeded
  // as the block CI (so identical replicates give penalty_block's CI).
  CalibratedPenalty CalibratedPenaltyOf(InterventionId id) const {
    const std::vector<double>& ref = nll_.at(InterventionId::kCorrect);
    const std::vector<std::vector<double>>& reps = calib_nll_.at(id);
    CalibratedPenalty c;
    c.resamples = static_cast<int64_t>(reps.size());
    c.ci = CalibratedBootstrapCI(reps, ref, opt_.bootstrap_resamples, opt_.ci_level,
                                 DeriveSeed(opt_.seed, "block_bootstrap"), BlockLength());
    std::vector<double> penalties;
    for (const std::vector<double>& nll : reps) penalties.push_back(Mean(nll) - Mean(ref));
    c.sd = engine::Summarize(penalties).sd;
    return c;
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

  // The top-k agreement of every intervention, correct included, with LIVE
  // (fca.md "Routing agreement"); nothing for a model without routers.
  absl::Status TopkAgreements() {
    if (!HasRouters(model_)) return absl::OkStatus();
    Progress("top-k agreement", 0, 0);
    for (InterventionId id : interventions_) {
      FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, Context()));
      FCA_ASSIGN_OR_RETURN(agreement_[id],
                           MeasureTopkAgreement(model_, eval_coeff_, *plan, opt_.batch_size));
      FCA_RETURN_IF_ERROR(CheckCancelled());
    }
    return absl::OkStatus();
  }

  // The float32 reference of this model, or nullptr.
  ControlledModel* Float32Reference() const {
    const auto& refs = req_.float32_references;
    return index_ < static_cast<int64_t>(refs.size()) ? refs[index_] : nullptr;
  }

  // The routing flip rate (fca.md "Routing flip rate"): E's coefficients
  // recorded by the float32 reference (no logits), and the experts this
  // model's own top-k chooses from them against those it chooses from its
  // LIVE recording.
  absl::Status RoutingFlips() {
    ControlledModel* reference = Float32Reference();
    if (reference == nullptr || !NeedsFloat32Reference(model_)) return absl::OkStatus();
    if (reference->info().compute.dtype != ComputeDType::kFloat32 ||
        reference->sites().size() != model_.sites().size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model '%s': the routing flip rate's reference must be the same model in float32",
          model_.info().name));
    }
    SiteTensors recorded;
    FCA_RETURN_IF_ERROR(
        Pass("float32 routing", eval_.count(), 0.5, /*serial_first=*/true,
             [&](int64_t b, int64_t e) -> absl::Status {
               SiteTensors rec;
               FCA_RETURN_IF_ERROR(
                   reference->Forward(BatchIds(eval_, b, e), CoefficientMode::kRecordOnly, &rec)
                       .status());
               Store(&recorded, ToHost(rec), b, eval_.count());
               return absl::OkStatus();
             }));
    InterventionContext ctx = Context();
    ctx.eval = &recorded;
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> float32,
                         MakeIntervention(InterventionId::kCorrect, ctx));
    FCA_ASSIGN_OR_RETURN(report_.float32_agreement,
                         MeasureTopkAgreement(model_, eval_coeff_, *float32, opt_.batch_size));
    return absl::OkStatus();
  }

  // One replay per (intervention, group): I at the group's sites, correct
  // elsewhere (fca.md "Per-group dependence").
  absl::Status DependencePasses() {
    const std::vector<SiteGroup> groups = DependenceGroups(model_.sites(), opt_.per_layer_scope);
    for (InterventionId id : opt_.per_layer_interventions) {
      const char* name = InterventionName(id);
      for (const SiteGroup& g : groups) {
        FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> inner, MakeIntervention(id, Context()));
        const auto plan = RestrictToGroup(std::move(inner), eval_coeff_, g);
        GroupDependence d;
        d.intervention = name;
        d.scope = ScopeName(opt_.per_layer_scope);
        d.group = g.name;
        d.layer = g.layer;
        FCA_ASSIGN_OR_RETURN(std::vector<double> nll,
                             Replay(*plan, absl::StrFormat("replay:%s@%s", name, g.name)));
        d.nll = Mean(nll);
        d.penalty = d.nll - Mean(nll_[InterventionId::kCorrect]);
        d.penalty_ci =
            PairedBootstrapCI(nll, nll_[InterventionId::kCorrect], opt_.bootstrap_resamples,
                              opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
        report_.dependence.push_back(std::move(d));
      }
    }
    return absl::OkStatus();
  }

  int64_t BlockLength() const {
    return opt_.bootstrap_block_length > 0 ? opt_.bootstrap_block_length
                                           : AutoBlockLength(eval_.count());
  }

  // The block CI, lag-1 autocorrelation and p-value of a penalty (fca.md
  // "Correlated windows"); Holm's adjustment comes once all are known.
  PenaltyDependence WindowDependence(const std::vector<double>& nll) const {
    const std::vector<double>& ref = nll_.at(InterventionId::kCorrect);
    const uint64_t seed = DeriveSeed(opt_.seed, "bootstrap");
    PenaltyDependence d;
    d.block_ci = PairedBootstrapCI(nll, ref, opt_.bootstrap_resamples, opt_.ci_level,
                                   DeriveSeed(opt_.seed, "block_bootstrap"), BlockLength());
    std::vector<double> diff(nll.size());
    for (size_t i = 0; i < nll.size(); ++i) diff[i] = nll[i] - ref[i];
    d.lag1 = Lag1Autocorrelation(diff);
    d.p_value = BootstrapPValue(nll, ref, opt_.bootstrap_resamples, seed);
    return d;
  }

  // Holm over the model's whole-model penalties (fca.md "Correlated
  // windows"; the per-group replays are exploratory and not in the family).
  void AdjustHolm() {
    std::vector<PenaltyDependence*> family;
    for (InterventionResult& r : report_.interventions) {
      if (r.name != kCorrect) family.push_back(&r.windows);
    }
    std::vector<double> p;
    for (const PenaltyDependence* d : family) p.push_back(d->p_value);
    const std::vector<double> adjusted = HolmAdjust(p);
    for (size_t i = 0; i < family.size(); ++i) family[i]->p_holm = adjusted[i];
  }

  void Summarize() {
    const std::vector<double>& ref = nll_[InterventionId::kCorrect];
    report_.bootstrap_block_length = BlockLength();
    report_.retention_baseline = InterventionName(opt_.retention_baseline);
    for (InterventionId id : interventions_) {
      InterventionResult r;
      r.name = InterventionName(id);
      r.nll_per_sequence = nll_[id];
      r.nll = Mean(r.nll_per_sequence);
      r.penalty = r.nll - Mean(ref);
      if (id != InterventionId::kCorrect) {
        r.penalty_ci = PairedBootstrapCI(r.nll_per_sequence, ref, opt_.bootstrap_resamples,
                                         opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
        r.windows = WindowDependence(r.nll_per_sequence);
      }
      if (calib_nll_.count(id)) r.calib = CalibratedPenaltyOf(id);
      if (agreement_.count(id)) r.topk_agreement = agreement_[id];
      report_.interventions.push_back(std::move(r));
    }
    AdjustHolm();
    Additivity();
    for (InterventionId profile : StaticProfiles()) {
      for (InterventionId baseline : RetentionBaselines()) Retention(profile, baseline);
    }
    Variation v = ComputeVariation(eval_coeff_, model_.sites());
    AddLookupDiagnostics(eval_coeff_, eval_ids_, &v);
    report_.variation = std::move(v.families);
    report_.site_variation = std::move(v.sites);
  }

  // The sum of each per-group intervention's group penalties against its
  // whole-model penalty (fca.md "Per-group dependence").
  void Additivity() {
    for (InterventionId id : opt_.per_layer_interventions) {
      const std::string name = InterventionName(id);
      GroupAdditivity a;
      a.intervention = name;
      for (const GroupDependence& d : report_.dependence) {
        if (d.intervention != name) continue;
        ++a.groups;
        a.penalty_sum += d.penalty;
      }
      for (const InterventionResult& r : report_.interventions) {
        if (r.name == name && r.penalty_ci.low > 0) a.ratio = a.penalty_sum / r.penalty;
      }
      report_.additivity.push_back(std::move(a));
    }
  }

  // R(P) against baseline B when both ran (fca.md "Gap retention").
  void Retention(InterventionId profile, InterventionId baseline) {
    if (!nll_.count(profile) || !nll_.count(baseline)) return;
    RetentionPlan plan;
    plan.resamples = opt_.bootstrap_resamples;
    plan.level = opt_.ci_level;
    plan.gap_seed = DeriveSeed(opt_.seed, "bootstrap");  // B's penalty CI
    plan.retention_seed = DeriveSeed(opt_.seed, "retention");
    plan.min_gap = opt_.retention_min_gap;
    RetentionResult r;
    r.profile = InterventionName(profile);
    r.baseline = InterventionName(baseline);
    r.estimate =
        EstimateRetention(nll_[baseline], nll_[profile], nll_[InterventionId::kCorrect], plan);
    report_.retention.push_back(std::move(r));
  }

  // The execution audit (execution.cc) on the first batch of E, with the
  // batch's `correct` coefficients for the REPLAY count.
  absl::Status ExecutionAudit() {
    const int64_t rows = std::min<int64_t>(eval_.count(), opt_.batch_size);
    const at::Tensor ids = BatchIds(eval_, 0, rows);
    SiteTensors replay;
    for (const at::Tensor& t : eval_coeff_) replay.push_back(t.slice(0, 0, rows));
    // On the device before anything is counted or timed.
    replay = ToDevice(replay, model_.info().compute.device);
    const double units = TimingUnits(opt_, static_cast<double>(eval_.count()));
    const auto start = std::chrono::steady_clock::now();
    double advanced = 0;
    ExecutionInputs in{
        &model_,
        req_.dense_twin,
        &ids,
        &replay,
        opt_,
        [&](int64_t done, int64_t total, double left) {
          const double taken =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          // The share of the timing done: by time where the time left is
          // known, else by pairs.
          const double share = left > 0    ? taken / (taken + left)
                               : total > 0 ? static_cast<double>(done) / total
                                           : 0;
          Advance(std::max(0.0, units * std::min(share, 1.0) - advanced));
          advanced = std::max(advanced, units * std::min(share, 1.0));
          Progress("timing", done, total, left);
          return CheckCancelled();
        }};
    FCA_ASSIGN_OR_RETURN(ExecutionOutcome out, AuditExecution(in));
    Advance(units - advanced);
    report_.execution = std::move(out.result);
    dense_us_per_token_ = std::move(out.twin_us_per_token);
    {
      absl::MutexLock lock(&mu_);
      forward_seconds_ += out.forward_seconds;
      forward_tokens_ += out.forward_tokens;
    }
    if (req_.on_note && out.stop != TimingStop::kContinue) {
      req_.on_note(absl::StrFormat(
          "model '%s': timed %d pairs against the dense twin in two blocks (the first stopped: "
          "%s; the second timed as many pairs, fixed in advance); the verdict needs both blocks",
          model_.info().name, report_.execution.timing_repeats, TimingStopName(out.first_stop)));
    }
    return absl::OkStatus();
  }

  void Advance(double windows) { *units_done_ += windows; }

  // Queues a batch's note (on any thread) for FlushNotes; "" is none.
  void QueueNote(std::string note) {
    if (note.empty()) return;
    absl::MutexLock lock(&mu_);
    pending_notes_.push_back(std::move(note));
  }

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

  void Progress(const std::string& phase, int64_t done, int64_t total,
                double seconds_left = 0) const {
    if (!req_.on_progress) return;
    AuditProgress p;
    p.phase = phase;
    p.phase_seconds_left = seconds_left;
    p.model = model_.info().name;
    p.model_index = index_;
    p.model_count = static_cast<int64_t>(req_.models.size());
    p.windows_done = done;
    p.windows_total = total;
    p.fraction = units_total_ > 0 ? std::min(1.0, *units_done_ / units_total_) : 0;
    {
      absl::MutexLock lock(&mu_);
      p.forward_tokens = forward_tokens_;
      p.forward_seconds = forward_seconds_;
    }
    req_.on_progress(p);
  }

  const AuditRequest& req_;
  const AuditOptions& opt_;
  ControlledModel& model_;
  // Before interventions_, which fills it.
  std::vector<SkippedIntervention> skipped_;  // the default list's, not applying
  const std::vector<InterventionId> interventions_;
  ModelCache cache_;
  int64_t index_;
  double* units_done_;
  double units_total_;
  WindowSet eval_, calib_;
  at::Tensor eval_ids_, calib_ids_;  // [N, T] / [M, T] int64: static_token
  SiteTensors eval_coeff_, calib_coeff_;
  SiteTensors neutral_;  // the model's NeutralCoefficients()
  CalibrationStats calib_stats_;
  std::map<InterventionId, std::vector<double>> nll_;
  // Per calibrated intervention, its per-sequence NLL on E under each
  // calibration resample's profile (CalibrationResamples).
  std::map<InterventionId, std::vector<std::vector<double>>> calib_nll_;
  std::map<InterventionId, std::optional<TopkAgreement>> agreement_;
  std::vector<double> dense_us_per_token_;
  // Per-sequence NLL of the LIVE pass and of `correct` on E, by window.
  std::vector<double> live_nll_, correct_nll_;
  ModelReport report_;
  // Guards what batches running at once share: the report's counters and
  // maxima, queued notes and the forward totals.
  mutable absl::Mutex mu_;
  double forward_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forward_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> pending_notes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

bool NeedsFloat32Reference(const ControlledModel& model) {
  return HasRouters(model) && model.info().compute.dtype != ComputeDType::kFloat32;
}

double TimingUnits(const AuditOptions& options, double eval_windows) {
  return options.timing_repeats > 0 ? 0.5 * eval_windows : 0;
}

absl::StatusOr<ModelAuditResult> AuditModel(const AuditRequest& req,
                                            const std::vector<InterventionId>& interventions,
                                            int64_t index, double* units_done, double units_total) {
  ModelAudit audit(req, interventions, index, units_done, units_total);
  ModelAuditResult result;
  FCA_ASSIGN_OR_RETURN(result.report, audit.Run());
  result.dense_us_per_token = audit.dense_timings();
  return result;
}

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

}  // namespace fca::engine
