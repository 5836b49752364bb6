#include "common/flags_usage.h"

#include <algorithm>
#include <utility>

#include "absl/flags/internal/parse.h"
#include "absl/flags/usage_config.h"
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
  absl::SetFlagsUsageConfig(config);
}

bool FlagSpecified(absl::string_view name) {
  // absl (20220623, Debian 12's) has no public call for this: a flag's
  // value cannot tell --auth=false from the default false, and gflags'
  // GetCommandLineFlagInfo().is_default is not absl's. ParseCommandLine
  // records every flag it sets, from flag files too, for this function.
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

}  // namespace fca
