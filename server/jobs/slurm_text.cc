#include "server/jobs/slurm_text.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace fca::jobs::slurm {

std::string SlurmId(const storage::TaskRecord& task) {
  if (!absl::StartsWith(task.executor_ref, kRefPrefix)) return "";
  return task.executor_ref.substr(sizeof(kRefPrefix) - 1);
}

std::string ShellQuote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.substr(0, 300);
}

std::vector<std::string> SqueuePingCommand() {
  return {"squeue", "-h", "-o", "%i", "--name", kJobName};
}

std::vector<std::string> SqueueCommand() {
  // -t all: a job that just ended is still listed (for MinJobAge), with its
  // final state.
  return {"squeue", "-h", "-t", "all", "--name", kJobName, "-o", "%i %T"};
}

std::vector<std::string> SbatchCommand(const Options& options, const storage::TaskRecord& task) {
  std::vector<std::string> command = options.worker_command;
  command.push_back(absl::StrCat("--task=", task.id));
  std::vector<std::string> quoted;
  quoted.reserve(command.size());
  for (const std::string& arg : command) quoted.push_back(ShellQuote(arg));
  std::vector<std::string> argv = {
      "sbatch",
      "--parsable",
      absl::StrCat("--job-name=", kJobName),
      absl::StrCat("--cpus-per-task=", options.cpus_per_task),
      "--output=" + LogPath(options, "%j"),
      absl::StrFormat("--comment=fca job %d task %d model %s", task.job_id, task.id, task.model)};
  if (!options.partition.empty()) argv.push_back("--partition=" + options.partition);
  argv.insert(argv.end(), options.sbatch_args.begin(), options.sbatch_args.end());
  argv.push_back("--wrap=exec " + absl::StrJoin(quoted, " "));
  return argv;
}

std::vector<std::string> ScancelCommand(const std::vector<storage::TaskRecord>& tasks) {
  std::vector<std::string> argv = {"scancel"};
  for (const storage::TaskRecord& t : tasks) {
    if (t.state == storage::JobState::kRunning) continue;
    const std::string id = SlurmId(t);
    if (!id.empty()) argv.push_back(id);
  }
  if (argv.size() == 1) return {};
  return argv;
}

std::string LogPath(const Options& options, const std::string& slurm_id) {
  return absl::StrFormat("%s/%s-%s.log", options.log_dir, kJobName, slurm_id);
}

absl::StatusOr<std::string> ParseSbatch(const CommandOutput& out) {
  if (out.exit_code != 0) return absl::UnavailableError("sbatch: " + FirstLine(out.err));
  std::string id = std::string(absl::StripAsciiWhitespace(out.out));
  id = id.substr(0, id.find(';'));
  int64_t number = 0;
  if (!absl::SimpleAtoi(id, &number)) {
    return absl::InternalError("sbatch printed no job id: " + FirstLine(out.out));
  }
  return id;
}

absl::StatusOr<Queue> ParseSqueue(const CommandOutput& out) {
  if (out.exit_code != 0) return absl::UnavailableError("squeue: " + FirstLine(out.err));
  Queue queue;
  for (absl::string_view line : absl::StrSplit(out.out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.size() == 2) queue[fields[0]] = fields[1];
  }
  return queue;
}

bool Ended(const std::string& state) {
  static const std::set<std::string> kEnded = {
      "BOOT_FAIL",     "CANCELLED", "COMPLETED", "DEADLINE", "FAILED",      "NODE_FAIL",
      "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT",   "REVOKED",  "SPECIAL_EXIT"};
  // A state with words after it ("CANCELLED by 0") ends at the first space;
  // ParseSqueue's states have none.
  return kEnded.count(state.substr(0, state.find(' '))) > 0;
}

}  // namespace fca::jobs::slurm
