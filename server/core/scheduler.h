// Runs queued audit jobs, one at a time (one device), on its own thread.
//
// A job moves QUEUED -> RUNNING when claimed, and to SUCCEEDED / FAILED /
// CANCELLED when the engine returns. Every step is a job event in the store
// (state changes, throttled progress, each model's results, notes), and the
// results are stored as they are computed, so a client can watch and a
// restarted server loses nothing: jobs left RUNNING by a crash are queued
// again at start (Store::RequeueRunning) and their result rows are never
// written twice (the store skips existing rows).
#ifndef FCA_SERVER_CORE_SCHEDULER_H_
#define FCA_SERVER_CORE_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/event_hub.h"
#include "server/core/model_repository.h"
#include "storage/store.h"

namespace fca::core {

class Scheduler {
 public:
  struct Options {
    std::chrono::milliseconds poll_interval{200};  // idle wait between claims
    std::chrono::milliseconds progress_interval{500};  // progress events at most this often
    bool use_coefficient_cache = true;
    // A job claimed this many times without ending (the server crashed or
    // was killed while running it) is failed at the next start instead of
    // being run again. 0: no cap.
    int max_attempts = 3;
    // A running job is stopped within one batch after this long and FAILED
    // (DEADLINE_EXCEEDED). 0: no limit.
    std::chrono::milliseconds max_job_duration{0};
    // Recording a job's end is retried this many times, `end_retry_delay`
    // apart (doubling), before it is left to the worker loop, which tries
    // again at every turn until the store takes it.
    int end_retries = 5;
    std::chrono::milliseconds end_retry_delay{20};
  };
  Scheduler(storage::Store* store, ModelRepository* models, EventHub* hub, Options options);
  ~Scheduler();  // Stop(/*requeue=*/true)

  // Recovers from a crash (jobs left RUNNING are queued again, or FAILED
  // past max_attempts; unfinished uploads are dropped), then starts the
  // worker thread.
  absl::Status Start();
  // Stops claiming jobs. A running job is interrupted within one batch and
  // put back in the queue (requeue) or left to finish (!requeue). Blocks
  // until the worker thread has exited. Idempotent.
  void Stop(bool requeue);

  // Wakes the worker to claim a job now (called after a submit, so a new
  // job does not wait for the next poll).
  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = true;
    }
    cv_.notify_all();
  }

  // Asks the running job `job_id` (if it is the one running) to stop within
  // one batch; the store's cancel_requested flag is set by the caller.
  void Cancel(int64_t job_id);

  // Runs one claimed job to completion (exposed for tests; the worker
  // thread calls it).
  void RunJob(const storage::JobRecord& job);

  // Appends an event to a job and wakes its watchers.
  absl::Status Emit(int64_t job_id, v1::JobEvent event);

  // Ends whose recording the store refused so far (they are retried).
  int64_t PendingEnds();

 private:
  // A job's end, kept until the store has recorded it.
  struct JobEnd {
    int64_t job_id = 0;
    storage::JobState state = storage::JobState::kFailed;
    std::string error;
  };

  void Loop();
  absl::Status Execute(const storage::JobRecord& job);
  // The job's terminal state and its event, in one transaction, so a
  // watcher never sees the one without the other.
  absl::Status RecordEnd(const JobEnd& end);
  // RecordEnd, retried; a job whose end still cannot be recorded waits in
  // pending_ends_ (it stays RUNNING in the store meanwhile).
  void FinishWithRetries(const JobEnd& end);
  void RetryPendingEnds();
  // Emit(), logging a failure: an event that cannot be stored is lost, not
  // fatal to the job.
  void EmitOrLog(int64_t job_id, v1::JobEvent event);
  // Stores one model's rows (retried while the store is busy) and streams
  // the rows as stored, so a watcher sees what a query returns.
  absl::Status Publish(const storage::JobRecord& job, const std::string& model,
                       std::vector<storage::ResultRow> rows);
  bool DeadlinePassed(std::chrono::steady_clock::time_point start) const;

  storage::Store* store_;
  ModelRepository* models_;
  EventHub* hub_;
  Options options_;
  std::thread worker_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> requeue_on_stop_{true};
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t running_job_ = 0;                 // guarded by mu_
  bool wake_ = false;                       // guarded by mu_
  std::atomic<bool> interrupt_{false};      // cancels the running audit
  std::atomic<bool> timed_out_{false};      // interrupt_ came from the time limit
  std::mutex ends_mu_;
  std::vector<JobEnd> pending_ends_;        // guarded by ends_mu_
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_SCHEDULER_H_
