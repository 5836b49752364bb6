// Long file: the task lifecycle (claim, renew, settle, sweep) under one lock.
#include "server/jobs/coordinator.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/jobs/datasets.h"
#include "server/jobs/mapping.h"
#include "server/jobs/server_metrics.h"

namespace fca::jobs {
namespace {

using Clock = std::chrono::steady_clock;

void LogError(int64_t job_id, const char* what, const absl::Status& status) {
  LOG(ERROR) << "job " << job_id << ": " << what << ": " << status;
}

v1::JobEvent StateEvent(v1::JobState state) {
  v1::JobEvent e;
  e.set_state(state);
  return e;
}

v1::JobEvent NoteEvent(const std::string& text) {
  v1::JobEvent e;
  e.set_message(text);
  return e;
}

// The store said "busy" (UNAVAILABLE): worth another try shortly.
bool Transient(const absl::Status& status) { return absl::IsUnavailable(status); }

// Recorded, or no longer this lease's to record (the task ended or was
// claimed again, or the job was deleted).
bool EndSettled(const absl::Status& status) {
  return status.ok() || absl::IsFailedPrecondition(status) || absl::IsNotFound(status);
}

// The terminal event SettleJob appends with a job's end. (The reason is the
// job's error; an event carries a state or a note.)
std::string EndEventPayload(storage::JobState state, const std::string&) {
  return StateEvent(ToProto(state)).SerializeAsString();
}

storage::JobState EndState(const absl::Status& outcome) {
  if (outcome.ok()) return storage::JobState::kSucceeded;
  if (absl::IsCancelled(outcome)) return storage::JobState::kCancelled;
  return storage::JobState::kFailed;
}

}  // namespace

Coordinator::Coordinator(storage::Store* store, EventHub* hub, Options options)
    : store_(store),
      hub_(hub),
      options_(std::move(options)),
      refusals_(options_.refusal_backoff),
      remote_loaded_(options_.lease) {}

Coordinator::~Coordinator() { Stop(); }

absl::Status Coordinator::Start() {
  // The previous process's own workers died with it; remote workers keep
  // their leases and carry on.
  FCA_ASSIGN_OR_RETURN(const storage::ExpiredTasks lost,
                       store_->ExpireLeases(options_.max_attempts, kLocalWorkerPrefix,
                                            "the server stopped while running it"));
  if (!lost.requeued.empty()) {
    LOG(INFO) << lost.requeued.size() << " interrupted task(s) queued again";
  }
  for (const storage::TaskRecord& t : lost.failed) {
    LOG(WARNING) << "job " << t.job_id << ", model " << t.model << " failed: " << t.error;
  }
  for (const storage::TaskRecord& t : lost.requeued) {
    EmitOrLog(t.job_id,
              NoteEvent(absl::StrFormat(
                  "model %s: the server restarted while running it; queued again", t.model)));
  }
  for (const storage::TaskRecord& t : lost.failed) StopJob(t.job_id);
  // Their streams died with the previous process.
  FCA_ASSIGN_OR_RETURN(const int64_t uploads, store_->DropUnfinishedUploads());
  if (uploads > 0) LOG(INFO) << uploads << " unfinished upload(s) dropped";
  SettleJobs();
  sweeper_ = std::thread([this] { Loop(); });
  running_ = true;
  return absl::OkStatus();
}

void Coordinator::Stop() {
  running_ = false;
  {
    // Under mu_, so that the sweep thread's wait sees it at once.
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

void Coordinator::AddStopListener(std::function<void(int64_t)> listener) {
  absl::MutexLock lock(&mu_);
  stop_listeners_.push_back(std::move(listener));
}

void Coordinator::AddWakeListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  wake_listeners_.push_back(std::move(listener));
}

void Coordinator::Wake() {
  std::vector<std::function<void()>> listeners;
  {
    absl::MutexLock lock(&mu_);
    wake_ = true;
    listeners = wake_listeners_;
  }
  for (const auto& l : listeners) l();
}

void Coordinator::Cancel(int64_t job_id) {
  std::vector<std::function<void(int64_t)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    listeners = stop_listeners_;
  }
  for (const auto& l : listeners) l(job_id);
  if (executor_ != nullptr) Wake();  // the sweep thread tells the executor
}

void Coordinator::Loop() {
  while (!stopping_) {
    SweepOnce();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Coordinator::SweepDue),
                         absl::FromChrono(options_.sweep_interval));
    wake_ = false;
  }
  // A last chance before exit; what is still pending is recovered at the
  // next start (the lease runs out, the task runs again, no row twice).
  RetryPendingEnds();
}

