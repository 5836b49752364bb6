// What the model-writing tools (fca-local-audit, fca-train) share around
// their subcommands: their --help and the run of one subcommand.
#ifndef FCA_SERVER_TOOLS_TOOL_MAIN_H_
#define FCA_SERVER_TOOLS_TOOL_MAIN_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fca::tools {

// Before absl::ParseCommandLine: the usage message `summary`, and --help
// listing the flags of `source` (the tool's main file, a path suffix) and
// the model-shape flags.
void ConfigureToolUsage(const std::string& program, const std::string& source,
                        const std::string& summary);

struct Subcommand {
  std::string name;
  std::function<absl::Status()> run;
};

// Runs the one subcommand `args` (what absl::ParseCommandLine left) names.
// Returns the exit code: 0; 1 after printing "CODE: message" of its error
// (an unknown subcommand is INVALID_ARGUMENT); 2 after printing the usage
// line when `args` names none or several.
int RunSubcommand(const std::string& program, const std::vector<char*>& args,
                  const std::vector<Subcommand>& commands);

}  // namespace fca::tools

#endif  // FCA_SERVER_TOOLS_TOOL_MAIN_H_
