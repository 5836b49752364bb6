// Progress rendering for `fca watch` (format_progress.cc): a redrawable bar
// for terminals and a plain line for logs.
//
// Like format.h, nothing here does I/O or reads a clock: the terminal width
// and the elapsed time are arguments, so the output is unit-tested byte for
// byte.
#ifndef FCA_CLIENT_FORMAT_PROGRESS_H_
#define FCA_CLIENT_FORMAT_PROGRESS_H_

#include <string>

#include "absl/time/time.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

// "42s", "3m05s", "1h02m"; negative durations print as "0s".
std::string HumanDuration(absl::Duration duration);
// The server's eta_seconds when known; otherwise extrapolated from the
// elapsed time once at least 1% is done; otherwise "--".
std::string FormatEta(const fca::v1::Progress& progress, absl::Duration elapsed);
// One TTY line of at most `width - 1` columns (the last column is left free
// so terminals never wrap): "<phase> <i>/<n> <model> [####....] 45.2% ETA
// 3m05s". The label is shortened, then the bar dropped, when space is short.
std::string RenderProgressBar(const fca::v1::Progress& progress, int width, absl::Duration elapsed);
// A plain log line for pipes and files:
// "[ 45%] replay:cross_input model 1/7 fg-s1 windows 12/40 elapsed 1m02s
// ETA 3m05s".
std::string RenderProgressLine(const fca::v1::Progress& progress, absl::Duration elapsed);

}  // namespace fca::client

#endif  // FCA_CLIENT_FORMAT_PROGRESS_H_