void Coordinator::SweepOnce() {
  StoreUnstoredProgress();
  RetryPendingEnds();
  ExpireLeases();
  SettleJobs();
  ObserveUnobservedEnds();
  if (executor_ != nullptr) executor_->Sweep();
}

void Coordinator::ExpireLeases() {
  absl::StatusOr<storage::ExpiredTasks> lost =
      store_->ExpireLeases(options_.max_attempts, "", "its worker stopped renewing its lease");
  if (!lost.ok()) {
    if (!Transient(lost.status())) LogError(0, "cannot expire leases", lost.status());
    return;
  }
  for (const storage::TaskRecord& t : lost->requeued) {
    TaskLost(t);
    EmitOrLog(t.job_id, NoteEvent(absl::StrFormat(
                            "model %s: worker %s lost its lease; the task is queued again "
                            "(attempt %d of %d)",
                            t.model, t.worker.empty() ? "?" : t.worker, t.attempts + 1,
                            options_.max_attempts)));
  }
  for (const storage::TaskRecord& t : lost->failed) {
    TaskLost(t);
    EmitOrLog(t.job_id, NoteEvent("model " + t.model + " failed: " + t.error));
    StopJob(t.job_id);
  }
}

void Coordinator::SettleJobs() {
  absl::StatusOr<std::vector<int64_t>> ids = store_->UnsettledJobs();
  if (!ids.ok()) return;  // the next sweep tries again
  for (int64_t id : *ids) {
    absl::StatusOr<std::optional<storage::Store::Settled>> settled;
    const absl::Status ended = store_->Transaction([&]() -> absl::Status {
      settled = store_->SettleJob(id, EndEventPayload);
      if (!settled.ok() || !settled->has_value()) return settled.status();
      return ObserveEnd((*settled)->job);
    });
    if (settled.ok() && !ended.ok()) settled = ended;  // the commit failed
    if (!settled.ok()) {
      if (!Transient(settled.status())) LogError(id, "cannot end the job", settled.status());
      continue;
    }
    if (!settled->has_value()) continue;
    JobEnded((*settled)->job);
    if ((*settled)->event_seq > 0) hub_->Notify(id, (*settled)->event_seq);
    ForgetProgress(id);
    if (executor_ != nullptr) executor_->StopJob(id);
  }
  // Statistics for the planner, now and then (cheap when nothing grew).
  if (!ids->empty()) LogIfError("optimizing the store", store_->Optimize());
}

absl::Status Coordinator::ObserveEnd(const storage::JobRecord& job) {
  if (!end_observer_) return absl::OkStatus();
  // Nested: a failure undoes the observer's writes only.
  const absl::Status observed = store_->Transaction([&] { return end_observer_(job); });
  if (observed.ok()) return absl::OkStatus();
  LogError(job.id, "cannot enqueue the notices of its end yet (the sweep tries again)", observed);
  return store_->MarkEndUnobserved(job.id);
}

