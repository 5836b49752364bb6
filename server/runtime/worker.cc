#include "server/runtime/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/json.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"
#include "server/runtime/forward_metrics.h"
#include "server/runtime/messages.h"

namespace fca::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The SHA-256 of the datasets a task read.
struct DatasetHashes {
  std::string eval, calib;
};

// The coefficient cache of the engine, kept by the broker in the job's
// project's namespace.
class BrokerCache : public engine::CoefficientCache {
 public:
  BrokerCache(TaskBroker* broker, Lease lease) : broker_(broker), lease_(lease) {}
  std::optional<std::string> Get(const engine::CoefficientCacheKey& key) override {
    return broker_->GetCoefficients(lease_, key);
  }
  void Put(const engine::CoefficientCacheKey& key, const std::string& bytes) override {
    broker_->PutCoefficients(lease_, key, bytes);
  }

 private:
  TaskBroker* broker_;
  Lease lease_;
};

// The weights a worker loaded are not the coordinator's: its results would
// not be the audit of the model the job names.
absl::Status WeightsDiffer(const std::string& model, const std::string& mine,
                           const std::string& expected) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "the weights of model '%s' on this worker (sha256 %s) differ from the coordinator's "
      "(sha256 %s); check the worker's --models folder",
      model, mine.substr(0, 16), expected.substr(0, 16)));
}

void SetNow(google::protobuf::Timestamp* out) { ToTimestamp(absl::ToUnixMicros(absl::Now()), out); }

// What runs the task: this process and thread (torch keeps its thread
// count per thread, so this is read on the worker's own thread).
void RecordRuntime(const std::string& worker, const TaskAssignment& task, v1::TaskProvenance* p) {
  // The device comes with the model (RecordRequest).
  const engine::RuntimeProvenance runtime = engine::CurrentRuntime(/*device=*/"");
  p->set_worker(worker);
  p->set_host(runtime.host);
  p->set_engine_version(runtime.engine_version);
  p->set_torch_version(runtime.torch_version);
  p->set_threads(runtime.threads);
  p->set_attempt(task.attempt);
  SetNow(p->mutable_started_at());
}

// What the engine is asked to run: models as loaded, datasets as read,
// options with every default applied.
void RecordRequest(const engine::AuditRequest& req, const DatasetHashes& datasets,
                   v1::TaskProvenance* p) {
  const engine::ModelInfo& model = req.models[0]->info();
  p->set_device(model.compute.device);
  p->set_device_name(engine::DeviceName(model.compute.device));
  p->set_dtype(ComputeDTypeName(model.compute.dtype));
  p->set_weights_sha256(model.weights_sha256);
  if (req.dense_twin != nullptr) {
    p->set_dense_twin(req.dense_twin->info().name);
    p->set_dense_twin_weights_sha256(req.dense_twin->info().weights_sha256);
  }
  p->set_eval_sha256(datasets.eval);
  p->set_calib_sha256(datasets.calib);
  p->set_window_length(req.options.window_length);
  p->set_seed(req.options.seed);
  p->set_options_json(json::Write(engine::AuditOptionsToJson(req.options)));
}

// What the audit of the task's model used: windows, the cache's share of
// them, the interventions replayed.
void RecordModelReport(const engine::ModelReport& r, v1::TaskProvenance* p) {
  p->set_eval_windows(r.eval_windows);
  p->set_calib_windows(r.calib_windows);
  p->set_cached_eval_windows(r.cached_eval_windows);
  p->set_cached_calib_windows(r.cached_calib_windows);
  p->clear_interventions();
  for (const engine::InterventionResult& i : r.interventions) p->add_interventions(i.name);
}

}  // namespace

Worker::Worker(TaskBroker* broker, ModelRepository* models, Options options)
    : broker_(broker), models_(models), options_(std::move(options)) {}

Worker::~Worker() { Stop(); }

void Worker::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Worker::RequestStop() {
  // Under mu_, so that the idle wait sees it at once.
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  interrupt_ = true;
}

void Worker::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void Worker::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void Worker::StopJob(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  if (running_job_ == job_id && job_id != 0) interrupt_ = true;
}

bool Worker::Busy() {
  absl::MutexLock lock(&mu_);
  return running_job_ != 0;
}

