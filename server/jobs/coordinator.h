// The coordinator: the one writer of the store for everything workers do.
//
// A job is split into tasks, one per audited model, when it is submitted.
// Workers (threads of this server, fca-worker processes elsewhere, Slurm
// jobs running fca-worker) claim tasks under leases through the TaskBroker
// interface, renew the leases while they run, and report progress, notes
// and result rows, which the coordinator stores once (a row already stored
// for the job is skipped). Its own thread, every sweep:
//   - puts tasks whose lease ran out back in the queue (a worker killed, a
//     node lost, a network cut), or fails them after max_attempts claims;
//   - ends every job whose tasks have all ended: its terminal state and
//     terminal event in one transaction;
//   - lets the executor, if any, place queued tasks (Slurm);
//   - stores each job's latest progress event that the store refused (busy
//     or full), and retries the task ends it refused: until one is taken,
//     the job's notice (EventHub) says so, naming the reason.
// A worker that refuses a task because of its own state (Refuse: its
// weights differ, it lacks the model, the model does not fit its memory)
// costs the task no attempt: the task is queued again, that worker is not
// offered it for a back-off, and the job fails only once every live worker
// has refused it, naming them (refusals.h).
// A task that fails stops its job: the job's queued tasks are cancelled and
// its running ones told to stop at their next renewal, and the job ends
// FAILED with that task's reason. Cancelling a job does the same, ending it
// CANCELLED.
//
// At start, tasks held by the previous process's own threads are queued
// again at once (or failed after max_attempts: a task that crashes the
// server is not retried forever); tasks held by remote workers keep their
// leases, so a coordinator restart loses nothing they do.
#ifndef FCA_SERVER_JOBS_COORDINATOR_H_
#define FCA_SERVER_JOBS_COORDINATOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/jobs/event_hub.h"
#include "server/jobs/refusals.h"
#include "server/jobs/remote_loaded.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/task_broker.h"
#include "storage/store.h"

namespace fca::jobs {

// Places tasks somewhere other than the server's own threads (Slurm). The
// coordinator calls it from its sweep thread only.
class Executor {
 public:
  virtual ~Executor() = default;
  // Places queued tasks (Store::SetExecutorRef records where) and notices
  // placements that died before claiming their task.
  virtual void Sweep() = 0;
  // The job was cancelled or failed: stop what was placed for its tasks.
  virtual void StopJob(int64_t job_id) = 0;
  // A line on where a task runs now ("slurm 123 RUNNING"), "" when unknown.
  virtual std::string Describe(const storage::TaskRecord& task) = 0;
};

class Coordinator : public runtime::TaskBroker {
 public:
  struct Options {
    std::chrono::milliseconds sweep_interval{200};
    std::chrono::milliseconds progress_interval{500};  // job progress events at most this often
    std::chrono::milliseconds lease{30000};
    // A task claimed this many times without ending (its workers died, or
    // the server did) fails instead of running again. 0: no cap.
    int max_attempts = 3;
    // Recording a task's end is retried this many times, `end_retry_delay`
    // apart (doubling), before it is left to the sweep, which tries again
    // every turn until the store takes it.
    int end_retries = 5;
    std::chrono::milliseconds end_retry_delay{20};
    // Ends whose observer failed (SetEndObserver) that one sweep retries.
    int unobserved_per_sweep = 100;
    // Claims check the worker's weights against this repository's hashes
    // (remote workers only: in-process workers share the folder).
    runtime::ModelRepository* models = nullptr;
    // How long a worker that refused a task is not offered it again.
    RefusalBackoff refusal_backoff;
    // Clock of the refusals' back-offs and of workers' liveness,
    // microseconds; unset: the wall clock.
    std::function<int64_t()> now_us;
  };
  // Names of this server's own workers start with this; the rest are remote.
  static constexpr char kLocalWorkerPrefix[] = "local/";

  Coordinator(storage::Store* store, EventHub* hub, Options options);
  ~Coordinator() override;  // Stop()

  // Recovers from a crash (see above), drops unfinished uploads, then starts
  // the sweep thread.
  [[nodiscard]] absl::Status Start();
  void Stop();  // idempotent; blocks until the sweep thread has exited
  // Started and not stopped (GET /readyz).
  bool Running() const { return running_.load(); }

  // Places tasks with `executor` (not owned; set before Start).
  void SetExecutor(Executor* executor) { executor_ = executor; }