void Coordinator::ObserveUnobservedEnds() {
  if (!end_observer_) return;
  // At most unobserved_per_sweep per sweep, from where the last one
  // stopped, and none after a refusal: a store that refuses writes is not
  // hammered.
  int64_t after = 0;
  {
    absl::MutexLock lock(&mu_);
    after = unobserved_after_;
  }
  const int limit = std::max(1, options_.unobserved_per_sweep);
  absl::StatusOr<std::vector<int64_t>> ids = store_->UnobservedEnds(limit, after);
  if (!ids.ok()) return;  // the next sweep tries again
  for (int64_t id : *ids) {
    // The observer's writes and the unmarking commit together, or neither.
    const absl::Status observed = store_->Transaction([&]() -> absl::Status {
      FCA_ASSIGN_OR_RETURN(const storage::JobRecord job, store_->GetJob(id));
      FCA_RETURN_IF_ERROR(end_observer_(job));
      return store_->MarkEndObserved(id);
    });
    if (Transient(observed)) return;  // still refusing: the next sweep starts here again
    bool first_failure = false;
    {
      absl::MutexLock lock(&mu_);
      if (observed.ok()) {
        unobserved_logged_.erase(id);
      } else {
        first_failure = unobserved_logged_.insert(id).second;
      }
    }
    if (observed.ok()) {
      LOG(INFO) << "job " << id << ": the notices of its end are enqueued";
    } else if (first_failure) {
      LogError(id, "cannot enqueue the notices of its end (retried at every sweep, logged once)",
               observed);
    }
  }
  absl::MutexLock lock(&mu_);
  // After the last of them, the next sweep starts from the first again.
  unobserved_after_ = static_cast<int>(ids->size()) < limit ? 0 : ids->back();
}

void Coordinator::StopJob(int64_t job_id) {
  absl::StatusOr<storage::JobRecord> job = store_->RequestCancel(job_id);
  if (!job.ok() && !absl::IsFailedPrecondition(job.status())) {
    LogError(job_id, "cannot stop the job's other tasks", job.status());
  }
  Cancel(job_id);
}

absl::Status Coordinator::Emit(int64_t job_id, v1::JobEvent event) {
  event.clear_seq();
  FCA_ASSIGN_OR_RETURN(int64_t seq, store_->AppendJobEvent(job_id, event.SerializeAsString()));
  hub_->Notify(job_id, seq);
  return absl::OkStatus();
}

void Coordinator::EmitOrLog(int64_t job_id, v1::JobEvent event) {
  const absl::Status status = Emit(job_id, std::move(event));
  if (!status.ok()) LogError(job_id, "event not stored", status);
}

int64_t Coordinator::PendingEnds() {
  absl::MutexLock lock(&ends_mu_);
  return static_cast<int64_t>(pending_ends_.size());
}

absl::StatusOr<std::shared_ptr<const v1::AuditSpec>> Coordinator::JobSpec(
    const storage::JobRecord& job) {
  {
    absl::MutexLock lock(&mu_);
    auto it = specs_.find(job.id);
    if (it != specs_.end()) return it->second;
  }
  FCA_ASSIGN_OR_RETURN(v1::AuditSpec parsed, StoredSpec(job));
  auto spec = std::make_shared<const v1::AuditSpec>(std::move(parsed));
  absl::MutexLock lock(&mu_);
  return specs_.emplace(job.id, std::move(spec)).first->second;
}

void Coordinator::ForgetProgress(int64_t job_id) {
  refusals_.ForgetJob(job_id);
  absl::MutexLock lock(&mu_);
  progress_.erase(job_id);
  unstored_progress_.erase(job_id);
  ForgetJobProgress(job_id);
  specs_.erase(job_id);
  cache_errors_logged_.erase(job_id);
}

int64_t Coordinator::NowUs() const {
  return options_.now_us ? options_.now_us() : absl::ToUnixMicros(absl::Now());
}

void Coordinator::WorkerSeen(const std::string& worker) { refusals_.Seen(worker, NowUs()); }

void Coordinator::WorkerLoaded(const std::string& worker, const std::vector<std::string>& models) {
  remote_loaded_.Report(worker, models, NowUs());
}

std::map<std::string, std::vector<std::string>> Coordinator::RemoteLoadedModels() {
  std::map<std::string, std::vector<std::string>> loaded = remote_loaded_.Live(NowUs());
  if (loaded.empty()) return loaded;
  std::vector<std::string> known;
  if (options_.models != nullptr) known = options_.models->Names();  // sorted
  for (auto it = loaded.begin(); it != loaded.end();) {
    std::vector<std::string>& names = it->second;
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string& name) {
                                 return !std::binary_search(known.begin(), known.end(), name);
                               }),
                names.end());
    it = names.empty() ? loaded.erase(it) : std::next(it);
  }
  return loaded;
}

