// Whole-file reads, with errors that say which file, what it was for and why.
#ifndef FCA_COMMON_FILE_H_
#define FCA_COMMON_FILE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fca {

// The bytes of the file at `path`. `what` names it in errors ("the API key
// file", "manifest"): "cannot read <what> '<path>': <reason>". NOT_FOUND when
// it does not exist, PERMISSION_DENIED when it may not be read,
// INVALID_ARGUMENT for a directory or other non-regular file, and for a file
// over `max_bytes` (checked before reading: a user-named file can be
// anything), INTERNAL for a failed read.
[[nodiscard]] absl::StatusOr<std::string> ReadFile(
    const std::string& path, std::string_view what = "file",
    uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

// The bytes of the file at `path`, or "" when it cannot be read: for tests
// and benchmarks reading output that may not exist yet (a child's log).
std::string ReadFileOrEmpty(const std::string& path);

// "<what>: <the system's reason for err>" with err's status code: NOT_FOUND
// for a path that does not exist (ENOENT, ENOTDIR), PERMISSION_DENIED for one
// that may not be used (EACCES, EPERM), INTERNAL otherwise.
[[nodiscard]] absl::Status ErrnoStatus(int err, std::string_view what);

// `status` with every occurrence of `path` in its message replaced by the
// file's base name (same code): for errors that reach clients, which are
// not told the server's paths.
[[nodiscard]] absl::Status WithBaseName(const absl::Status& status, const std::string& path);

}  // namespace fca

#endif  // FCA_COMMON_FILE_H_