void Worker::Loop() {
  engine::ConfigureRuntime({options_.threads});
  std::string last_error;  // logged once while it repeats (a store that stays broken)
  while (!stopping_) {
    absl::StatusOr<bool> ran = RunOne(0);
    if (!ran.ok() && ran.status().ToString() != last_error) {
      last_error = ran.status().ToString();
      LOG(WARNING) << "worker " << options_.name << ": cannot claim a task: " << ran.status()
                   << " (logged again when the reason changes)";
    }
    if (ran.ok()) last_error.clear();
    if (ran.ok() && *ran) continue;
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Worker::ClaimDue),
                         absl::FromChrono(options_.poll_interval));
    wake_ = false;
  }
}

absl::StatusOr<bool> Worker::RunOne(int64_t task_id) {
  FCA_ASSIGN_OR_RETURN(std::optional<TaskAssignment> task, broker_->Claim(options_.name, task_id));
  if (!task) return false;
  RunTask(*task);
  return true;
}

void Worker::Heartbeat(const TaskAssignment& task) {
  const auto interval =
      std::min<std::chrono::milliseconds>(options_.heartbeat_interval, task.lease_duration / 4);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&task_done_), absl::FromChrono(interval))) break;
    }
    absl::StatusOr<bool> stop = broker_->Renew(task.lease);
    if (stop.ok() && *stop) interrupt_ = true;
    if (absl::IsFailedPrecondition(stop.status()) || absl::IsNotFound(stop.status())) {
      // Someone else holds the task now: what this worker would report is
      // no longer wanted.
      lease_lost_ = true;
      interrupt_ = true;
    }
    // Other errors (the coordinator unreachable for a moment): try again
    // at the next beat; if the lease runs out meanwhile, the task runs
    // elsewhere and this worker's reports are refused.
  }
}

void Worker::RunTask(const TaskAssignment& task) {
  {
    absl::MutexLock lock(&mu_);
    running_job_ = task.job_id;
    task_done_ = false;
    interrupt_ = stopping_.load();
    timed_out_ = false;
    lease_lost_ = false;
    refusal_ = absl::OkStatus();
  }
  // A cancel that came between the claim and now is seen before any work.
  absl::StatusOr<bool> stop = broker_->Renew(task.lease);
  if (stop.ok() && *stop) interrupt_ = true;
  std::thread heartbeat([&] { Heartbeat(task); });
  v1::TaskProvenance provenance;
  absl::Status outcome = Execute(task, &provenance);
  SetNow(provenance.mutable_finished_at());
  {
    absl::MutexLock lock(&mu_);
    running_job_ = 0;
    task_done_ = true;
  }
  heartbeat.join();
  if (lease_lost_) return;  // someone else's now
  const bool cancelled = absl::IsCancelled(outcome);
  absl::Status reported;
  if (!refusal_.ok()) {
    reported = broker_->Refuse(task.lease, refusal_);
  } else if (cancelled && stopping_ && !timed_out_) {
    // Stopped by this worker's shutdown, not by the job: back to the queue,
    // without counting against the task's attempts.
    reported = broker_->Release(task.lease, absl::UnavailableError("the worker is shutting down"),
                                /*refund=*/true);
  } else {
    if (cancelled && timed_out_) {
      outcome = absl::DeadlineExceededError(absl::StrFormat(
          "the audit of model '%s' ran longer than the limit of %.3g s per task", task.model,
          std::chrono::duration<double>(options_.max_task_duration).count()));
    }
    reported = broker_->Finish(task.lease, outcome, provenance);
  }
  // The lease runs out and the task runs again elsewhere: nothing to return
  // this to.
  LogIfError(absl::StrFormat("worker %s: task %d: cannot report its end", options_.name,
                             task.lease.task_id),
             reported);
}

absl::Status Worker::CheckWeights(const TaskAssignment& task, const engine::ModelInfo& model,
                                  const engine::ModelInfo* twin) const {
  if (!task.weights_sha256.empty() && model.weights_sha256 != task.weights_sha256) {
    return WeightsDiffer(model.name, model.weights_sha256, task.weights_sha256);
  }
  if (twin != nullptr && !task.dense_twin_weights_sha256.empty() &&
      twin->weights_sha256 != task.dense_twin_weights_sha256) {
    return WeightsDiffer(twin->name, twin->weights_sha256, task.dense_twin_weights_sha256);
  }
  return absl::OkStatus();
}

absl::Status Worker::Refusing(const absl::Status& status) {
  refusal_ = status;
  return status;
}