void Coordinator::LogCacheError(int64_t job_id, const char* what, const absl::Status& status) {
  {
    // One line per job: a broken cache fails every window the same way.
    absl::MutexLock lock(&mu_);
    if (!cache_errors_logged_.insert(job_id).second) return;
  }
  LogError(job_id, what, status);
}

// ------------------------------------------------------------ the broker

absl::StatusOr<std::optional<runtime::TaskAssignment>> Coordinator::Claim(const std::string& worker,
                                                                          int64_t task_id) {
  return ClaimChecked(worker, task_id, /*verify_weights=*/false);
}

absl::StatusOr<std::optional<runtime::TaskAssignment>> Coordinator::ClaimChecked(
    const std::string& worker, int64_t task_id, bool verify_weights) {
  storage::ClaimRequest request;
  request.worker = worker;
  request.lease_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.lease).count();
  request.task_id = task_id;
  const int64_t now = NowUs();
  refusals_.Seen(worker, now);
  request.skip_task_ids = refusals_.BackedOff(worker, now);
  FCA_ASSIGN_OR_RETURN(std::optional<storage::TaskClaim> claim, store_->ClaimTask(request));
  if (!claim) return std::optional<runtime::TaskAssignment>();
  // The job's first claim starts it.
  if (claim->job.started_at_us == claim->task.started_at_us) {
    EmitOrLog(claim->job.id, StateEvent(v1::JOB_STATE_RUNNING));
    JobStarted(claim->job);
  }
  if (claim->task.attempts > 1 || worker.rfind(kLocalWorkerPrefix, 0) != 0) {
    EmitOrLog(claim->job.id,
              NoteEvent(absl::StrFormat("model %s: running on worker %s (attempt %d)",
                                        claim->task.model, worker, claim->task.attempts)));
  }
  absl::StatusOr<runtime::TaskAssignment> assignment = MakeAssignment(*claim, verify_weights);
  if (!assignment.ok()) {
    // Nothing can run it anywhere (say, its folder is gone): fail the task.
    LogIfError(absl::StrFormat("task %d: failing it", claim->task.id),
               Finish(LeaseOf(claim->task), assignment.status(), {}));
    return assignment.status();
  }
  return std::optional<runtime::TaskAssignment>(*std::move(assignment));
}

absl::StatusOr<runtime::TaskAssignment> Coordinator::MakeAssignment(const storage::TaskClaim& claim,
                                                                    bool verify_weights) {
  runtime::TaskAssignment a;
  a.lease = LeaseOf(claim.task);
  a.job_id = claim.job.id;
  a.index = claim.task.index;
  a.attempt = claim.task.attempts;
  a.model = claim.task.model;
  a.lease_duration = options_.lease;
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const v1::AuditSpec> job_spec, JobSpec(claim.job));
  a.spec = *job_spec;
  const v1::AuditSpec& spec = a.spec;
  a.task_count = spec.models_size();
  {
    absl::MutexLock lock(&mu_);
    progress_[a.job_id].task_count = a.task_count;
  }
  if (verify_weights && options_.models != nullptr) {
    FCA_ASSIGN_OR_RETURN(a.weights_sha256, options_.models->WeightsHash(a.model));
    if (!spec.dense_twin().empty()) {
      FCA_ASSIGN_OR_RETURN(a.dense_twin_weights_sha256,
                           options_.models->WeightsHash(spec.dense_twin()));
    }
  }
  return a;
}

absl::StatusOr<storage::TaskClaim> Coordinator::CheckLease(const runtime::Lease& lease) {
  return store_->CheckLease(lease.task_id, lease.lease_seq);
}

