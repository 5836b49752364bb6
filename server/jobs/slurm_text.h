// The text side of the Slurm executor (slurm_executor.h): the command lines
// it runs (sbatch, squeue, scancel) and what it reads from their output.
// Pure functions, no process or store handling, so they are tested on
// recorded output (tests/core/slurm_text_test.cc) without a cluster.
#ifndef FCA_SERVER_CORE_SLURM_TEXT_H_
#define FCA_SERVER_CORE_SLURM_TEXT_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "storage/records.h"

namespace fca::jobs::slurm {

// Every Slurm job of ours carries this name, so one squeue call lists them.
inline constexpr char kJobName[] = "fca-task";
// A placed task's executor_ref is this followed by its Slurm job id.
inline constexpr char kRefPrefix[] = "slurm:";

struct Options {
  std::string partition;                 // "" = the cluster's default
  std::vector<std::string> sbatch_args;  // extra arguments, e.g. "--gres=gpu:1"
  int max_in_flight = 8;                 // tasks placed and not ended, at most
  // The worker command: the fca-worker binary and the arguments every
  // placement gets (--coordinator, --models, --device, credentials);
  // --task=ID is appended.
  std::vector<std::string> worker_command;
  int cpus_per_task = 1;
  std::string log_dir;  // --output of each Slurm job
  // squeue is asked at most this often (it is the slurmctld's load).
  std::chrono::milliseconds poll_interval{1000};
  int command_timeout_ms = 30000;
  int max_attempts = 3;  // placements that die unclaimed
};

// Slurm job id -> state (PENDING, RUNNING, COMPLETED, ...).
using Queue = std::map<std::string, std::string>;

// The Slurm job id of a task placed by the executor; "" otherwise.
std::string SlurmId(const storage::TaskRecord& task);

// One argument for sh, single-quoted: nothing inside is interpreted.
std::string ShellQuote(const std::string& arg);

// The first line of a command's output, at most 300 bytes (for messages).
std::string FirstLine(const std::string& text);

// `squeue` that answers when the cluster is reachable (CheckCluster).
std::vector<std::string> SqueuePingCommand();
// `squeue` listing every job of ours, ended ones included, as "<id> <state>".
std::vector<std::string> SqueueCommand();
// `sbatch --parsable` placing `task`: a job named kJobName that execs the
// worker command with --task=ID.
std::vector<std::string> SbatchCommand(const Options& options, const storage::TaskRecord& task);
// `scancel` of the placements of a job's tasks that are not running (a
// running task stops itself at its next renewal); empty when there is none.
std::vector<std::string> ScancelCommand(const std::vector<storage::TaskRecord>& tasks);
// Where a placement's output goes (sbatch's --output, with %j its id).
std::string LogPath(const Options& options, const std::string& slurm_id);

// The Slurm job id sbatch --parsable printed ("<id>" or "<id>;<cluster>");
// UNAVAILABLE with its first line of stderr when it failed, INTERNAL when
// it printed no id.
[[nodiscard]] absl::StatusOr<std::string> ParseSbatch(const CommandOutput& out);
// SqueueCommand's answer; UNAVAILABLE with its first line of stderr when
// it failed. Lines that are not "<id> <state>" are left out.
[[nodiscard]] absl::StatusOr<Queue> ParseSqueue(const CommandOutput& out);

// True for a state after which the Slurm job runs nothing any more
// (COMPLETED, FAILED, CANCELLED, ...); false while it may still run, or
// start, fca-worker (PENDING, RUNNING, COMPLETING, ...) and for a state
// this list does not know. What follows a space does not count
// ("CANCELLED by 0").
bool Ended(const std::string& state);

}  // namespace fca::jobs::slurm

#endif  // FCA_SERVER_CORE_SLURM_TEXT_H_
