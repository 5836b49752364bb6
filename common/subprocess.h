// Running a short-lived command (sbatch, squeue, scancel) and collecting its
// output, without a shell: arguments are passed as they are, so nothing in
// them is ever interpreted.
#ifndef FCA_COMMON_SUBPROCESS_H_
#define FCA_COMMON_SUBPROCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fca {

struct CommandOutput {
  int exit_code = 0;  // the command's exit status
  std::string out, err;
};

// Runs argv[0] (looked up in PATH when it has no '/') with the remaining
// arguments, stdin from /dev/null, and waits at most `timeout_ms`.
// NOT_FOUND when it cannot be executed, DEADLINE_EXCEEDED when it ran too
// long (it is killed), INTERNAL when it died of a signal; otherwise its exit
// code and output (each stream cut at 1 MiB).
[[nodiscard]] absl::StatusOr<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                                       int timeout_ms);

}  // namespace fca

#endif  // FCA_COMMON_SUBPROCESS_H_