absl::StatusOr<bool> Coordinator::Renew(const runtime::Lease& lease) {
  const int64_t lease_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.lease).count();
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim,
                       store_->RenewLease(lease.task_id, lease.lease_seq, lease_us));
  refusals_.Seen(claim.task.worker, NowUs());
  return claim.job.cancel_requested;
}

absl::Status Coordinator::ReportProgress(const runtime::Lease& lease,
                                         const engine::AuditProgress& p) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, CheckLease(lease));
  const int64_t job_id = claim.job.id;
  v1::JobEvent e;
  {
    absl::MutexLock lock(&mu_);
    JobProgress& jp = progress_[job_id];
    if (jp.fractions.empty()) jp.first_event = Clock::now();
    jp.fractions[claim.task.index] = p.fraction;
    const int count = std::max<int>(jp.task_count, static_cast<int>(jp.fractions.size()));
    double sum = 0;
    for (const auto& [index, fraction] : jp.fractions) sum += fraction;
    const double fraction = count > 0 ? sum / count : 0;
    hub_->SetProgress(job_id, fraction);
    SetJobProgress(job_id, fraction);
    const Clock::time_point now = Clock::now();
    if (p.phase == jp.last_phase && now - jp.last_event < options_.progress_interval) {
      return absl::OkStatus();
    }
    jp.last_phase = p.phase;
    jp.last_event = now;
    v1::Progress* out = e.mutable_progress();
    out->set_phase(p.phase);
    out->set_model(p.model);
    out->set_model_index(claim.task.index);
    out->set_model_count(count);
    out->set_windows_done(p.windows_done);
    out->set_windows_total(p.windows_total);
    out->set_fraction(fraction);
    const double elapsed = std::chrono::duration<double>(now - jp.first_event).count();
    // Extrapolated from the fraction, which weighs each phase by its
    // expected time (progress_weights.h), or what the phase knows it has
    // left when that is longer: the timing's budget may time more pairs
    // than its weight expects.
    double eta = fraction > 0.01 ? elapsed * (1 - fraction) / fraction : 0;
    eta = std::max(eta, p.phase_seconds_left);
    if (eta > 0) out->set_eta_seconds(eta);
  }
  const absl::Status stored = Emit(job_id, e);
  absl::MutexLock lock(&mu_);
  if (stored.ok()) {
    unstored_progress_.erase(job_id);  // older than this one
    return absl::OkStatus();
  }
  // The latest one is stored when the store takes writes again (the
  // sweep); one line in the log per job.
  if (unstored_progress_.insert_or_assign(job_id, std::move(e)).second) {
    LogError(job_id, "progress event not stored; the latest is kept and stored later", stored);
  }
  return absl::OkStatus();
}

void Coordinator::StoreUnstoredProgress() {
  std::map<int64_t, v1::JobEvent> unstored;
  {
    absl::MutexLock lock(&mu_);
    unstored.swap(unstored_progress_);
  }
  for (auto& entry : unstored) {
    const int64_t job_id = entry.first;  // (a lambda cannot capture a structured binding)
    v1::JobEvent& event = entry.second;
    // Not after the job's end: its terminal event is its last.
    int64_t seq = 0;
    const absl::Status stored = store_->Transaction([&]() -> absl::Status {
      FCA_ASSIGN_OR_RETURN(const storage::JobRecord job, store_->GetJob(job_id));
      if (storage::IsTerminal(job.state)) return absl::OkStatus();
      event.clear_seq();
      FCA_ASSIGN_OR_RETURN(seq, store_->AppendJobEvent(job_id, event.SerializeAsString()));
      return absl::OkStatus();
    });
    if (stored.ok() || absl::IsNotFound(stored)) {
      if (seq > 0) hub_->Notify(job_id, seq);
      continue;
    }
    absl::MutexLock lock(&mu_);
    unstored_progress_.emplace(job_id, std::move(event));  // unless a newer one came
  }
}

absl::Status Coordinator::ReportNote(const runtime::Lease& lease, const std::string& text) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, CheckLease(lease));
  return Emit(claim.job.id, NoteEvent(text));
}

