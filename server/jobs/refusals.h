// What the coordinator remembers of workers that refused tasks.
//
// A worker refuses a task because of its own state: its copy of a model has
// other weights than the coordinator's, it lacks the model, the model does
// not fit its memory. Such a refusal is not the task's fault, so it costs
// the task no attempt; instead the refusing worker is not offered that task
// again for a back-off (RefusalBackoff), so the other workers get it. When
// every live worker (one that asked for work or renewed a lease within the
// last lease) has refused the task, it still waits for a worker that can
// run it (one being restarted or resynced) until `grace` has passed since
// its first refusal; a refusal after that fails it, naming the workers and
// their reasons.
//
// Kept in the coordinator's memory: a restarted coordinator forgets the
// back-offs (the refusals stay in the jobs' events) and a refusing worker
// may refuse once more.
#ifndef FCA_SERVER_JOBS_REFUSALS_H_
#define FCA_SERVER_JOBS_REFUSALS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fca::jobs {

// How long a worker that refused a task is not offered it again: `initial`
// after its first refusal of the task, doubling with each further refusal,
// at most `max`. The one home of the defaults and of the allowed range.
struct RefusalBackoff {
  static constexpr std::chrono::milliseconds kDefaultInitial{1000};
  static constexpr std::chrono::milliseconds kDefaultMax{60000};
  // Range of both (fca-server --refusal_backoff_max_seconds).
  static constexpr std::chrono::milliseconds kMin{1};
  static constexpr std::chrono::milliseconds kMax{std::chrono::hours(1)};
  // How long a task every live worker refused waits for one that can run
  // it, from its first refusal (fca-server --refusal_grace_seconds, 0..kMax):
  // long enough for a lab's workers to restart or resync their folders.
  static constexpr std::chrono::milliseconds kDefaultGrace{std::chrono::minutes(2)};

  std::chrono::milliseconds initial = kDefaultInitial;
  std::chrono::milliseconds max = kDefaultMax;
  std::chrono::milliseconds grace = kDefaultGrace;

  // The back-off after a worker's `refusals`-th refusal of a task (1, 2, ...).
  std::chrono::milliseconds After(int refusals) const;
};

class Refusals {
 public:
  using Micros = int64_t;  // the coordinator's clock, microseconds

  explicit Refusals(RefusalBackoff backoff) : backoff_(backoff) {}

  // `worker` asked for work or renewed a lease at `now`: it is live.
  void Seen(const std::string& worker, Micros now);
  // Records that `worker` refused `task_id` (of job `job_id`) at `now` for
  // `reason`; returns how long it is not offered the task again.
  std::chrono::milliseconds Record(int64_t job_id, int64_t task_id, const std::string& worker,
                                   const std::string& reason, Micros now);
  // The tasks `worker` is not offered at `now` (their back-off runs).
  std::vector<int64_t> BackedOff(const std::string& worker, Micros now);
  // Whether every worker seen within `live` before `now` has refused the
  // task. (Workers not seen within `live` are forgotten: `now` only grows.)
  bool RefusedByEveryLiveWorker(int64_t task_id, Micros now, std::chrono::milliseconds live);
  // Whether the back-off's grace has passed at `now` since the task's first
  // refusal by any worker (false when it has none).
  bool GraceOver(int64_t task_id, Micros now);
  // "w1 (reason); w2 (reason)": every worker that refused the task, each
  // with its last reason, in the order of their first refusals.
  std::string Describe(int64_t task_id);
  // The job ended: the refusals of its tasks no longer matter.
  void ForgetJob(int64_t job_id);

 private:
  struct Refusal {
    std::string reason;
    int count = 0;
    Micros first = 0;
    Micros until = 0;
  };
  struct TaskRefusals {
    int64_t job_id = 0;
    std::map<std::string, Refusal> by_worker;
  };

  const RefusalBackoff backoff_;
  absl::Mutex mu_;
  std::map<std::string, Micros> last_seen_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, TaskRefusals> refusals_ ABSL_GUARDED_BY(mu_);  // by task id
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_REFUSALS_H_
