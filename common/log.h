// Errors with no caller to return them to (background loops, best-effort
// bookkeeping beside a result that is already decided) are logged, never
// dropped.
#ifndef FCA_COMMON_LOG_H_
#define FCA_COMMON_LOG_H_

#include <string_view>

#include "absl/status/status.h"

namespace fca {

// Writes "<program>: <what>: <status>" to stderr when `status` is not OK.
void LogIfError(std::string_view what, const absl::Status& status);

}  // namespace fca

#endif  // FCA_COMMON_LOG_H_
