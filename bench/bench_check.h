// What the storage benches (fca_storage_bench, fca_backup_bench,
// fca_listing_bench) share: a failed step ends the bench with its status
// (a bench has no caller to hand an error to), and wall-clock seconds.
#ifndef FCA_BENCH_BENCH_CHECK_H_
#define FCA_BENCH_BENCH_CHECK_H_

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/stopwatch.h"

namespace fca::bench {

using Clock = std::chrono::steady_clock;

using fca::SecondsSince;

[[noreturn]] inline void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

inline void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) Die(status, what);
}

template <typename T>
T Check(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) Die(value.status(), what);
  return *std::move(value);
}

}  // namespace fca::bench

#endif  // FCA_BENCH_BENCH_CHECK_H_