absl::Status Coordinator::ReportRows(const runtime::Lease& lease, const std::string& model,
                                     const std::string& weights_sha256,
                                     const std::vector<engine::ResultRow>& engine_rows) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, CheckLease(lease));
  const int64_t job_id = claim.job.id;
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const v1::AuditSpec> job_spec, JobSpec(claim.job));
  const v1::AuditSpec& spec = *job_spec;
  if (model != claim.task.model && model != spec.dense_twin()) {
    return absl::PermissionDeniedError(
        absl::StrFormat("task %d audits model '%s'; it may not report rows of '%s'", claim.task.id,
                        claim.task.model, model.substr(0, 128)));
  }
  FCA_ASSIGN_OR_RETURN(const storage::DatasetRecord eval,
                       FindDatasetRef(store_, spec.eval_dataset(), claim.job.project));
  FCA_ASSIGN_OR_RETURN(const storage::DatasetRecord calib,
                       FindDatasetRef(store_, spec.calib_dataset(), claim.job.project));
  const std::vector<storage::ResultRow> rows =
      ToStorageRows(engine_rows, weights_sha256, job_id, {eval.sha256, calib.sha256});
  std::chrono::milliseconds delay = options_.end_retry_delay;
  absl::StatusOr<int64_t> inserted = store_->InsertResults(job_id, rows);
  for (int attempt = 0; attempt < options_.end_retries && Transient(inserted.status());
       ++attempt, delay *= 2) {
    std::this_thread::sleep_for(delay);
    inserted = store_->InsertResults(job_id, rows);
  }
  // Watchers must not see rows a query will not find.
  if (!inserted.ok()) return inserted.status();
  // Every task times the dense twin and reports its rows; the first ones
  // stored stand, and are streamed once.
  if (model != claim.task.model && *inserted == 0) return absl::OkStatus();
  // Stream the rows as stored: after a retry they are the first attempt's
  // numbers (rows are never written twice), not this attempt's.
  storage::ResultFilter filter;
  filter.job_id = job_id;
  filter.model = model;
  v1::JobEvent e;
  v1::ResultBatch* batch = e.mutable_results();
  batch->set_model(model);
  std::string token;
  do {
    FCA_ASSIGN_OR_RETURN(storage::ResultPage page,
                         store_->QueryResults(filter, storage::Store::kMaxPageSize, token));
    for (const storage::ResultRow& r : page.rows) *batch->add_results() = ToProto(r);
    token = page.next_page_token;
  } while (!token.empty());
  EmitOrLog(job_id, std::move(e));
  return absl::OkStatus();
}

absl::Status Coordinator::RecordTaskEnd(const TaskEnd& end) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskRecord task,
                       store_->FinishTask(end.lease.task_id, end.lease.lease_seq, end.state,
                                          end.error, end.provenance_json));
  LogTaskEnd(task);
  if (end.state == storage::JobState::kFailed) {
    EmitOrLog(task.job_id, NoteEvent("model " + task.model + " failed: " + end.error));
    StopJob(task.job_id);
  }
  SettleJobs();
  return absl::OkStatus();
}

void Coordinator::LogTaskEnd(const storage::TaskRecord& task) {
  // The owner is for the log line only: a store that cannot say leaves "?".
  absl::StatusOr<storage::JobRecord> job = store_->GetJob(task.job_id);
  TaskEnded(task, job.ok() ? job->owner : "?");
}

std::string Coordinator::RecordedProvenance(const absl::StatusOr<storage::TaskClaim>& claim,
                                            v1::TaskProvenance provenance) {
  if (provenance.ByteSizeLong() == 0) return "";
  // The holder is who the coordinator leased the task to ("name@user" for a
  // remote worker), whatever name the worker gives itself.
  if (claim.ok()) provenance.set_worker(claim->task.worker);
  return runtime::ToStoredJson(provenance);
}

