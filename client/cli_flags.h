// A dry run of absl::ParseCommandLine's flag syntax.
//
// absl::ParseCommandLine exits the process with status 1 on an unknown flag
// or a bad value; the CLI promises exit 2 for usage errors. CheckCommandLine
// reads argv by the same rules (--name=value, --name value, --bool,
// --nobool, "--" ends flags) against the registered flags and returns a
// usage error instead, so main can report it and exit 2 before handing the
// same argv to absl. It also records which flags appeared, so flags given
// explicitly can override a job manifest.
#ifndef FCA_CLIENT_CLI_FLAGS_H_
#define FCA_CLIENT_CLI_FLAGS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::client {

struct CommandLineCheck {
  std::set<std::string> specified;  // flag names as registered
  bool help = false;                // -h, -help or --help was given
  std::vector<std::string> words;   // the positional arguments, in order
};

// `args` excludes the program name. Values are validated by parsing them
// into the flag (absl::CommandLineFlag::ParseFrom), which stores them; the
// real parse that follows stores the same values again.
[[nodiscard]] absl::StatusOr<CommandLineCheck> CheckCommandLine(
    const std::vector<std::string>& args);

// Usage error naming the first flag of `specified` whose current value is
// not valid UTF-8, skipping `byte_flags` (local file paths, which may be
// any bytes). Text flags land in proto3 `string` fields, which must be
// UTF-8: protobuf would log an error and send the bytes anyway, and the
// server could not parse the request.
[[nodiscard]] absl::Status CheckFlagValuesAreUtf8(const std::set<std::string>& specified,
                                                  const std::set<std::string>& byte_flags);

}  // namespace fca::client

#endif  // FCA_CLIENT_CLI_FLAGS_H_
