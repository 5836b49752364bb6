// A worker: claims tasks from a TaskBroker and runs their audits on its own
// models (its own ModelRepository, so its own device and memory budget).
//
// The same code runs as a thread of fca-server (broker: the Coordinator)
// and as fca-worker on another machine (broker: gRPC). While a task runs, a
// heartbeat thread renews its lease; the audit stops within one batch when
// the broker says the job stops (cancel, a failed sibling task), when the
// lease is lost, when the task's time limit passes, or when the worker is
// stopped (the task then goes back to the queue). A task the worker cannot
// run because of its own state (its weights differ from the coordinator's,
// it lacks the model, it runs out of memory) is refused (TaskBroker::Refuse),
// not failed: another worker may run it.
#ifndef FCA_SERVER_RUNTIME_WORKER_H_
#define FCA_SERVER_RUNTIME_WORKER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/task_broker.h"

namespace fca::runtime {

class Worker {
 public:
  struct Options {
    std::string name;  // shown in job events; unique among the coordinator's workers
    // Torch intra-op threads of the worker's thread (torch keeps the count
    // per thread); 0: one per core.
    int threads = 0;
    std::chrono::milliseconds poll_interval{200};      // idle wait between claims
    std::chrono::milliseconds progress_interval{500};  // reports at most this often
    // Lease renewals at most this far apart (and at most a quarter of the
    // lease): a cancel reaches a remote task within about this long.
    std::chrono::milliseconds heartbeat_interval{1000};
    // A task's audit is stopped within one batch after this long and fails
    // (DEADLINE_EXCEEDED). 0: no limit.
    std::chrono::milliseconds max_task_duration{0};
    bool use_coefficient_cache = true;
  };

  Worker(TaskBroker* broker, ModelRepository* models, Options options);
  ~Worker();  // Stop()

  // Runs tasks on a thread of its own until Stop().
  void Start();
  // Stops claiming. A running task is interrupted within one batch and
  // given back to the queue (its attempt refunded). Blocks until the thread
  // has exited. Idempotent.
  void Stop();
  // Stop() without waiting.
  void RequestStop();
  // Claims a task now instead of at the next poll.
  void Wake();
  // The job `job_id` stops: interrupt its task if this worker runs it.
  void StopJob(int64_t job_id);

  // Claims one task (`task_id`, or any when 0) and runs it to its end on
  // the calling thread. Returns whether a task was claimed; an error only
  // when the broker could not be asked (the task's own failure is reported
  // to the broker, not returned).
  [[nodiscard]] absl::StatusOr<bool> RunOne(int64_t task_id);

  // Runs a task this worker has claimed (through its broker) to its end.
  void RunTask(const TaskAssignment& task);

  const Options& options() const { return options_; }
  // Whether a task is running now.
  bool Busy();

 private:
  void Loop();
  // Stop() or Wake() was called: the idle wait ends.
  bool ClaimDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_.load() || wake_; }
  // The audit of one task; its status is the task's outcome. Fills
  // `provenance` with what it learns as it goes (a failed task keeps what
  // was known when it failed).
  [[nodiscard]] absl::Status Execute(const TaskAssignment& task, v1::TaskProvenance* provenance);
  [[nodiscard]] absl::Status CheckWeights(const TaskAssignment& task,
                                          const engine::ModelInfo& model,
                                          const engine::ModelInfo* twin) const;
  // `status` came from this worker's own state: the task is refused (see
  // above). Returns `status`.
  absl::Status Refusing(const absl::Status& status);
  void Heartbeat(const TaskAssignment& task);

  TaskBroker* broker_;
  ModelRepository* models_;
  const Options options_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  // The idle wait and the heartbeat wait on mu_ for their conditions;
  // absl::Mutex re-checks them whenever mu_ is released, so setters need no
  // notify (but must set under mu_: stopping_ too).
  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  int64_t running_job_ ABSL_GUARDED_BY(mu_) = 0;
  bool task_done_ ABSL_GUARDED_BY(mu_) = false;  // ends the heartbeat
  std::atomic<bool> interrupt_{false};           // stops the running audit
  std::atomic<bool> timed_out_{false};           // interrupt_ came from the time limit
  std::atomic<bool> lease_lost_{false};          // interrupt_ came from a lost lease
  // Why this worker cannot run the task (OK: it can); set by Execute.
  absl::Status refusal_;
};

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_WORKER_H_
