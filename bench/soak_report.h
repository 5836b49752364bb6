// fca_soak_bench: what a soak found (per-RPC outcomes, the jobs, the server
// process, the database) and its two forms: the text report on stdout and
// the JSON file.
#ifndef FCA_BENCH_SOAK_REPORT_H_
#define FCA_BENCH_SOAK_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/soak_gateway.h"
#include "bench/soak_process.h"
#include "bench/soak_stats.h"
#include "common/json.h"

namespace fca::soak {

// --projects (issue 23): what the probes got, and each project's listing
// against the ledger of what the clients were told was stored.
struct ProjectFigures {
  int users = 0;
  // kind ("stranger GetJob", "reader SubmitAudit", ...) -> status code -> calls
  std::map<std::string, std::map<std::string, int64_t>> probes;
  // A stranger's call or a listing that showed another project's job or
  // dataset; a reader's write answered OK. Both must be 0.
  int64_t cross_project_ok = 0, reader_writes_ok = 0;
  bool ledger_ok = false;  // every listing could be read
  int64_t ledger_jobs = 0, lost_jobs = 0, duplicated_jobs = 0, misplaced_jobs = 0;
  int64_t ledger_datasets = 0, lost_datasets = 0, duplicated_datasets = 0, misplaced_datasets = 0;
};
// What in `p` is a problem, appended to `problems`.
void JudgeProjects(const ProjectFigures& p, std::vector<std::string>* problems);

struct Figures {
  int clients = 0, duration_s = 0;
  double load_s = 0, setup_s = 0, idle_audit_s = 0;
  std::string address, work_dir, server_binary;
  int64_t server_pid = 0;
  std::vector<OpSummary> ops;
  std::vector<Bucket> buckets;
  std::vector<ResourceSample> resources;
  // jobs
  int64_t submitted = 0, cancels_accepted = 0, watched_to_end = 0;
  std::map<std::string, int64_t> jobs_by_state;  // ListJobs sweep after the load
  std::vector<std::string> failed_job_errors;
  bool sweep_ok = false;
  // server
  ProcStatus at_start, at_end;
  int64_t fds_start = -1, fds_end = -1, fds_peak = -1;
  int64_t rss_peak_kb = 0, threads_peak = 0, hwm_kb = 0;
  bool crashed = false;  // ended before the SIGTERM
  std::string crash;
  bool sigterm_clean = false, killed_after_sigterm = false, serving_after_load = false;
  std::string exit_description;
  double shutdown_s = 0;
  int64_t server_log_lines = 0;
  std::vector<std::string> server_log_tail;
  // database
  std::string integrity, foreign_keys, table_rows;
  bool integrity_ok = false;
  int64_t db_bytes = 0, wal_bytes = 0;
  bool projects = false;
  ProjectFigures project_figures;
  // the HTTP gateway under slow and cross-site clients (soak_gateway.h)
  GatewayFigures gateway;
  std::vector<std::string> problems;
};

// Kilobytes in MiB, for printing.
double Mb(int64_t kb);

// The text report, verdict last.
void PrintFigures(const Figures& f);
// The same figures, the per-sample resources included, as JSON.
json::Value FiguresJson(const Figures& f);

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_REPORT_H_
