// Places tasks as Slurm jobs: each queued task becomes one `sbatch` job that
// runs `fca-worker --task=ID`, which claims exactly that task from the
// coordinator over gRPC, runs it and exits. Slurm decides where and when;
// the coordinator only leases the task and stores what comes back. A Slurm
// job that dies after claiming is an expired lease like any other; one that
// dies before claiming (it never started, or fca-worker failed at start) is
// noticed here and its task placed again, up to max_attempts placements.
//
// Everything the executor did is in the job's events (the Slurm job id of
// each placement) and in the task's executor_ref ("slurm:<id>"), so a
// restarted coordinator carries on with the placements of the previous one.
#ifndef FCA_SERVER_JOBS_SLURM_EXECUTOR_H_
#define FCA_SERVER_JOBS_SLURM_EXECUTOR_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/slurm_text.h"
#include "storage/store.h"

namespace fca::jobs {

class SlurmExecutor : public Executor {
 public:
  // The executor's settings (slurm_text.h, with the commands they make).
  using Options = slurm::Options;

  SlurmExecutor(storage::Store* store, Coordinator* coordinator, Options options);

  // Checks that sbatch and squeue answer; FAILED_PRECONDITION naming what
  // is wrong (Slurm not installed, SLURM_CONF unset, no controller).
  [[nodiscard]] absl::Status CheckCluster();

  void Sweep() override;
  void StopJob(int64_t job_id) override;
  std::string Describe(const storage::TaskRecord& task) override;

 private:
  // Every job of ours Slurm still knows about, with its state; error when
  // squeue failed.
  [[nodiscard]] absl::StatusOr<slurm::Queue> QueryQueue();
  // Tasks placed whose Slurm job is gone while the task was never claimed:
  // placed again (or failed after max_attempts placements).
  void Replace(const slurm::Queue& queue);
  void Place(int budget);
  [[nodiscard]] absl::StatusOr<std::string> Submit(const storage::TaskRecord& task);
  void FailUnplaceable(const storage::TaskRecord& task, const std::string& why);

  storage::Store* store_;
  Coordinator* coordinator_;
  const Options options_;
  std::chrono::steady_clock::time_point last_poll_;
  absl::Mutex mu_;
  slurm::Queue queue_ ABSL_GUARDED_BY(mu_);  // last squeue answer
  std::map<int64_t, int> dead_placements_;   // task id -> count; sweep thread only
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_SLURM_EXECUTOR_H_
