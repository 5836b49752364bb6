// The server's metrics (common/metrics.h, in the process's default
// registry), as GET /metrics exposes them:
//
//   fca_jobs{state}                              gauge, at scrape (Store::CountJobs)
//   fca_job_queue_wait_seconds{state}            histogram: created -> started, of
//                                                jobs that ran, observed when they end
//   fca_job_run_seconds{state}                   histogram: started -> finished
//   fca_jobs_submitted_total, fca_jobs_started_total, fca_jobs_ended_total{state}
//                                                counters of the job lifecycle (below)
//   fca_job_progress{job_id}                     gauge: a running job's fraction done,
//                                                [0, 1]; the series goes when it ends
//   fca_tasks_lost_total                         tasks whose worker stopped renewing
//                                                its lease (a worker lost)
//   fca_store_filesystem_avail_bytes, _size_bytes  gauges, at scrape: the file system
//                                                of the database (statvfs)
//   fca_forward_tokens_total{model}              tokens through model forwards of
//                                                this server's own workers
//   fca_forward_seconds_total{model}             seconds inside those forwards
//   fca_forward_tokens_per_second{model}         histogram, one per audited model
//                                                (these three: server/runtime/forward_metrics.h)
//   fca_coeff_cache_hits_total, _misses_total    coefficient-cache lookups (per window)
//   fca_coeff_cache_read_bytes_total, fca_coeff_cache_written_bytes_total
//   fca_coeff_cache_bytes                        gauge, at scrape (Store::CoefficientCacheBytes)
//   fca_workers{state="busy"|"idle"}             this server's own workers, at scrape
//   fca_scrape_errors_total{source}              store reads that failed at scrape
//
// (RPC and HTTP request metrics are the gRPC and HTTP layers':
// server/grpc/audit_service_impl.h, server/http/gateway.h.)
#ifndef FCA_SERVER_JOBS_SERVER_METRICS_H_
#define FCA_SERVER_JOBS_SERVER_METRICS_H_

#include <string>

#include "common/metrics.h"
#include "storage/records.h"
#include "storage/store.h"

namespace fca::jobs {

class WorkerPool;

// A job's life: each logs one glog INFO line (ids, user, durations,
// outcome) and counts it. Submitted (QUEUED), started (its first claim),
// one task (model) ended, the job ended (also its queue wait and run time).
void JobSubmitted(const storage::JobRecord& job);
void JobStarted(const storage::JobRecord& job);
void TaskEnded(const storage::TaskRecord& task, const std::string& owner);
void JobEnded(const storage::JobRecord& job);
// A task's lease ran out (its worker died or lost the network): logged and
// counted; it is queued again or, out of attempts, failed.
void TaskLost(const storage::TaskRecord& task);

// fca_job_progress{job_id}: set while the job runs, removed when it ends. The
// caller orders the two (the coordinator holds its lock for both).
void SetJobProgress(int64_t job_id, double fraction);
void ForgetJobProgress(int64_t job_id);
// A coefficient-cache lookup of one window and what it read.
void ObserveCacheLookup(bool hit, int64_t bytes);
void ObserveCacheWrite(int64_t bytes);

// Sets the scrape-time gauges (jobs by state, cache size, busy and idle
// workers) at every exposition of the default registry while it lives.
// `workers` may be null (no workers of its own).
class ServerGauges {
 public:
  ServerGauges(storage::Store* store, const WorkerPool* workers);

 private:
  metrics::Registry::CollectorHandle handle_;
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_SERVER_METRICS_H_
