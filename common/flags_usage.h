// absl's built-in usage flags (--help, --helpshort, --helppackage,
// --version) for every fca binary, configured in one place.
#ifndef FCA_COMMON_FLAGS_USAGE_H_
#define FCA_COMMON_FLAGS_USAGE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fca {

// OK when min <= value <= max, else INVALID_ARGUMENT naming --`flag` and
// the range.
absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t min, int64_t max);

// Whether `device` is "cpu", "cuda" or "cuda:N" (N at most four digits):
// what the engine can run on, checked at start so a typo stops a binary
// instead of failing every model load.
bool IsDeviceName(absl::string_view device);
// OK when IsDeviceName(device), else INVALID_ARGUMENT "--<flag>='<device>' is
// not cpu, cuda or cuda:N" (`flag` as the user knows it: "device",
// "devices entry").
[[nodiscard]] absl::Status CheckDeviceFlag(absl::string_view flag, absl::string_view device);

// What `program --version` prints: "<program> <BuildVersion()>\n".
std::string VersionText(absl::string_view program);

// Call before absl::ParseCommandLine. --version prints VersionText(program)
// and exits 0 (absl handles it during the parse). --help and its variants
// list the flags defined in the source files `help_files` accepts: absl's
// default only lists flags defined in a file named after the program
// (fca-server.cc), which no binary has, so --help printed "No flags matched".
void ConfigureFlagsUsage(absl::string_view program,
                         std::function<bool(absl::string_view)> help_files);

// absl answers --help, --helpshort, --helpfull, --helppackage, --helpon and
// --helpmatch with exit status 1, yet asking for help is no failure. Call
// after ConfigureFlagsUsage and before absl::ParseCommandLine: when argv asks
// for help (before a "--"), prints it on stdout as absl would and exits 0.
void ExitZeroAfterHelp(int argc, char** argv);

// A flag's source file as --help names it: the path inside the project
// ("server/main.cc"), never the folder it was built in.
std::string FlagFileName(absl::string_view file);

// Whether the flag `name` was given at start, in any form (--name,
// --name=VALUE, --noname), on the command line or in a file a --flagfile
// names: what tells an explicit default (--auth=false) from no flag at all.
// A scan of argv would miss the flag file, which is where a service's flags
// are (deploy/debian/fca-server.flags). Call after absl::ParseCommandLine.
bool FlagSpecified(absl::string_view name);

}  // namespace fca

#endif  // FCA_COMMON_FLAGS_USAGE_H_