absl::Status Worker::Execute(const TaskAssignment& task, v1::TaskProvenance* provenance) {
  RecordRuntime(options_.name, task, provenance);
  const v1::AuditSpec& spec = task.spec;
  FCA_ASSIGN_OR_RETURN(DatasetBytes eval_bytes, broker_->ReadDataset(task.lease, false));
  FCA_ASSIGN_OR_RETURN(DatasetBytes calib_bytes, broker_->ReadDataset(task.lease, true));
  const DatasetHashes datasets{eval_bytes.sha256, calib_bytes.sha256};
  FCA_ASSIGN_OR_RETURN(engine::Dataset eval, MakeDataset(std::move(eval_bytes)));
  FCA_ASSIGN_OR_RETURN(engine::Dataset calib, MakeDataset(std::move(calib_bytes)));
  absl::StatusOr<ResolvedAudit> resolved =
      ResolveTask(spec, task.model, models_, std::move(eval), std::move(calib));
  // The coordinator has the model when it sent its hash: a model this
  // worker cannot load is this worker's problem (a missing or other copy,
  // too little memory); so is memory anywhere.
  if (!resolved.ok() &&
      (!task.weights_sha256.empty() || absl::IsResourceExhausted(resolved.status()))) {
    return Refusing(resolved.status());
  }
  if (!resolved.ok()) return resolved.status();
  engine::AuditRequest& req = resolved->request;
  RecordRequest(req, datasets, provenance);
  const absl::Status weights =
      CheckWeights(task, req.models[0]->info(), req.dense_twin ? &req.dense_twin->info() : nullptr);
  if (!weights.ok()) return Refusing(weights);
  BrokerCache cache(broker_, task.lease);
  req.cancelled = &interrupt_;
  if (options_.use_coefficient_cache) req.cache = &cache;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_report = start - options_.progress_interval;
  std::string last_phase;
  absl::Status progress_error;
  ForwardTally forwards(task.model);
  req.on_progress = [&](const engine::AuditProgress& p) {
    forwards.Update(p.forward_tokens, p.forward_seconds);
    // Progress comes after every batch: the time limit is honoured within one.
    if (options_.max_task_duration.count() > 0 &&
        Clock::now() - start > options_.max_task_duration) {
      timed_out_ = true;
      interrupt_ = true;
    }
    const Clock::time_point now = Clock::now();
    if (p.phase == last_phase && now - last_report < options_.progress_interval) return;
    last_phase = p.phase;
    last_report = now;
    // Progress is best effort: the rows and the task's end are what count,
    // so a report that fails does not stop the audit. The first failure of
    // the task is logged (a broker that is down would fail every report).
    const absl::Status reported = broker_->ReportProgress(task.lease, p);
    if (!reported.ok() && progress_error.ok()) {
      progress_error = reported;
      LogIfError(absl::StrFormat("worker %s: task %d: progress not reported", options_.name,
                                 task.lease.task_id),
                 reported);
    }
  };
  absl::Status report_error;
  auto report = [&](const std::string& model, const std::string& weights_sha256,
                    const std::vector<engine::ResultRow>& rows) {
    if (!report_error.ok()) return;
    report_error = broker_->ReportRows(task.lease, model, weights_sha256, rows);
    // No point auditing on what cannot be stored.
    if (!report_error.ok()) interrupt_ = true;
  };
  req.on_model_done = [&](const engine::ModelReport& r) {
    RecordModelReport(r, provenance);
    forwards.Finish(r.forward_tokens, r.forward_seconds);
    report(r.model.name, r.model.weights_sha256, engine::ResultRows(r));
  };
  // A note that cannot be stored is logged; the audit goes on.
  req.on_note = [&](const std::string& text) {
    LogIfError("job note not reported", broker_->ReportNote(task.lease, text));
  };
  absl::StatusOr<engine::AuditReport> result = engine::RunAudit(req);
  if (!report_error.ok()) return report_error;
  // Out of (device) memory: a worker with more may run it.
  if (absl::IsResourceExhausted(result.status())) return Refusing(result.status());
  if (!result.ok()) return result.status();
  if (result->dense_twin && req.dense_twin != nullptr) {
    report(result->dense_twin->model, req.dense_twin->info().weights_sha256,
           engine::ExecutionRows(*result->dense_twin));
  }
  return report_error;
}

}  // namespace fca::runtime