  // Called with a job id whenever a job is told to stop (cancel, or a failed
  // task): the server's own workers interrupt its task within one batch.
  void AddStopListener(std::function<void(int64_t job_id)> listener);
  // Called with every job that ends (its tasks settled, or cancelled while
  // queued) inside the transaction that ends it, so what it writes (webhook
  // deliveries) commits with the end. Its error is logged and undoes only
  // its own writes: the job ends anyway, marked (Store::MarkEndUnobserved),
  // and every sweep calls the observer again on the marked jobs, each in a
  // transaction that unmarks it, until one commits: every end is observed
  // exactly once. Set before Start.
  using EndObserver = std::function<absl::Status(const storage::JobRecord& job)>;
  void SetEndObserver(EndObserver observer) { end_observer_ = std::move(observer); }
  // Runs the observer on `job`; call it inside the transaction that ends
  // the job (Store::Transaction) and fail that transaction on an error
  // (neither the observer's writes nor the mark could be stored: the job
  // must not end unobserved).
  [[nodiscard]] absl::Status ObserveEnd(const storage::JobRecord& job);
  // Wakes the idle workers (a job was submitted).
  void AddWakeListener(std::function<void()> listener);
  void Wake();

  // A user's cancel (the store's cancel flag is already set): stop the
  // job's running tasks now and end it once they have.
  void Cancel(int64_t job_id);

  // Appends an event to a job and wakes its watchers.
  [[nodiscard]] absl::Status Emit(int64_t job_id, v1::JobEvent event);
  // Emit, logging a failure: for events that nothing could act on.
  void EmitOrLog(int64_t job_id, v1::JobEvent event);

  // Ends whose recording the store refused so far (they are retried).
  int64_t PendingEnds();
  // Where the executor placed a task ("" when none did).
  std::string DescribePlacement(const storage::TaskRecord& task) {
    return executor_ == nullptr ? "" : executor_->Describe(task);
  }
  // One sweep, now (tests).
  void SweepOnce();

  // TaskBroker, for in-process workers (remote ones reach it through the
  // gRPC WorkerService). `verify_weights` asks Claim to hand out the
  // coordinator's weights hashes.
  [[nodiscard]] absl::StatusOr<std::optional<runtime::TaskAssignment>> Claim(
      const std::string& worker, int64_t task_id) override;
  [[nodiscard]] absl::StatusOr<std::optional<runtime::TaskAssignment>> ClaimChecked(
      const std::string& worker, int64_t task_id, bool verify_weights);
  [[nodiscard]] absl::StatusOr<bool> Renew(const runtime::Lease& lease) override;
  [[nodiscard]] absl::Status ReportProgress(const runtime::Lease& lease,
                                            const engine::AuditProgress& p) override;
  [[nodiscard]] absl::Status ReportNote(const runtime::Lease& lease,
                                        const std::string& text) override;
  [[nodiscard]] absl::Status ReportRows(const runtime::Lease& lease, const std::string& model,
                                        const std::string& weights_sha256,
                                        const std::vector<engine::ResultRow>& rows) override;
  [[nodiscard]] absl::Status Finish(const runtime::Lease& lease, const absl::Status& outcome,
                                    const v1::TaskProvenance& provenance) override;
  [[nodiscard]] absl::Status Release(const runtime::Lease& lease, const absl::Status& reason,
                                     bool refund) override;
  [[nodiscard]] absl::Status Refuse(const runtime::Lease& lease,
                                    const absl::Status& reason) override;
  [[nodiscard]] absl::StatusOr<runtime::DatasetBytes> ReadDataset(const runtime::Lease& lease,
                                                                  bool calibration) override;
  std::optional<std::string> GetCoefficients(const runtime::Lease& lease,
                                             const engine::CoefficientCacheKey& key) override;
  void PutCoefficients(const runtime::Lease& lease, const engine::CoefficientCacheKey& key,
                       const std::string& bytes) override;

