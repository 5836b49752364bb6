// The class behind AuditModel (model_audit.h): one model's audit, run phase
// by phase. Its sections name the file defining each phase: model_audit.cc
// runs them and holds what they share (timed forwards, batches on several
// threads, progress and notes). Included by those files only; holds tensors.
#ifndef FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_PHASES_H_
#define FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_PHASES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/audit/audit_types.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/model_audit.h"
#include "server/engine/audit/model_cache.h"
#include "server/engine/audit/progress_weights.h"
#include "server/engine/audit/windows.h"

namespace fca::engine {

// Mean next-token NLL per sequence (nats/token over positions 1..T-1),
// computed in float32 from logits of any dtype, returned as float64 [B].
at::Tensor SequenceNll(const at::Tensor& logits, const at::Tensor& ids);

// Windows [begin, end) as an int64 [end - begin, T] tensor.
at::Tensor BatchIds(const WindowSet& w, int64_t begin, int64_t end);

// Writes values [n] (float64) to (*out)[at .. at + n).
void WriteAt(std::vector<double>* out, const at::Tensor& values, int64_t at);

// Everything needed to audit one model; members keep the phases small.
class ModelAudit {
 public:
  ModelAudit(const AuditRequest& req, const std::vector<InterventionId>& interventions,
             int64_t index);

  // Every phase in turn (model_audit.cc).
  absl::StatusOr<ModelReport> Run();

 private:
  // --------------------------------------------------------- Shared by the phases (model_audit.cc)
  // A forward, timed on the device. Replayed coefficients come from the
  // host: to the device in one copy, before the clock starts.
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     SiteTensors* coeff);

  absl::Status CheckCancelled() const;

  // Threads this audit runs batches on. One on a GPU: forwards at once would
  // share its stream, gaining nothing, and each hold a batch's activations.
  int Threads() const;

  // Runs `fn(b, e)` on every batch of windows [0, n) on Threads() threads,
  // with progress (the phase's `weight` in shares of its windows done) and
  // cancellation on this thread. `serial_first`: the first batch runs alone
  // before the others, to settle what they share (the full-set tensors,
  // whether the cache is trusted).
  absl::Status Pass(const std::string& phase, int64_t n, double weight, bool serial_first,
                    const std::function<absl::Status(int64_t, int64_t)>& fn);

  // Copies a batch's recorded coefficients (on the host: ToHost) into the
  // full-set tensors, which live on the host (made by the first batch, which
  // runs alone; later batches write disjoint rows).
  static void Store(SiteTensors* all, const SiteTensors& batch, int64_t begin, int64_t n);

  // The expected cost of each phase (progress_weights.h), once the
  // windows are made.
  PhaseWeights ExpectedWeights() const;

  // Queues a batch's note (on any thread) for FlushNotes; "" is none.
  void QueueNote(std::string note);

  // Notes queued by batches on other threads, passed on from this one.
  void FlushNotes();

  void Progress(const std::string& phase, int64_t done, int64_t total,
                double seconds_left = 0) const;

  // ------------------------------- Windows and the checks before any pass (model_audit_windows.cc)
  absl::Status MakeWindowSets();

  int64_t TokensFor(int64_t max_windows) const;

  // "All windows" is bounded by max_*_windows (the server's --max_windows
  // by default): say so when the dataset had more, never drop them silently.
  void NoteCapped(const char* set, const std::string& dataset, const std::vector<int32_t>& stream,
                  int64_t max_windows) const;

  absl::Status CheckFits(const WindowSet& w, const std::string& dataset) const;

  // A model may have no neutral coefficients (a TorchScript module without
  // neutral()): then the neutral intervention cannot be replayed.
  absl::Status CheckNeutralAvailable() const;

  // The default list's interventions that do not apply to this model, as a
  // job note: the job runs the others instead of failing.
  void NoteSkipped() const;

  // random_route named for a model without routers (as an intervention or
  // a per-group one) cannot be replayed.
  absl::Status CheckRoutersAvailable() const;

  // ------------------------------------------------ LIVE passes over E and C (model_audit_live.cc)
  // LIVE+record over E. The `correct` replay of a batch runs right after its
  // LIVE pass on the batches the fidelity gate samples (FidelityChecked), so
  // the gate compares logits without keeping them; on the other batches
  // NLL(correct) is the LIVE NLL, which the gate shows a replay reproduces.
  // Batches found whole in the cache skip LIVE, except the first.
  absl::Status LiveEvalPass();

