#include "server/core/scheduler.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/core/mapping.h"
#include "server/core/spec.h"

namespace fca::core {
namespace {

using Clock = std::chrono::steady_clock;

void LogError(int64_t job_id, const char* what, const absl::Status& status) {
  std::fprintf(stderr, "fca-server: job %lld: %s: %s\n", static_cast<long long>(job_id), what,
               status.ToString().c_str());
}

// The coefficient cache of the engine, kept in the store in the job owner's
// namespace: one user's audits never hit, or reveal, another user's entries.
class StoreCoefficientCache : public engine::CoefficientCache {
 public:
  StoreCoefficientCache(storage::Store* store, int64_t job_id, std::string owner)
      : store_(store), job_id_(job_id), owner_(std::move(owner)) {}

  std::optional<std::string> Get(const engine::CoefficientCacheKey& key) override {
    auto entry = store_->GetCoefficients(StorageKey(key));
    if (!entry.ok()) {
      LogFirst("cannot read the coefficient cache", entry.status());
      return std::nullopt;
    }
    if (!entry->has_value()) return std::nullopt;
    return std::move((*entry)->blob);
  }

  void Put(const engine::CoefficientCacheKey& key, const std::string& bytes) override {
    // A failed put (budget, busy database) only costs a later cache miss.
    const absl::Status status = store_->PutCoefficients(StorageKey(key), "", bytes);
    if (!status.ok()) LogFirst("cannot write the coefficient cache", status);
  }

 private:
  storage::CoefficientKey StorageKey(const engine::CoefficientCacheKey& key) const {
    return {owner_, key.weights_sha256, key.window_hash, key.dtype, key.device};
  }

  // One line per job: a broken cache fails every window the same way.
  void LogFirst(const char* what, const absl::Status& status) {
    if (logged_++ == 0) LogError(job_id_, what, status);
  }

  storage::Store* store_;
  int64_t job_id_;
  std::string owner_;
  int logged_ = 0;
};

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

}  // namespace

Scheduler::Scheduler(storage::Store* store, ModelRepository* models, EventHub* hub,
                     Options options)
    : store_(store), models_(models), hub_(hub), options_(options) {}

Scheduler::~Scheduler() { Stop(/*requeue=*/true); }

absl::Status Scheduler::Start() {
  // Jobs that end here get their terminal event in the same transaction.
  // (The reason is the job's error; an event carries a state or a note.)
  auto end_event = [](storage::JobState state, const std::string&) {
    return StateEvent(ToProto(state)).SerializeAsString();
  };
  FCA_ASSIGN_OR_RETURN(const storage::RecoveredJobs recovered,
                       store_->RecoverJobs(options_.max_attempts, end_event));
  if (recovered.requeued > 0) {
    std::fprintf(stderr, "fca-server: %lld interrupted job(s) queued again\n",
                 static_cast<long long>(recovered.requeued));
  }
  for (int64_t id : recovered.failed) {
    std::fprintf(stderr, "fca-server: job %lld failed: it stopped the server %d times\n",
                 static_cast<long long>(id), options_.max_attempts);
  }
  // Their streams died with the previous process.
  FCA_ASSIGN_OR_RETURN(const int64_t uploads, store_->DropUnfinishedUploads());
  if (uploads > 0) {
    std::fprintf(stderr, "fca-server: %lld unfinished upload(s) dropped\n",
                 static_cast<long long>(uploads));
  }
  worker_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Scheduler::Stop(bool requeue) {
  requeue_on_stop_ = requeue;
  if (stopping_.exchange(true)) {
    if (worker_.joinable()) worker_.join();
    return;
  }
  if (requeue) interrupt_ = true;
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Scheduler::Cancel(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_job_ == job_id) interrupt_ = true;
}

void Scheduler::Loop() {
  while (!stopping_) {
    RetryPendingEnds();
    auto job = store_->ClaimNextQueued();
    if (!job.ok() || !job->has_value()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.poll_interval, [&] { return stopping_.load() || wake_; });
      wake_ = false;
      continue;
    }
    RunJob(**job);
  }
  // A last chance before exit; what is still pending stays RUNNING in the
  // store, and the next start queues it again.
  RetryPendingEnds();
}

absl::Status Scheduler::Emit(int64_t job_id, v1::JobEvent event) {
  event.clear_seq();
  FCA_ASSIGN_OR_RETURN(int64_t seq, store_->AppendJobEvent(job_id, event.SerializeAsString()));
  hub_->Notify(job_id, seq);
  return absl::OkStatus();
}

void Scheduler::EmitOrLog(int64_t job_id, v1::JobEvent event) {
  const absl::Status status = Emit(job_id, std::move(event));
  if (!status.ok()) LogError(job_id, "event not stored", status);
}

int64_t Scheduler::PendingEnds() {
  std::lock_guard<std::mutex> lock(ends_mu_);
  return static_cast<int64_t>(pending_ends_.size());
}

absl::Status Scheduler::RecordEnd(const JobEnd& end) {
  const v1::JobEvent event = StateEvent(ToProto(end.state));
  int64_t seq = 0;
  FCA_RETURN_IF_ERROR(store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->FinishJob(end.job_id, end.state, end.error).status());
    FCA_ASSIGN_OR_RETURN(seq, store_->AppendJobEvent(end.job_id, event.SerializeAsString()));
    return absl::OkStatus();
  }));
  hub_->Notify(end.job_id, seq);
  return absl::OkStatus();
}

