#include "server/jobs/server_metrics.h"

#include <glog/logging.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/jobs/worker_pool.h"
#include "server/runtime/forward_metrics.h"

namespace fca::jobs {
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
metrics::Counter& Submitted() {
  static auto& c =
      R().AddCounter("fca_jobs_submitted_total", "Jobs accepted by SubmitAudit.").WithLabels();
  return c;
}
metrics::Counter& Started() {
  static auto& c = R().AddCounter("fca_jobs_started_total",
                                  "Jobs that started running (their first task claimed).")
                       .WithLabels();
  return c;
}
metrics::Family<metrics::Counter>& Ended() {
  static auto& f =
      R().AddCounter("fca_jobs_ended_total", "Jobs that ended, by end state.", {"state"});
  return f;
}
metrics::Counter& Lost() {
  static auto& c = R().AddCounter("fca_tasks_lost_total",
                                  "Tasks whose worker stopped renewing its lease (queued again, "
                                  "or failed when out of attempts).")
                       .WithLabels();
  return c;
}
metrics::Gauge& FilesystemAvail() {
  static auto& g = R().AddGauge("fca_store_filesystem_avail_bytes",
                                "Bytes available to the server on the file system of its "
                                "database (statvfs f_bavail).")
                       .WithLabels();
  return g;
}
metrics::Gauge& FilesystemSize() {
  static auto& g = R().AddGauge("fca_store_filesystem_size_bytes",
                                "Size of the file system of the server's database.")
                       .WithLabels();
  return g;
}
metrics::Family<metrics::Gauge>& Progress() {
  static auto& f = R().AddGauge(
      "fca_job_progress",
      "Fraction done of each running job, in [0, 1], as its tasks last reported; the series "
      "goes when the job ends.",
      {"job_id"});
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

namespace {

double SecondsBetween(int64_t from_us, int64_t to_us) {
  return std::max<int64_t>(0, to_us - from_us) / 1e6;
}

// The file system holding the database (its folder): what a full disk
// alert watches. Not for ":memory:" stores.
void SetFilesystemGauges(const std::string& db_path) {
  if (db_path.empty() || db_path == ":memory:") return;
  const std::string::size_type slash = db_path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : db_path.substr(0, slash + 1);
  struct statvfs fs {};
  if (statvfs(folder.c_str(), &fs) != 0) {
    ScrapeErrors().WithLabels({"filesystem"}).Increment();
    return;
  }
  FilesystemAvail().Set(static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize));
  FilesystemSize().Set(static_cast<double>(fs.f_blocks) * static_cast<double>(fs.f_frsize));
}

}  // namespace

void JobSubmitted(const storage::JobRecord& job) {
  Submitted().Increment();
  LOG(INFO) << absl::StrFormat("job %d: submitted by %s", job.id, job.owner);
}

void JobStarted(const storage::JobRecord& job) {
  Started().Increment();
  LOG(INFO) << absl::StrFormat("job %d: started (user %s, queued %.3f s, attempt %d)", job.id,
                               job.owner, SecondsBetween(job.created_at_us, job.started_at_us),
                               job.attempts);
}

void TaskEnded(const storage::TaskRecord& task, const std::string& owner) {
  std::string line = absl::StrFormat(
      "job %d: task %d (model %s, user %s, worker %s, attempt %d) ended %s after %.3f s",
      task.job_id, task.id, task.model, owner, task.worker.empty() ? "-" : task.worker,
      task.attempts, storage::JobStateName(task.state),
      task.started_at_us > 0 && task.finished_at_us > 0
          ? SecondsBetween(task.started_at_us, task.finished_at_us)
          : 0.0);
  if (!task.error.empty()) absl::StrAppend(&line, ": ", task.error);
  LOG(INFO) << line;
}

void JobEnded(const storage::JobRecord& job) {
  const std::string state = Lower(storage::JobStateName(job.state));
  Ended().WithLabels({state}).Increment();
  const bool ran = job.started_at_us > 0;
  std::string line = absl::StrFormat("job %d: ended %s (user %s", job.id,
                                     storage::JobStateName(job.state), job.owner);
  if (ran) {
    const double queued = SecondsBetween(job.created_at_us, job.started_at_us);
    QueueWait().WithLabels({state}).Observe(queued);
    absl::StrAppendFormat(&line, ", queued %.3f s", queued);
    if (job.finished_at_us > 0) {
      const double run = SecondsBetween(job.started_at_us, job.finished_at_us);
      RunTime().WithLabels({state}).Observe(run);
      absl::StrAppendFormat(&line, ", ran %.3f s", run);
    }
  } else {
    absl::StrAppend(&line, ", never started");
  }
  absl::StrAppend(&line, ")");
  if (!job.error.empty()) absl::StrAppend(&line, ": ", job.error);
  LOG(INFO) << line;
}

void TaskLost(const storage::TaskRecord& task) {
  Lost().Increment();
  LOG(WARNING) << absl::StrFormat(
      "job %d: task %d (model %s) lost: worker %s stopped renewing its lease (attempt %d)%s",
      task.job_id, task.id, task.model, task.worker.empty() ? "?" : task.worker, task.attempts,
      task.state == storage::JobState::kFailed ? "; out of attempts, it failed" : "");
}

void SetJobProgress(int64_t job_id, double fraction) {
  Progress().WithLabels({absl::StrCat(job_id)}).Set(fraction);
}

void ForgetJobProgress(int64_t job_id) { Progress().Remove({absl::StrCat(job_id)}); }

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
  runtime::RegisterForwardMetrics();
  QueueWait();
  RunTime();
  ScrapeErrors();
  Submitted();
  Started();
  for (storage::JobState s : kStates) {
    if (storage::IsTerminal(s)) Ended().WithLabels({Lower(storage::JobStateName(s))});
  }
  Progress();
  Lost();
  FilesystemAvail();
  FilesystemSize();
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
    SetFilesystemGauges(store->path());
    const size_t total = workers == nullptr ? 0 : workers->size();
    const size_t busy = workers == nullptr ? 0 : workers->Busy();
    Workers().WithLabels({"busy"}).Set(static_cast<double>(busy));
    Workers().WithLabels({"idle"}).Set(static_cast<double>(total - busy));
  });
}

}  // namespace fca::jobs
