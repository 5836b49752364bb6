// ModelAudit's LIVE passes: E recorded with the fidelity gate, C recorded
// for calibration, both through the coefficient cache (model_audit_phases.h).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {

absl::Status ModelAudit::LiveEvalPass() {
  const int64_t n = eval_.count();
  live_nll_.assign(n, 0.0);
  correct_nll_.assign(n, 0.0);
  FCA_RETURN_IF_ERROR(Pass("live", n, weights_.live, /*serial_first=*/true,
                           [this](int64_t b, int64_t e) { return EvalBatch(b, e); }));
  report_.live_nll = Mean(live_nll_);
  nll_[InterventionId::kCorrect] = correct_nll_;
  Note("evaluation", report_.cached_eval_windows, n);
  return absl::OkStatus();
}

absl::Status ModelAudit::EvalBatch(int64_t b, int64_t e) {
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

bool ModelAudit::FidelityChecked(int64_t b) const {
  const int64_t k = b / opt_.batch_size;
  return opt_.fidelity_check_every <= 1 || k % opt_.fidelity_check_every == 0;
}

absl::Status ModelAudit::LiveBatch(const at::Tensor& ids, int64_t b, int64_t e,
                                   const SiteTensors& cached, SiteTensors* rec) {
  SiteTensors recorded;
  FCA_ASSIGN_OR_RETURN(at::Tensor live_logits,
                       Forward(ids, CoefficientMode::kLiveRecord, &recorded));
  *rec = ToHost(recorded);
  if (!cached.empty()) QueueNote(cache_.Judge(cached, *rec, "evaluation", b, e));
  const at::Tensor live = SequenceNll(live_logits, ids);
  at::Tensor correct = live;
  if (FidelityChecked(b)) {
    SiteTensors replay = std::move(recorded);
    FCA_ASSIGN_OR_RETURN(at::Tensor replay_logits, Forward(ids, CoefficientMode::kReplay, &replay));
    FCA_RETURN_IF_ERROR(CheckFidelity(live_logits, replay_logits, b, e));
    correct = SequenceNll(replay_logits, ids);
  }
  WriteAt(&live_nll_, live, b);
  WriteAt(&correct_nll_, correct, b);
  if (cached.empty() || cache_.trust() == ModelCache::Trust::kIgnored) cache_.Write(eval_, *rec, b);
  return absl::OkStatus();
}

absl::Status ModelAudit::ReplayCachedBatch(const at::Tensor& ids, const SiteTensors& rec,
                                           int64_t b) {
  SiteTensors replay = rec;
  FCA_ASSIGN_OR_RETURN(at::Tensor logits, Forward(ids, CoefficientMode::kReplay, &replay));
  const at::Tensor nll = SequenceNll(logits, ids);
  WriteAt(&live_nll_, nll, b);
  WriteAt(&correct_nll_, nll, b);
  return absl::OkStatus();
}

absl::Status ModelAudit::CheckFidelity(const at::Tensor& live, const at::Tensor& replay, int64_t b,
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

absl::Status ModelAudit::LiveCalibPass() {
  const int64_t n = calib_.count();
  FCA_RETURN_IF_ERROR(Pass("calibration", n, weights_.calibration, /*serial_first=*/true,
                           [this](int64_t b, int64_t e) { return CalibBatch(b, e); }));
  Note("calibration", report_.cached_calib_windows, n);
  return absl::OkStatus();
}

absl::Status ModelAudit::CalibBatch(int64_t b, int64_t e) {
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

void ModelAudit::Note(const char* set, int64_t cached, int64_t total) {
  if (!req_.on_note || !cache_.enabled()) return;
  const double read = cache_.read_seconds(), written = cache_.write_seconds();
  req_.on_note(absl::StrFormat(
      "model '%s': %d of %d %s windows came from the coefficient cache%s; cache reads so far "
      "%.3f s, writes %.3f s",
      model_.info().name, cached, total, set, cached > 0 ? " (their LIVE pass was skipped)" : "",
      read, written));
}

}  // namespace fca::engine
