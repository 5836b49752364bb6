#include "server/tools/tool_main.h"

#include <cstdio>

#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "common/flags_usage.h"
#include "server/tools/model_flags.h"

namespace fca::tools {

void ConfigureToolUsage(const std::string& program, const std::string& source,
                        const std::string& summary) {
  absl::SetProgramUsageMessage(summary);
  ConfigureFlagsUsage(program, [source](absl::string_view file) {
    return absl::EndsWith(file, source) || DefinesModelFlags(file);
  });
}

int RunSubcommand(const std::string& program, const std::vector<char*>& args,
                  const std::vector<Subcommand>& commands) {
  if (args.size() != 2) {
    std::string names;
    for (const Subcommand& c : commands) names += (names.empty() ? "" : "|") + c.name;
    std::fprintf(stderr, "usage: %s %s [flags]  (--help for flags)\n", program.c_str(),
                 names.c_str());
    return 2;
  }
  const std::string cmd = args[1];
  absl::Status st = absl::InvalidArgumentError("unknown command " + cmd);
  for (const Subcommand& c : commands) {
    if (c.name == cmd) st = c.run();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", absl::StatusCodeToString(st.code()).c_str(),
                 std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace fca::tools
