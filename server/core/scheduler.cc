#include "server/core/scheduler.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/core/mapping.h"
#include "server/core/spec.h"

namespace fca::core {
namespace {

using Clock = std::chrono::steady_clock;

// The coefficient cache of the engine, kept in the store.
class StoreCoefficientCache : public engine::CoefficientCache {
 public:
  explicit StoreCoefficientCache(storage::Store* store) : store_(store) {}
  std::optional<std::string> Get(const std::string& weights, const std::string& window,
                                 const std::string& dtype) override {
    auto entry = store_->GetCoefficients({weights, window, dtype});
    if (!entry.ok() || !entry->has_value()) return std::nullopt;
    return std::move((*entry)->blob);
  }
  void Put(const std::string& weights, const std::string& window, const std::string& dtype,
           const std::string& bytes) override {
    // A failed put (budget, busy database) only costs a later cache miss.
    (void)store_->PutCoefficients({weights, window, dtype}, "", bytes);
  }

 private:
  storage::Store* store_;
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

}  // namespace

Scheduler::Scheduler(storage::Store* store, ModelRepository* models, EventHub* hub,
                     Options options)
    : store_(store), models_(models), hub_(hub), options_(options) {}

Scheduler::~Scheduler() { Stop(/*requeue=*/true); }

absl::Status Scheduler::Start() {
  FCA_ASSIGN_OR_RETURN(int64_t requeued, store_->RequeueRunning());
  if (requeued > 0) {
    std::fprintf(stderr, "fca-server: %lld interrupted job(s) queued again\n",
                 static_cast<long long>(requeued));
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
    auto job = store_->ClaimNextQueued();
    if (!job.ok() || !job->has_value()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.poll_interval, [&] { return stopping_.load() || wake_; });
      wake_ = false;
      continue;
    }
    RunJob(**job);
  }
}

absl::Status Scheduler::Emit(int64_t job_id, v1::JobEvent event) {
  event.clear_seq();
  FCA_ASSIGN_OR_RETURN(int64_t seq, store_->AppendJobEvent(job_id, event.SerializeAsString()));
  hub_->Notify(job_id, seq);
  return absl::OkStatus();
}

void Scheduler::RunJob(const storage::JobRecord& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_job_ = job.id;
    interrupt_ = stopping_.load() && requeue_on_stop_.load();
  }
  // A cancel that arrived between the claim and now found no running job to
  // interrupt; the store has it.
  auto current = store_->GetJob(job.id);
  if (current.ok() && current->cancel_requested) interrupt_ = true;
  (void)Emit(job.id, StateEvent(v1::JOB_STATE_RUNNING));
  absl::Status st = Execute(job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_job_ = 0;
  }
  // Interrupted by shutdown (not by a user's cancel): back to the queue.
  if (st.code() == absl::StatusCode::kCancelled && stopping_ && requeue_on_stop_) {
    auto record = store_->GetJob(job.id);
    if (record.ok() && !record->cancel_requested) {
      (void)Emit(job.id, NoteEvent("server shutting down: the job will run again"));
      (void)store_->RequeueRunning();
      (void)Emit(job.id, StateEvent(v1::JOB_STATE_QUEUED));
      return;
    }
  }
  storage::JobState final_state = st.ok() ? storage::JobState::kSucceeded
                                  : st.code() == absl::StatusCode::kCancelled
                                      ? storage::JobState::kCancelled
                                      : storage::JobState::kFailed;
  const std::string error = final_state == storage::JobState::kFailed ? StatusText(st) : "";
  if (!error.empty()) (void)Emit(job.id, NoteEvent("job failed: " + error));
  auto finished = store_->FinishJob(job.id, final_state, error);
  if (!finished.ok()) {
    std::fprintf(stderr, "fca-server: job %lld: cannot record its end: %s\n",
                 static_cast<long long>(job.id), std::string(finished.status().message()).c_str());
  }
  (void)Emit(job.id, StateEvent(ToProto(final_state)));
}

absl::Status Scheduler::Execute(const storage::JobRecord& job) {
  FCA_ASSIGN_OR_RETURN(v1::AuditSpec spec, SpecFromJson(job.spec_json));
  FCA_ASSIGN_OR_RETURN(ResolvedAudit audit, ResolveAudit(spec, job.owner, store_, models_));
  StoreCoefficientCache cache(store_);
  engine::AuditRequest& req = audit.request;
  req.cancelled = &interrupt_;
  if (options_.use_coefficient_cache) req.cache = &cache;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_progress = start - options_.progress_interval;
  std::string last_phase;
  req.on_progress = [&](const engine::AuditProgress& p) {
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
    (void)Emit(job.id, std::move(e));
  };
  absl::Status store_error;
  // Stores one model's rows and streams them to watchers.
  auto publish = [&](const std::string& model, const std::string& weights_sha256,
                     const std::vector<engine::ResultRow>& engine_rows) {
    std::vector<storage::ResultRow> rows =
        ToStorageRows(engine_rows, weights_sha256, job.id, audit.eval_sha256);
    auto inserted = store_->InsertResults(job.id, rows);
    if (!inserted.ok()) {
      // Watchers must not see rows a query will not find.
      if (store_error.ok()) store_error = inserted.status();
      return;
    }
    v1::JobEvent e;
    v1::ResultBatch* batch = e.mutable_results();
    batch->set_model(model);
    for (const storage::ResultRow& r : rows) *batch->add_results() = ToProto(r);
    (void)Emit(job.id, std::move(e));
  };
  req.on_model_done = [&](const engine::ModelReport& report) {
    publish(report.model.name, report.model.weights_sha256, engine::ResultRows(report));
  };
  req.on_note = [&](const std::string& text) { (void)Emit(job.id, NoteEvent(text)); };
  auto report = engine::RunAudit(req);
  if (!report.ok()) return report.status();
  if (report->dense_twin && req.dense_twin != nullptr) {
    publish(report->dense_twin->model, req.dense_twin->info().weights_sha256,
            engine::ExecutionRows(*report->dense_twin));
  }
  return store_error;
}

}  // namespace fca::core
