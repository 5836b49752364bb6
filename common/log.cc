#include "common/log.h"

#include <errno.h>  // program_invocation_short_name (GNU)

#include <cstdio>
#include <string>

namespace fca {

void LogIfError(std::string_view what, const absl::Status& status) {
  if (status.ok()) return;
  // One fprintf per line, so lines of concurrent threads do not interleave.
  const std::string text = status.ToString();
  std::fprintf(stderr, "%s: %.*s: %s\n", program_invocation_short_name,
               static_cast<int>(what.size()), what.data(), text.c_str());
}

}  // namespace fca