  // A worker asks for a task only when it runs none, so tasks it still holds
  // were lost to it (a claim whose reply never arrived, an end it could not
  // record): they go back to the queue now instead of when their lease runs
  // out, the lost claim counting against their attempts. Remote claims call
  // it first (worker names are unique).
  [[nodiscard]] absl::Status ReleaseLost(const std::string& worker);
  // `worker` is live (it registered): a task it has not refused is not
  // failed for want of workers.
  void WorkerSeen(const std::string& worker);
  // A remote worker's report of the models it holds loaded (ClaimTask,
  // RenewLease); see remote_loaded.h.
  void WorkerLoaded(const std::string& worker, const std::vector<std::string>& models);
  // The models each remote worker that called within the last lease holds
  // loaded, by worker, only those the coordinator's model folder holds
  // (Options::models; none when unset): a worker cannot make GetQueue show
  // a name ListModels does not.
  std::map<std::string, std::vector<std::string>> RemoteLoadedModels();

  // The owner of the job a lease belongs to (the gRPC layer checks that a
  // worker acts for a task it holds); FAILED_PRECONDITION for a lost lease.
  [[nodiscard]] absl::StatusOr<storage::TaskClaim> CheckLease(const runtime::Lease& lease);
  const Options& options() const { return options_; }
  // The job's spec, parsed from the store once while the job runs (tasks'
  // claims and reports, local and remote); DATA_LOSS naming the job when the
  // stored spec cannot be parsed.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const v1::AuditSpec>> JobSpec(
      const storage::JobRecord& job);

 private:
  struct TaskEnd {
    runtime::Lease lease;
    int64_t job_id = 0;  // 0 and "" when the lease could not be read
    std::string model;
    storage::JobState state = storage::JobState::kFailed;
    std::string error;
    std::string provenance_json;  // "" when the worker sent none
  };
  // Per job: each task's progress fraction, and when the last progress
  // event went out.
  struct JobProgress {
    std::map<int, double> fractions;
    int task_count = 0;
    std::chrono::steady_clock::time_point first_event, last_event;
    std::string last_phase;
  };

  void Loop();
  // Stop() or Wake() was called: the sweep thread's wait ends.
  bool SweepDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_.load() || wake_; }
  void ExpireLeases();
  void SettleJobs();
  // The observer on the ends it failed on before (see SetEndObserver).
  void ObserveUnobservedEnds();
  [[nodiscard]] absl::Status RecordTaskEnd(const TaskEnd& end);
  void RetryPendingEnds();
  void StoreUnstoredProgress();
  // The job's other tasks are not worth running: stop them.
  void StopJob(int64_t job_id);
  void LogCacheError(int64_t job_id, const char* what, const absl::Status& status);
  // The stored form of a task's provenance, naming the lease holder.
  std::string RecordedProvenance(const absl::StatusOr<storage::TaskClaim>& claim,
                                 v1::TaskProvenance provenance);
  // The log line of a task's end (server_metrics.h TaskEnded), with its owner.
  void LogTaskEnd(const storage::TaskRecord& task);
  [[nodiscard]] absl::StatusOr<runtime::TaskAssignment> MakeAssignment(
      const storage::TaskClaim& claim, bool verify_weights);
  void ForgetProgress(int64_t job_id);
  int64_t NowUs() const;

  storage::Store* store_;
  EventHub* hub_;
  const Options options_;
  Executor* executor_ = nullptr;
  EndObserver end_observer_;  // set before Start, then only read
  std::thread sweeper_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};
  // The sweep thread waits on mu_ until SweepDue(); absl::Mutex re-checks
  // that whenever mu_ is released, so setters need no notify.
  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void(int64_t)>> stop_listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> wake_listeners_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, JobProgress> progress_ ABSL_GUARDED_BY(mu_);
  // Per job, the latest progress event the store refused (busy or full),
  // stored by the sweep once it takes writes again.
  std::map<int64_t, v1::JobEvent> unstored_progress_ ABSL_GUARDED_BY(mu_);
  // Each running job's spec, parsed from the store once (JobSpec).
  std::map<int64_t, std::shared_ptr<const v1::AuditSpec>> specs_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> cache_errors_logged_ ABSL_GUARDED_BY(mu_);
  // The retries of unobserved ends: the id the next sweep starts after (a
  // job whose observer keeps failing holds back none after it), and the
  // jobs whose failure was logged (once each, not at every sweep).
  int64_t unobserved_after_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int64_t> unobserved_logged_ ABSL_GUARDED_BY(mu_);
  Refusals refusals_;
  RemoteLoaded remote_loaded_;
  absl::Mutex ends_mu_;
  std::vector<TaskEnd> pending_ends_ ABSL_GUARDED_BY(ends_mu_);
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_COORDINATOR_H_
