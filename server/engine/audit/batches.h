// Runs the batches of one audit pass on several threads. Torch-free header.
//
// The batches of a pass are independent (each reads its windows and its
// coefficients and writes its own rows of the results), so the auditor runs
// as many at once as it has threads, each forward on one core
// (engine::Parallelism::kAcrossBatches says why).
#ifndef FCA_SERVER_ENGINE_AUDIT_BATCHES_H_
#define FCA_SERVER_ENGINE_AUDIT_BATCHES_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace fca::engine {

// Splits windows [first, n) into batches of `batch` windows and runs
// `fn(begin, end)` on each, on up to `threads` threads, the calling thread
// included. After each batch the calling thread finishes it calls
// `after(windows)` with the windows finished so far by all threads, the
// `first` ones before included (so
// progress and cancellation are handled on the calling thread), and once
// more at the end if that number changed. `fn` must be safe to run
// concurrently with itself. Stops at the first error of `fn` or `after`
// (batches already started finish) and returns it; an exception thrown by
// `fn` becomes INTERNAL.
[[nodiscard]] absl::Status RunBatches(
    int64_t first, int64_t n, int64_t batch, int threads,
    const std::function<absl::Status(int64_t begin, int64_t end)>& fn,
    const std::function<absl::Status(int64_t windows_done)>& after);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_BATCHES_H_