namespace {

// Recorded, or no longer this scheduler's to record (the job is not
// RUNNING any more, or was deleted).
bool EndSettled(const absl::Status& status) {
  return status.ok() || absl::IsFailedPrecondition(status) || absl::IsNotFound(status);
}

}  // namespace

void Scheduler::FinishWithRetries(const JobEnd& end) {
  std::chrono::milliseconds delay = options_.end_retry_delay;
  absl::Status status;
  for (int attempt = 0; attempt <= options_.end_retries; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(delay);
      delay *= 2;
    }
    status = RecordEnd(end);
    if (EndSettled(status)) return;
  }
  LogError(end.job_id, "cannot record the job's end yet; retrying", status);
  std::lock_guard<std::mutex> lock(ends_mu_);
  pending_ends_.push_back(end);
}

void Scheduler::RetryPendingEnds() {
  std::vector<JobEnd> pending;
  {
    std::lock_guard<std::mutex> lock(ends_mu_);
    pending.swap(pending_ends_);
  }
  std::vector<JobEnd> still;
  for (const JobEnd& end : pending) {
    if (EndSettled(RecordEnd(end))) {
      std::fprintf(stderr, "fca-server: job %lld: its end is recorded\n",
                   static_cast<long long>(end.job_id));
    } else {
      still.push_back(end);
    }
  }
  std::lock_guard<std::mutex> lock(ends_mu_);
  pending_ends_.insert(pending_ends_.end(), still.begin(), still.end());
}

void Scheduler::RunJob(const storage::JobRecord& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_job_ = job.id;
    interrupt_ = stopping_.load() && requeue_on_stop_.load();
    timed_out_ = false;
  }
  // A cancel that arrived between the claim and now found no running job to
  // interrupt; the store has it.
  auto current = store_->GetJob(job.id);
  if (current.ok() && current->cancel_requested) interrupt_ = true;
  EmitOrLog(job.id, StateEvent(v1::JOB_STATE_RUNNING));
  absl::Status st = Execute(job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_job_ = 0;
  }
  const bool cancelled = st.code() == absl::StatusCode::kCancelled;
  // Interrupted by shutdown (not by a user's cancel): back to the queue,
  // without counting against the job's attempts.
  if (cancelled && !timed_out_ && stopping_ && requeue_on_stop_) {
    auto record = store_->GetJob(job.id);
    if (record.ok() && !record->cancel_requested) {
      EmitOrLog(job.id, NoteEvent("server shutting down: the job will run again"));
      const absl::Status requeued = store_->RequeueJob(job.id, /*refund_attempt=*/true);
      // Left RUNNING otherwise: the next start queues it again.
      if (!requeued.ok()) LogError(job.id, "cannot queue the job again", requeued);
      if (requeued.ok()) EmitOrLog(job.id, StateEvent(v1::JOB_STATE_QUEUED));
      return;
    }
  }
  if (cancelled && timed_out_) {
    st = absl::DeadlineExceededError(absl::StrFormat(
        "the job ran longer than this server's limit of %.3g s per job",
        std::chrono::duration<double>(options_.max_job_duration).count()));
  }
  JobEnd end;
  end.job_id = job.id;
  end.state = st.ok() ? storage::JobState::kSucceeded
              : cancelled && !timed_out_ ? storage::JobState::kCancelled
                                         : storage::JobState::kFailed;
  end.error = end.state == storage::JobState::kFailed ? StatusText(st) : "";
  if (!end.error.empty()) EmitOrLog(job.id, NoteEvent("job failed: " + end.error));
  FinishWithRetries(end);
}