  absl::Status EvalBatch(int64_t b, int64_t e);

  // Whether the fidelity gate compares the batch starting at window `b`
  // with its replay: the first batch and every fidelity_check_every-th.
  bool FidelityChecked(int64_t b) const;

  // LIVE+record, then (on sampled batches) the fidelity-checked replay.
  // `*rec`: the recording on the host; the replay takes the device's.
  absl::Status LiveBatch(const at::Tensor& ids, int64_t b, int64_t e, const SiteTensors& cached,
                         SiteTensors* rec);

  // A cached batch skips LIVE; its `correct` replay stands for both.
  absl::Status ReplayCachedBatch(const at::Tensor& ids, const SiteTensors& rec, int64_t b);

  absl::Status CheckFidelity(const at::Tensor& live, const at::Tensor& replay, int64_t b,
                             int64_t e);

  // Calibration needs coefficients only: kRecordOnly stops each forward
  // once they are known.
  absl::Status LiveCalibPass();

  absl::Status CalibBatch(int64_t b, int64_t e);

  void Note(const char* set, int64_t cached, int64_t total);

  // ------------------------------------------ Replays of the interventions (model_audit_replay.cc)
  InterventionContext Context() const;

  absl::Status ReplayPass(InterventionId id);

  // Per-sequence NLL of E under `plan`.
  absl::StatusOr<std::vector<double>> Replay(const Intervention& plan, const std::string& phase);

  // The interventions of this audit estimated on C, whose profiles
  // calibration resampling re-estimates (none when it is off).
  std::vector<InterventionId> Recalibrated() const;

  // Calibration uncertainty (fca.md "Calibration uncertainty"): for each of
  // calib_resamples circular block resamples of C's windows, the statistics
  // and token tables are re-estimated from the recorded coefficients (no
  // forward) and each calibrated intervention is replayed over E: one
  // replay per resample and intervention.
  absl::Status CalibrationResamples();

  // One replay per (intervention, group): I at the group's sites, correct
  // elsewhere (fca.md "Per-group dependence").
  absl::Status DependencePasses();

  // The top-k agreement of every intervention, correct included, with LIVE
  // (fca.md "Routing agreement"); nothing for a model without routers.
  absl::Status TopkAgreements();

  // The float32 reference of this model, or nullptr.
  ControlledModel* Float32Reference() const;

  // The routing flip rate (fca.md "Routing flip rate"): E's coefficients
  // recorded by the float32 reference (no logits), and the experts this
  // model's own top-k chooses from them against those it chooses from its
  // LIVE recording.
  absl::Status RoutingFlips();

  // -------------------------------------------------------- Statistics (model_audit_statistics.cc)
  int64_t BlockLength() const;

  // The penalty's calibration-inclusive CI and the replicates' sd, seeded
  // as the block CI (so identical replicates give penalty_block's CI).
  CalibratedPenalty CalibratedPenaltyOf(InterventionId id) const;

  // The block CI, lag-1 autocorrelation and p-value of a penalty (fca.md
  // "Correlated windows"); Holm's adjustment comes once all are known.
  PenaltyDependence WindowDependence(const std::vector<double>& nll) const;

  // Holm over the model's whole-model penalties (fca.md "Correlated
  // windows"; the per-group replays are exploratory and not in the family).
  void AdjustHolm();

  [[nodiscard]] absl::Status Summarize();

  // The sum of each per-group intervention's group penalties against its
  // whole-model penalty (fca.md "Per-group dependence").
  void Additivity();

  // R(P) against baseline B when both ran (fca.md "Gap retention").
  void Retention(InterventionId profile, InterventionId baseline);

  // ----------------------------------------- Execution audit and timing (model_audit_execution.cc)
  // The execution audit (execution.cc) on the first batch of E, with the
  // batch's `correct` coefficients for the REPLAY count.
  absl::Status ExecutionAudit();

  // ----------------------------------------------------------------- What the phases read and fill
  const AuditRequest& req_;
  const AuditOptions& opt_;
  ControlledModel& model_;
  // Before interventions_, which fills it.
  std::vector<SkippedIntervention> skipped_;  // the default list's, not applying
  const std::vector<InterventionId> interventions_;
  ModelCache cache_;
  int64_t index_;
  // Progress: the phases' expected costs, and how much of them is done;
  // read and written on the audit's own thread only.
  PhaseWeights weights_;
  double done_ = 0;
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

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_PHASES_H_
