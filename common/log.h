// Diagnostics of the server side (fca-server, fca-worker and the tools, and
// the libraries under them) go through glog: LOG(INFO), LOG(WARNING),
// LOG(ERROR), each line prefixed with severity, time, thread id and source
// file:line. They go to stderr (InitServerLogging), where systemd's journal,
// `docker logs` and `kubectl logs` read them. What a program prints as its
// result (a --help text, a created API key, the "listening on" lines that
// scripts read, a CLI's answer) stays on stdout/stderr as plain text.
//
// Errors with no caller to return them to (background loops, best-effort
// bookkeeping beside a result that is already decided) are logged, never
// dropped: LogIfError.
#ifndef FCA_COMMON_LOG_H_
#define FCA_COMMON_LOG_H_

#include <string_view>

#include "absl/status/status.h"

namespace fca {

// Logs "<what>: <status>" as a WARNING when `status` is not OK, under the
// caller's file and line (the defaults are evaluated at the call site).
void LogIfError(std::string_view what, const absl::Status& status,
                const char* file = __builtin_FILE(), int line = __builtin_LINE());

// Logs `text` as an ERROR under the caller's file and line: the way a
// torch translation unit logs, since it must not include glog. A libtorch
// 2.x built without glog defines LOG and CHECK of its own
// (c10/util/Logging.h), and a unit with both would log through whichever
// header came last.
void LogError(std::string_view text, const char* file = __builtin_FILE(),
              int line = __builtin_LINE());

// Sets glog up for a server-side binary: every severity to stderr and no
// log files (a service's files would need rotating; its stderr is already
// collected). Call first thing in main, before any thread starts.
void InitServerLogging(const char* argv0);

}  // namespace fca

#endif  // FCA_COMMON_LOG_H_