absl::Status Coordinator::Finish(const runtime::Lease& lease, const absl::Status& outcome,
                                 const v1::TaskProvenance& provenance) {
  TaskEnd end;
  end.lease = lease;
  end.state = EndState(outcome);
  end.error = end.state == storage::JobState::kFailed ? runtime::StatusText(outcome) : "";
  // Whose end it is, for the log and the job's notice. When the lease
  // cannot be read now, the end itself will say why.
  const absl::StatusOr<storage::TaskClaim> claim = CheckLease(lease);
  if (claim.ok()) {
    end.job_id = claim->job.id;
    end.model = claim->task.model;
  }
  end.provenance_json = RecordedProvenance(claim, provenance);
  std::chrono::milliseconds delay = options_.end_retry_delay;
  absl::Status status;
  for (int attempt = 0; attempt <= options_.end_retries; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(delay);
      delay *= 2;
    }
    status = RecordTaskEnd(end);
    if (EndSettled(status)) return status;
  }
  // Said where it is seen: the job's notice (GetJob, ListJobs, a note to
  // its watchers) and the log, until the store takes it.
  const std::string notice = absl::StrFormat(
      "model %s ended %s, but the store cannot record it yet (%s); the server retries at every "
      "sweep%s",
      end.model, storage::JobStateName(end.state), status.message(),
      absl::IsResourceExhausted(status) ? "; free disk space (delete finished jobs or unused "
                                          "datasets) to let it end"
                                        : "");
  LogError(end.job_id, absl::StrFormat("task %d: %s", lease.task_id, notice).c_str(), status);
  hub_->SetNotice(end.job_id, notice);
  absl::MutexLock lock(&ends_mu_);
  pending_ends_.push_back(end);
  return absl::OkStatus();
}

void Coordinator::RetryPendingEnds() {
  std::vector<TaskEnd> pending;
  {
    absl::MutexLock lock(&ends_mu_);
    pending.swap(pending_ends_);
  }
  std::vector<TaskEnd> still;
  std::set<int64_t> recorded;  // jobs
  for (const TaskEnd& end : pending) {
    if (EndSettled(RecordTaskEnd(end))) {
      LOG(INFO) << "job " << end.job_id << ": the end of task " << end.lease.task_id
                << " is recorded";
      recorded.insert(end.job_id);
    } else {
      still.push_back(end);
    }
  }
  for (const TaskEnd& end : still) recorded.erase(end.job_id);
  for (int64_t job_id : recorded) hub_->SetNotice(job_id, "");
  absl::MutexLock lock(&ends_mu_);
  pending_ends_.insert(pending_ends_.end(), still.begin(), still.end());
}

absl::Status Coordinator::Release(const runtime::Lease& lease, const absl::Status& reason,
                                  bool refund) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskRecord task,
                       store_->ReleaseTask(lease.task_id, lease.lease_seq, refund,
                                           runtime::StatusText(reason), options_.max_attempts));
  if (task.state == storage::JobState::kFailed) {
    LogTaskEnd(task);
    EmitOrLog(task.job_id, NoteEvent("model " + task.model + " failed: " + task.error));
    StopJob(task.job_id);
    SettleJobs();
  } else {
    EmitOrLog(task.job_id, NoteEvent(absl::StrFormat("model %s: queued again: %s", task.model,
                                                     std::string(reason.message()))));
    Wake();
  }
  return absl::OkStatus();
}

