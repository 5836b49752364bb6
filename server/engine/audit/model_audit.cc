// AuditModel and the ModelAudit that runs one model's phases: what the
// phases share is here, each phase in its model_audit_*.cc
// (model_audit_phases.h).
#include "server/engine/audit/model_audit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/stopwatch.h"
#include "server/engine/audit/batches.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/routing.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Whether the model has neutral coefficients for its sites (a model
// without sites has nothing to replace, so neutral is a no-op that applies).
bool HasNeutral(const ControlledModel& model) {
  if (model.sites().empty()) return true;
  const absl::StatusOr<std::vector<at::Tensor>> neutral = model.NeutralCoefficients();
  // An error is the audit's to report, when it asks again.
  return !neutral.ok() || !neutral->empty();
}

}  // namespace

at::Tensor SequenceNll(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t T = ids.size(1);
  at::Tensor lp = at::log_softmax(logits.slice(1, 0, T - 1).to(at::kFloat), -1);
  at::Tensor target = ids.slice(1, 1, T).unsqueeze(-1).to(lp.device());
  return -lp.gather(-1, target).squeeze(-1).to(at::kDouble).mean(1).cpu();
}

at::Tensor BatchIds(const WindowSet& w, int64_t begin, int64_t end) {
  const int64_t T = w.window_length;
  return at::from_blob(const_cast<int32_t*>(w.ids.data()) + begin * T, {end - begin, T}, at::kInt)
      .to(at::kLong);
}

void WriteAt(std::vector<double>* out, const at::Tensor& values, int64_t at) {
  auto acc = values.accessor<double, 1>();
  for (int64_t i = 0; i < values.size(0); ++i) (*out)[at + i] = acc[i];
}

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

ModelAudit::ModelAudit(const AuditRequest& req, const std::vector<InterventionId>& interventions,
                       int64_t index)
    : req_(req),
      opt_(req.options),
      model_(*req.models[index]),
      interventions_(ApplicableInterventions(interventions, opt_, model_, &skipped_)),
      cache_(req.cache, model_, opt_),
      index_(index) {}

PhaseWeights ModelAudit::ExpectedWeights() const {
  PhaseCounts c;
  c.eval_windows = eval_.count();
  c.calib_windows = calib_.count();
  for (InterventionId id : interventions_) {
    if (id != InterventionId::kCorrect) ++c.replays;
  }
  c.replays += static_cast<int64_t>(Recalibrated().size()) * opt_.calib_resamples;
  c.replays += static_cast<int64_t>(DependenceGroups(model_.sites(), opt_.per_layer_scope).size() *
                                    opt_.per_layer_interventions.size());
  if (Float32Reference() != nullptr && NeedsFloat32Reference(model_)) ++c.replays;
  c.dense_twin = req_.dense_twin != nullptr;
  return ExpectedPhaseWeights(opt_, c);
}

absl::StatusOr<ModelReport> ModelAudit::Run() {
  const Clock::time_point start = Clock::now();
  FCA_RETURN_IF_ERROR(MakeWindowSets());
  weights_ = ExpectedWeights();
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
  report_.pass_seconds = SecondsSince(passes_start);
  report_.pass_flops = model_.counters().flops - flops_before;
  Progress("statistics", 0, 0);
  FCA_RETURN_IF_ERROR(Summarize());
  done_ += weights_.statistics;
  FCA_RETURN_IF_ERROR(ExecutionAudit());
  report_.seconds = SecondsSince(start);
  {
    absl::MutexLock lock(&mu_);
    report_.forward_seconds = forward_seconds_;
    report_.forward_tokens = forward_tokens_;
  }
  report_.cache_read_seconds = cache_.read_seconds();
  report_.cache_write_seconds = cache_.write_seconds();
  report_.cache_max_abs_diff = cache_.max_abs_diff();
  done_ = weights_.Total();  // exactly: the timing's share was added by time
  Progress("done", 0, 0);
  return std::move(report_);
}