bool Scheduler::DeadlinePassed(Clock::time_point start) const {
  return options_.max_job_duration.count() > 0 &&
         Clock::now() - start > options_.max_job_duration;
}

absl::Status Scheduler::Publish(const storage::JobRecord& job, const std::string& model,
                                std::vector<storage::ResultRow> rows) {
  std::chrono::milliseconds delay = options_.end_retry_delay;
  absl::StatusOr<int64_t> inserted = store_->InsertResults(job.id, rows);
  for (int attempt = 0; attempt < options_.end_retries && Transient(inserted.status());
       ++attempt, delay *= 2) {
    std::this_thread::sleep_for(delay);
    inserted = store_->InsertResults(job.id, rows);
  }
  // Watchers must not see rows a query will not find.
  if (!inserted.ok()) return inserted.status();
  // Stream the rows as stored: after a requeue they are the first
  // attempt's numbers (rows are never written twice), not this attempt's.
  storage::ResultFilter filter;
  filter.job_id = job.id;
  filter.model = model;
  v1::JobEvent e;
  v1::ResultBatch* batch = e.mutable_results();
  batch->set_model(model);
  std::string token;
  do {
    absl::StatusOr<storage::ResultPage> page =
        store_->QueryResults(filter, storage::Store::kMaxPageSize, token);
    if (!page.ok()) return page.status();
    for (const storage::ResultRow& r : page->rows) *batch->add_results() = ToProto(r);
    token = page->next_page_token;
  } while (!token.empty());
  EmitOrLog(job.id, std::move(e));
  return absl::OkStatus();
}

absl::Status Scheduler::Execute(const storage::JobRecord& job) {
  FCA_ASSIGN_OR_RETURN(v1::AuditSpec spec, SpecFromJson(job.spec_json));
  FCA_ASSIGN_OR_RETURN(ResolvedAudit audit, ResolveAudit(spec, job.owner, store_, models_));
  StoreCoefficientCache cache(store_, job.id, job.owner);
  engine::AuditRequest& req = audit.request;
  req.cancelled = &interrupt_;
  if (options_.use_coefficient_cache) req.cache = &cache;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_progress = start - options_.progress_interval;
  std::string last_phase;
  req.on_progress = [&](const engine::AuditProgress& p) {
    // Progress comes after every batch: the time limit is honoured within one.
    if (DeadlinePassed(start)) {
      timed_out_ = true;
      interrupt_ = true;
    }
    hub_->SetProgress(job.id, p.fraction);
    const Clock::time_point now = Clock::now();
    if (p.phase == last_phase && now - last_progress < options_.progress_interval) return;
    last_phase = p.phase;
    last_progress = now;
    v1::JobEvent e;
    v1::Progress* out = e.mutable_progress();
    out->set_phase(p.phase);
    out->set_model(p.model);
    out->set_model_index(p.model_index);
    out->set_model_count(p.model_count);
    out->set_windows_done(p.windows_done);
    out->set_windows_total(p.windows_total);
    out->set_fraction(p.fraction);
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (p.fraction > 0.01) out->set_eta_seconds(elapsed * (1 - p.fraction) / p.fraction);
    EmitOrLog(job.id, std::move(e));
  };
  absl::Status store_error;
  auto publish = [&](const std::string& model, const std::string& weights_sha256,
                     const std::vector<engine::ResultRow>& engine_rows) {
    if (!store_error.ok()) return;
    store_error = Publish(job, model,
                          ToStorageRows(engine_rows, weights_sha256, job.id, audit.eval_sha256));
    // No point auditing on what cannot be stored.
    if (!store_error.ok()) interrupt_ = true;
  };
  req.on_model_done = [&](const engine::ModelReport& report) {
    publish(report.model.name, report.model.weights_sha256, engine::ResultRows(report));
  };
  req.on_note = [&](const std::string& text) { EmitOrLog(job.id, NoteEvent(text)); };
  auto report = engine::RunAudit(req);
  if (!store_error.ok()) return store_error;
  if (!report.ok()) return report.status();
  if (report->dense_twin && req.dense_twin != nullptr) {
    publish(report->dense_twin->model, req.dense_twin->info().weights_sha256,
            engine::ExecutionRows(*report->dense_twin));
  }
  return store_error;
}

}  // namespace fca::core
