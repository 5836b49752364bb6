#include "common/flags_usage.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/build_version.h"

namespace fca {

absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("--%s=%d is out of range: it must be in [%d, %d]", flag, value, min, max));
}

bool IsDeviceName(absl::string_view device) {
  if (device == "cpu" || device == "cuda") return true;
  absl::string_view index = device;
  return absl::ConsumePrefix(&index, "cuda:") && !index.empty() && index.size() <= 4 &&
         std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
}

absl::Status CheckDeviceFlag(absl::string_view flag, absl::string_view device) {
  if (IsDeviceName(device)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("--%s='%s' is not cpu, cuda or cuda:N", flag, device.substr(0, 64)));
}

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", BuildVersion(), "\n");
}

void ConfigureFlagsUsage(absl::string_view program,
                         std::function<bool(absl::string_view)> help_files) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = std::move(help_files);
  config.contains_helpshort_flags = config.contains_help_flags;
  config.contains_helppackage_flags = config.contains_help_flags;
  config.version_string = [text = VersionText(program)] { return text; };
  config.normalize_filename = FlagFileName;
  absl::SetFlagsUsageConfig(config);
}

std::string FlagFileName(absl::string_view file) {
  // This file's own path, as the compiler was given it, ends in
  // common/flags_usage.cc: what precedes that is where the project lies,
  // and every other source file was compiled from the same place.
  absl::string_view root = __FILE__;
  if (absl::ConsumeSuffix(&root, "common/flags_usage.cc")) absl::ConsumePrefix(&file, root);
  // A path relative to the build folder ("../server/main.cc", when ccache
  // rewrites absolute paths) or absolute outside the project: its leading
  // "../", "./" and "/".
  while (absl::ConsumePrefix(&file, "../") || absl::ConsumePrefix(&file, "./") ||
         absl::ConsumePrefix(&file, "/")) {
  }
  return std::string(file);
}

void ExitZeroAfterHelp(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (!absl::StartsWith(arg, "help")) continue;
    const size_t equals = arg.find('=');
    const absl::string_view value =
        equals == absl::string_view::npos ? absl::string_view() : arg.substr(equals + 1);
    asked = absl::flags_internal::DeduceUsageFlags(arg.substr(0, equals), value) || asked;
  }
  if (!asked) return;
  // What absl::ParseCommandLine would have set: the help's first line names
  // the program.
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::flags_internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage());
  std::cout.flush();
  std::exit(0);
}

bool FlagSpecified(absl::string_view name) {
  // absl (20220623, Debian 12's) has no public call for this: a flag's
  // value cannot tell --auth=false from the default false, and gflags'
  // GetCommandLineFlagInfo().is_default is not absl's. ParseCommandLine
  // records every flag it sets, from flag files too, for this function.
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

}  // namespace fca