absl::StatusOr<at::Tensor> ModelAudit::Forward(const at::Tensor& ids, CoefficientMode mode,
                                               SiteTensors* coeff) {
  const std::string& device = model_.info().compute.device;
  if (mode == CoefficientMode::kReplay) *coeff = ToDevice(*coeff, device);
  const Clock::time_point t0 = Clock::now();
  auto logits = model_.Forward(ids, mode, coeff);
  SynchronizeDevice(device);
  const double seconds = SecondsSince(t0);
  absl::MutexLock lock(&mu_);
  forward_seconds_ += seconds;
  forward_tokens_ += ids.numel();
  return logits;
}

absl::Status ModelAudit::CheckCancelled() const {
  if (req_.cancelled != nullptr && req_.cancelled->load()) {
    return absl::CancelledError("the audit was cancelled");
  }
  return absl::OkStatus();
}

int ModelAudit::Threads() const {
  if (!IsCpuDevice(model_.info().compute.device)) return 1;
  return req_.threads > 0 ? req_.threads : AuditThreads();
}

absl::Status ModelAudit::Pass(const std::string& phase, int64_t n, double weight, bool serial_first,
                              const std::function<absl::Status(int64_t, int64_t)>& fn) {
  const double start = done_;
  Progress(phase, 0, n);
  auto after = [&](int64_t done) -> absl::Status {
    // From the phase's start, not summed: it ends at exactly its weight.
    done_ = n > 0 ? start + weight * static_cast<double>(done) / static_cast<double>(n) : start;
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

void ModelAudit::Store(SiteTensors* all, const SiteTensors& batch, int64_t begin, int64_t n) {
  if (all->empty()) {
    for (const at::Tensor& b : batch) {
      all->push_back(at::empty({n, b.size(1), b.size(2)}, b.options().device(at::kCPU)));
    }
  }
  for (size_t s = 0; s < batch.size(); ++s) {
    (*all)[s].slice(0, begin, begin + batch[s].size(0)).copy_(batch[s]);
  }
}

void ModelAudit::QueueNote(std::string note) {
  if (note.empty()) return;
  absl::MutexLock lock(&mu_);
  pending_notes_.push_back(std::move(note));
}

void ModelAudit::FlushNotes() {
  std::vector<std::string> notes;
  {
    absl::MutexLock lock(&mu_);
    notes.swap(pending_notes_);
  }
  if (!req_.on_note) return;
  for (const std::string& note : notes) req_.on_note(note);
}

void ModelAudit::Progress(const std::string& phase, int64_t done, int64_t total,
                          double seconds_left) const {
  if (!req_.on_progress) return;
  AuditProgress p;
  p.phase = phase;
  p.phase_seconds_left = seconds_left;
  p.model = model_.info().name;
  p.model_index = index_;
  p.model_count = static_cast<int64_t>(req_.models.size());
  p.windows_done = done;
  p.windows_total = total;
  // Each model an equal share of the audit (the same spec and datasets);
  // within it, the share of its phases' expected cost done.
  const double expected = weights_.Total();
  const double own = expected > 0 ? std::min(1.0, done_ / expected) : 0;
  p.fraction =
      std::min(1.0, (static_cast<double>(index_) + own) / static_cast<double>(p.model_count));
  {
    absl::MutexLock lock(&mu_);
    p.forward_tokens = forward_tokens_;
    p.forward_seconds = forward_seconds_;
  }
  req_.on_progress(p);
}

absl::StatusOr<ModelAuditResult> AuditModel(const AuditRequest& req,
                                            const std::vector<InterventionId>& interventions,
                                            int64_t index) {
  ModelAudit audit(req, interventions, index);
  ModelAuditResult result;
  FCA_ASSIGN_OR_RETURN(result.report, audit.Run());
  return result;
}

}  // namespace fca::engine