absl::Status Coordinator::Refuse(const runtime::Lease& lease, const absl::Status& reason) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, CheckLease(lease));
  const storage::TaskRecord& task = claim.task;
  const std::string why(reason.message());
  const int64_t now = NowUs();
  const std::chrono::milliseconds backoff =
      refusals_.Record(task.job_id, task.id, task.worker, why, now);
  const std::string refused =
      absl::StrFormat("model %s: worker %s refused it: %s", task.model, task.worker, why);
  if (!task.executor_ref.empty()) {
    // Placed by an executor (Slurm): its worker runs this one task and
    // exits, and the next placement starts another; each refusal spends a
    // placement, as a worker lost before it claimed would.
    return Release(lease,
                   absl::FailedPreconditionError("refused by " + refusals_.Describe(task.id)),
                   /*refund=*/false);
  }
  const bool everyone = refusals_.RefusedByEveryLiveWorker(task.id, now, options_.lease);
  if (everyone && refusals_.GraceOver(task.id, now)) {
    EmitOrLog(task.job_id, NoteEvent(refused));
    return Finish(lease,
                  absl::FailedPreconditionError(absl::StrFormat(
                      "no worker can run model %s: every live worker refused it: %s", task.model,
                      refusals_.Describe(task.id))),
                  {});
  }
  FCA_ASSIGN_OR_RETURN(const storage::TaskRecord released,
                       store_->ReleaseTask(task.id, lease.lease_seq, /*refund_attempt=*/true,
                                           runtime::StatusText(reason), options_.max_attempts));
  if (released.state != storage::JobState::kQueued) {
    SettleJobs();  // its job is being stopped
    return absl::OkStatus();
  }
  const std::string waiting =
      everyone ? absl::StrFormat(
                     "every live worker has refused it; it waits up to %.3g s from "
                     "its first refusal for one that can run it",
                     std::chrono::duration<double>(options_.refusal_backoff.grace).count())
               : "queued again for the other workers";
  EmitOrLog(task.job_id,
            NoteEvent(absl::StrFormat("%s; not offered to it again for %.3g s; %s", refused,
                                      std::chrono::duration<double>(backoff).count(), waiting)));
  Wake();
  return absl::OkStatus();
}

absl::Status Coordinator::ReleaseLost(const std::string& worker) {
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::TaskRecord> running,
                       store_->ListTasksInState(storage::JobState::kRunning, 100000));
  for (const storage::TaskRecord& t : running) {
    if (t.worker != worker) continue;
    const absl::Status released =
        Release(LeaseOf(t),
                absl::UnavailableError(absl::StrFormat(
                    "worker %s lost it (it asked for a new task while holding it)", worker)),
                /*refund=*/false);
    // Ended or claimed again meanwhile: no longer this worker's.
    if (!released.ok() && !absl::IsFailedPrecondition(released)) return released;
  }
  return absl::OkStatus();
}

absl::StatusOr<runtime::DatasetBytes> Coordinator::ReadDataset(const runtime::Lease& lease,
                                                               bool calibration) {
  FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, CheckLease(lease));
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const v1::AuditSpec> spec, JobSpec(claim.job));
  return ReadJobDataset(store_, *spec, claim.job.project, calibration);
}

std::optional<std::string> Coordinator::GetCoefficients(const runtime::Lease& lease,
                                                        const engine::CoefficientCacheKey& key) {
  absl::StatusOr<storage::TaskClaim> claim = CheckLease(lease);
  if (!claim.ok()) return std::nullopt;
  // The job's project's namespace: one project's audits never hit, or
  // reveal, another project's entries.
  auto entry = store_->GetCoefficients(
      {claim->job.project, key.weights_sha256, key.window_hash, key.dtype, key.device});
  if (!entry.ok()) {
    LogCacheError(claim->job.id, "cannot read the coefficient cache", entry.status());
    ObserveCacheLookup(false, 0);
    return std::nullopt;
  }
  if (!entry->has_value()) {
    ObserveCacheLookup(false, 0);
    return std::nullopt;
  }
  ObserveCacheLookup(true, static_cast<int64_t>((*entry)->blob.size()));
  return std::move((*entry)->blob);
}

void Coordinator::PutCoefficients(const runtime::Lease& lease,
                                  const engine::CoefficientCacheKey& key,
                                  const std::string& bytes) {
  absl::StatusOr<storage::TaskClaim> claim = CheckLease(lease);
  if (!claim.ok()) return;
  // A failed put (budget, busy database) only costs a later cache miss.
  const absl::Status status = store_->PutCoefficients(
      {claim->job.project, key.weights_sha256, key.window_hash, key.dtype, key.device}, "", bytes);
  if (status.ok()) ObserveCacheWrite(static_cast<int64_t>(bytes.size()));
  if (!status.ok()) LogCacheError(claim->job.id, "cannot write the coefficient cache", status);
}

}  // namespace fca::jobs
