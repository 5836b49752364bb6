// Retention (docs/operator-guide.md "Retention"): finished jobs (with their
// results and events) and unused datasets are purged once their project's
// keep runs out, and coefficient cache entries once unused for the cache's
// maximum age; in the background, one row per transaction (each delete
// gives its pages back: the store runs with auto_vacuum = INCREMENTAL),
// never a job still queued or running, never a dataset that one of them
// names.
#ifndef FCA_SERVER_CORE_RETENTION_H_
#define FCA_SERVER_CORE_RETENTION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/audit_log.h"
#include "storage/store.h"

namespace fca::core {

// Largest days a rule or flag takes (100 years); -1 in SetRetention means
// "the server's default".
inline constexpr int kMaxRetentionDays = 36500;

struct RetentionOptions {
  storage::RetentionDays defaults;              // --keep_jobs_days, --keep_unused_datasets_days
  int coeff_cache_max_age_days = 0;             // 0: the cache evicts by size only
  absl::Duration interval = absl::Minutes(10);  // between background passes
  int batch = 100;                              // rows looked up per query
  // Clock of the cache's age cutoff (the store stamps uses with its own:
  // give both the same one); unset: the wall clock.
  std::function<int64_t()> now_us;
  // Where each pass that purged something is recorded (retention.purge);
  // nullptr: nowhere.
  AuditLog* audit_log = nullptr;
};

struct PurgeCounts {
  int64_t jobs = 0;
  int64_t datasets = 0;
  int64_t datasets_in_use = 0;  // expired but named by a queued or running job: kept
  int64_t cache_entries = 0;
};

class Retention {
 public:
  Retention(storage::Store* store, RetentionOptions options);
  ~Retention();  // Stop()
  Retention(const Retention&) = delete;
  Retention& operator=(const Retention&) = delete;

  // Purges now and then every interval on a thread of its own, until Stop().
  void Start();
  void Stop();
  // One pass: everything expired now. Rows deleted meanwhile by a user or
  // used again are skipped.
  [[nodiscard]] absl::StatusOr<PurgeCounts> PurgeOnce();

 private:
  [[nodiscard]] absl::Status PurgeJobs(PurgeCounts* counts);
  [[nodiscard]] absl::Status PurgeDatasets(PurgeCounts* counts);
  [[nodiscard]] absl::Status PurgeCache(PurgeCounts* counts);
  int64_t NowUs() const;

  storage::Store* store_;
  const RetentionOptions options_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A project's retention as in force: its rule, `defaults` where it has none.
[[nodiscard]] absl::StatusOr<v1::Retention> DescribeRetention(
    storage::Store* store, const storage::RetentionDays& defaults, const std::string& project);

// Applies SetRetention's days to `rule`: unset leaves it, -1 resets it to
// the default, 0..kMaxRetentionDays sets it; INVALID_ARGUMENT otherwise.
[[nodiscard]] absl::Status ApplyRetentionRequest(const v1::SetRetentionRequest& request,
                                                 storage::RetentionRule* rule);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_RETENTION_H_
