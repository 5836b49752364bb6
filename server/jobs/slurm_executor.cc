#include "server/jobs/slurm_executor.h"

#include <glog/logging.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace fca::jobs {

using slurm::FirstLine;
using slurm::SlurmId;

SlurmExecutor::SlurmExecutor(storage::Store* store, Coordinator* coordinator, Options options)
    : store_(store), coordinator_(coordinator), options_(std::move(options)) {}

absl::Status SlurmExecutor::CheckCluster() {
  absl::StatusOr<CommandOutput> out =
      RunCommand(slurm::SqueuePingCommand(), options_.command_timeout_ms);
  if (!out.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--executor=slurm: cannot run squeue (is Slurm installed?): ", out.status().message()));
  }
  if (out->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--executor=slurm: squeue failed (is SLURM_CONF set and slurmctld up?): ",
                     FirstLine(out->err)));
  }
  if (options_.worker_command.empty()) {
    return absl::InvalidArgumentError("--executor=slurm needs the fca-worker command");
  }
  return absl::OkStatus();
}

absl::StatusOr<slurm::Queue> SlurmExecutor::QueryQueue() {
  FCA_ASSIGN_OR_RETURN(CommandOutput out,
                       RunCommand(slurm::SqueueCommand(), options_.command_timeout_ms));
  return slurm::ParseSqueue(out);
}

void SlurmExecutor::Sweep() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_poll_ >= options_.poll_interval) {
    absl::StatusOr<slurm::Queue> queue = QueryQueue();
    last_poll_ = now;
    if (!queue.ok()) {
      LOG(WARNING) << "slurm: " << queue.status();
      return;  // nothing is placed while Slurm does not answer
    }
    Replace(*queue);
    absl::MutexLock lock(&mu_);
    queue_ = *std::move(queue);
  }
  int in_flight = 0;
  for (storage::JobState state : {storage::JobState::kQueued, storage::JobState::kRunning}) {
    absl::StatusOr<std::vector<storage::TaskRecord>> tasks = store_->ListTasksInState(state, 10000);
    if (!tasks.ok()) return;
    for (const storage::TaskRecord& t : *tasks) in_flight += !SlurmId(t).empty();
  }
  if (in_flight < options_.max_in_flight) Place(options_.max_in_flight - in_flight);
}

void SlurmExecutor::Replace(const slurm::Queue& queue) {
  absl::StatusOr<std::vector<storage::TaskRecord>> queued =
      store_->ListTasksInState(storage::JobState::kQueued, 10000);
  if (!queued.ok()) return;
  for (const storage::TaskRecord& t : *queued) {
    const std::string id = SlurmId(t);
    if (id.empty()) continue;
    auto it = queue.find(id);
    // Still pending or running: its fca-worker will claim the task. Every
    // placement listed here was made before this squeue answer (placing
    // and asking both happen on the sweep thread), so it is in the answer.
    if (it != queue.end() && !slurm::Ended(it->second)) continue;
    const std::string state = it == queue.end() ? "gone" : it->second;
    const int dead = ++dead_placements_[t.id];
    const std::string why =
        absl::StrFormat("Slurm job %s ended (%s) before its fca-worker claimed the task; see %s",
                        id, state, slurm::LogPath(options_, id));
    if (dead >= options_.max_attempts) {
      FailUnplaceable(t, absl::StrFormat("%s (%d placements)", why, dead));
      continue;
    }
    LogIfError(absl::StrFormat("slurm: task %d: forgetting its placement", t.id),
               store_->SetExecutorRef(t.id, ""));
    v1::JobEvent e;
    e.set_message(absl::StrFormat("model %s: %s; placing it again", t.model, why));
    coordinator_->EmitOrLog(t.job_id, std::move(e));
  }
}

void SlurmExecutor::Place(int budget) {
  absl::StatusOr<std::vector<storage::TaskRecord>> queued =
      store_->ListTasksInState(storage::JobState::kQueued, 10000);
  if (!queued.ok()) return;
  for (const storage::TaskRecord& t : *queued) {
    if (budget <= 0) break;
    if (!t.executor_ref.empty()) continue;
    absl::StatusOr<std::string> id = Submit(t);
    if (!id.ok()) {
      LOG(WARNING) << "slurm: task " << t.id << ": " << id.status();
      if (++dead_placements_[t.id] >= options_.max_attempts) {
        FailUnplaceable(t, "sbatch refused the task: " + std::string(id.status().message()));
      }
      continue;
    }
    --budget;
    LogIfError(absl::StrFormat("slurm: task %d: recording Slurm job %s", t.id, *id),
               store_->SetExecutorRef(t.id, slurm::kRefPrefix + *id));
    v1::JobEvent e;
    e.set_message(absl::StrFormat("model %s: placed as Slurm job %s", t.model, *id));
    coordinator_->EmitOrLog(t.job_id, std::move(e));
  }
}

absl::StatusOr<std::string> SlurmExecutor::Submit(const storage::TaskRecord& task) {
  FCA_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(slurm::SbatchCommand(options_, task),
                                                     options_.command_timeout_ms));
  return slurm::ParseSbatch(out);
}

void SlurmExecutor::FailUnplaceable(const storage::TaskRecord& task, const std::string& why) {
  dead_placements_.erase(task.id);
  absl::StatusOr<std::optional<runtime::TaskAssignment>> claim =
      coordinator_->Claim("slurm-executor", task.id);
  if (!claim.ok() || !claim->has_value()) return;  // someone claimed it after all
  LogIfError(absl::StrFormat("slurm: task %d: failing it", task.id),
             coordinator_->Finish((*claim)->lease, absl::UnavailableError(why), {}));
}

void SlurmExecutor::StopJob(int64_t job_id) {
  absl::StatusOr<std::vector<storage::TaskRecord>> tasks = store_->ListTasks(job_id);
  if (!tasks.ok()) return;
  // A running task stops itself within one batch when its lease renewal
  // says so, and reports how it ended; the rest have nothing to report.
  const std::vector<std::string> argv = slurm::ScancelCommand(*tasks);
  if (argv.empty()) return;
  absl::StatusOr<CommandOutput> out = RunCommand(argv, options_.command_timeout_ms);
  if (!out.ok() || out->exit_code != 0) {
    LOG(WARNING) << "slurm: scancel for job " << job_id
                 << " failed: " << (out.ok() ? FirstLine(out->err) : out.status().ToString());
  }
}

std::string SlurmExecutor::Describe(const storage::TaskRecord& task) {
  const std::string id = SlurmId(task);
  if (id.empty()) return "";
  absl::MutexLock lock(&mu_);
  auto it = queue_.find(id);
  return absl::StrFormat("slurm job %s %s", id, it == queue_.end() ? "" : it->second);
}

}  // namespace fca::jobs
