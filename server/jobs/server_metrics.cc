#include "server/jobs/server_metrics.h"

#include <algorithm>
#include <cctype>

#include "server/jobs/worker_pool.h"
#include "server/worker/forward_metrics.h"

namespace fca::core {
namespace {

metrics::Registry& R() { return metrics::Registry::Default(); }

std::string Lower(const char* name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr storage::JobState kStates[] = {storage::JobState::kQueued, storage::JobState::kRunning,
                                         storage::JobState::kSucceeded, storage::JobState::kFailed,
                                         storage::JobState::kCancelled};

metrics::Family<metrics::Gauge>& Jobs() {
  static auto& f = R().AddGauge("fca_jobs", "Jobs in the store by state.", {"state"});
  return f;
}
metrics::Family<metrics::Histogram>& QueueWait() {
  static auto& f = R().AddHistogram(
      "fca_job_queue_wait_seconds",
      "Time from a job's submission to its (latest) start, observed when it ends, by its end "
      "state; jobs cancelled before they started are not observed.",
      {"state"}, metrics::DurationBuckets());
  return f;
}
metrics::Family<metrics::Histogram>& RunTime() {
  static auto& f = R().AddHistogram(
      "fca_job_run_seconds", "Time from a job's (latest) start to its end, by its end state.",
      {"state"}, metrics::DurationBuckets());
  return f;
}
metrics::Counter& CacheHits() {
  static auto& c = R().AddCounter("fca_coeff_cache_hits_total",
                                  "Coefficient-cache lookups (one window each) that found "
                                  "an entry.")
                       .WithLabels();
  return c;
}
metrics::Counter& CacheMisses() {
  static auto& c = R().AddCounter("fca_coeff_cache_misses_total",
                                  "Coefficient-cache lookups (one window each) that found "
                                  "nothing (or failed).")
                       .WithLabels();
  return c;
}
metrics::Counter& CacheReadBytes() {
  static auto& c = R().AddCounter("fca_coeff_cache_read_bytes_total",
                                  "Bytes of coefficients read from the cache.")
                       .WithLabels();
  return c;
}
metrics::Counter& CacheWrittenBytes() {
  static auto& c = R().AddCounter("fca_coeff_cache_written_bytes_total",
                                  "Bytes of coefficients written to the cache.")
                       .WithLabels();
  return c;
}
metrics::Gauge& CacheBytes() {
  static auto& g =
      R().AddGauge("fca_coeff_cache_bytes", "Bytes the coefficient cache holds against its budget.")
          .WithLabels();
  return g;
}
metrics::Family<metrics::Gauge>& Workers() {
  static auto& f = R().AddGauge(
      "fca_workers", "This server's own workers, busy (running a task) or idle.", {"state"});
  return f;
}
metrics::Family<metrics::Counter>& ScrapeErrors() {
  static auto& f = R().AddCounter("fca_scrape_errors_total",
                                  "Reads of the store that failed while /metrics was scraped "
                                  "(the gauge keeps its previous value).",
                                  {"source"});
  return f;
}

}  // namespace

void ObserveJobEnd(const storage::JobRecord& job) {
  if (job.started_at_us <= 0) return;  // never ran
  const std::string state = Lower(storage::JobStateName(job.state));
  QueueWait().WithLabels({state}).Observe(
      std::max<int64_t>(0, job.started_at_us - job.created_at_us) / 1e6);
  if (job.finished_at_us > 0) {
    RunTime().WithLabels({state}).Observe(
        std::max<int64_t>(0, job.finished_at_us - job.started_at_us) / 1e6);
  }
}

void ObserveCacheLookup(bool hit, int64_t bytes) {
  if (hit) {
    CacheHits().Increment();
    CacheReadBytes().Increment(static_cast<double>(bytes));
  } else {
    CacheMisses().Increment();
  }
}

void ObserveCacheWrite(int64_t bytes) { CacheWrittenBytes().Increment(static_cast<double>(bytes)); }

ServerGauges::ServerGauges(storage::Store* store, const WorkerPool* workers) {
  // Every family exists (with its series at 0) before the first scrape.
  for (storage::JobState s : kStates) Jobs().WithLabels({Lower(storage::JobStateName(s))});
  CacheHits();
  CacheMisses();
  CacheReadBytes();
  CacheWrittenBytes();
  CacheBytes();
  for (const char* state : {"busy", "idle"}) Workers().WithLabels({state});
  RegisterForwardMetrics();
  QueueWait();
  RunTime();
  ScrapeErrors();
  handle_ = metrics::Registry::Default().AddCollector([store, workers] {
    for (storage::JobState s : kStates) {
      absl::StatusOr<int64_t> n = store->CountJobs(std::nullopt, {s});
      if (n.ok()) {
        Jobs().WithLabels({Lower(storage::JobStateName(s))}).Set(static_cast<double>(*n));
      } else {
        ScrapeErrors().WithLabels({"jobs"}).Increment();
      }
    }
    absl::StatusOr<int64_t> bytes = store->CoefficientCacheBytes();
    if (bytes.ok()) {
      CacheBytes().Set(static_cast<double>(*bytes));
    } else {
      ScrapeErrors().WithLabels({"coeff_cache"}).Increment();
    }
    const size_t total = workers == nullptr ? 0 : workers->size();
    const size_t busy = workers == nullptr ? 0 : workers->Busy();
    Workers().WithLabels({"busy"}).Set(static_cast<double>(busy));
    Workers().WithLabels({"idle"}).Set(static_cast<double>(total - busy));
  });
}

}  // namespace fca::core
