#include "bench/soak_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fca::soak {
namespace {

std::string Codes(const std::map<std::string, int64_t>& m) {
  if (m.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [code, n] : m) parts.push_back(absl::StrCat(code, " ", n));
  return absl::StrJoin(parts, ", ");
}

std::string Lat(const Latency& l) {
  if (l.n == 0) return "-";
  return absl::StrFormat("%.1f / %.1f / %.1f", l.p50, l.p99, l.max);
}

void PrintHeader(const Figures& f) {
  std::printf("\n== fca_soak_bench: %d clients, %.0f s of load against %s (pid %lld), %s\n",
              f.clients, f.load_s, f.address.c_str(), static_cast<long long>(f.server_pid),
              f.server_binary.c_str());
  std::printf(
      "   setup %.1f s; one small audit (2 models + twin, 8+8 windows of 16) alone: "
      "%.2f s\n\n",
      f.setup_s, f.idle_audit_s);
}

// One row per RPC, a total, then the first few messages of each error.
void PrintRpcs(const Figures& f) {
  std::printf("%-18s %8s %8s  %-40s %-28s %9s  %-26s %-26s\n", "RPC", "calls", "ok",
              "expected refusals", "errors", "drop/cut", "latency ms p50/p99/max",
              "first msg ms p50/p99/max");
  int64_t calls = 0, errors = 0;
  for (const OpSummary& o : f.ops) {
    calls += o.calls;
    errors += o.errors;
    std::printf("%-18s %8lld %8lld  %-40s %-28s %4lld/%-4lld  %-26s %-26s\n", o.name.c_str(),
                static_cast<long long>(o.calls), static_cast<long long>(o.ok),
                Codes(o.expected_by_code).c_str(), Codes(o.errors_by_code).c_str(),
                static_cast<long long>(o.dropped), static_cast<long long>(o.cut),
                Lat(o.total).c_str(), o.stream ? Lat(o.first).c_str() : "");
  }
  std::printf("%-18s %8lld  (%.1f calls/s), errors %lld\n", "all", static_cast<long long>(calls),
              calls / std::max(1.0, f.load_s), static_cast<long long>(errors));
  for (const OpSummary& o : f.ops) {
    for (const auto& [code, list] : o.error_messages) {
      for (const std::string& m : list) {
        std::printf("   error %s %s: %s\n", o.name.c_str(), code.c_str(), m.c_str());
      }
    }
  }
}

void PrintJobs(const Figures& f) {
  std::printf("\njobs: %lld submitted (accepted); after the load the server lists %s%s\n",
              static_cast<long long>(f.submitted), Codes(f.jobs_by_state).c_str(),
              f.sweep_ok ? "" : " (ListJobs sweep failed)");
  std::printf("      %lld cancels accepted, %lld watches followed a job to its terminal event\n",
              static_cast<long long>(f.cancels_accepted), static_cast<long long>(f.watched_to_end));
  for (const std::string& e : f.failed_job_errors) std::printf("      FAILED: %s\n", e.c_str());
}

// --projects: the probes by kind and code, then the ledger check.
void PrintProjects(const Figures& f) {
  if (!f.projects) return;
  const ProjectFigures& p = f.project_figures;
  std::printf(
      "\nprojects: %d users in lab, alpha, beta (each a writer in one, a reader of another, "
      "no member of the third)\n",
      p.users);
  for (const auto& [kind, codes] : p.probes) {
    std::printf("   %-24s %s\n", kind.c_str(), Codes(codes).c_str());
  }
  std::printf("   cross-project reads answered: %lld; reader writes accepted: %lld\n",
              static_cast<long long>(p.cross_project_ok),
              static_cast<long long>(p.reader_writes_ok));
  std::printf(
      "   ledger%s: %lld jobs told stored, %lld lost, %lld duplicated, %lld misplaced; "
      "%lld datasets, %lld lost, %lld duplicated, %lld misplaced\n",
      p.ledger_ok ? "" : " (a listing failed)", static_cast<long long>(p.ledger_jobs),
      static_cast<long long>(p.lost_jobs), static_cast<long long>(p.duplicated_jobs),
      static_cast<long long>(p.misplaced_jobs), static_cast<long long>(p.ledger_datasets),
      static_cast<long long>(p.lost_datasets), static_cast<long long>(p.duplicated_datasets),
      static_cast<long long>(p.misplaced_datasets));
}

// The server process: resources, liveness and its shutdown.
void PrintServer(const Figures& f) {
  std::printf("\nserver: RSS start %.1f MB, end %.1f MB, peak %.1f MB (sampled; VmHWM %.1f MB)\n",
              Mb(f.at_start.vm_rss_kb), Mb(f.at_end.vm_rss_kb), Mb(f.rss_peak_kb), Mb(f.hwm_kb));
  std::printf(
      "        threads start %lld, peak %lld, end %lld; open fds start %lld, peak %lld, "
      "end %lld\n",
      static_cast<long long>(f.at_start.threads), static_cast<long long>(f.threads_peak),
      static_cast<long long>(f.at_end.threads), static_cast<long long>(f.fds_start),
      static_cast<long long>(f.fds_peak), static_cast<long long>(f.fds_end));
  std::printf("        still serving after the load: %s; crashed during the soak: %s%s\n",
              f.serving_after_load ? "yes" : "NO", f.crashed ? "YES, " : "no", f.crash.c_str());
  std::printf("        SIGTERM: %s (%s after %.1f s%s)\n",
              f.sigterm_clean ? "exited cleanly" : "NOT CLEAN", f.exit_description.c_str(),
              f.shutdown_s, f.killed_after_sigterm ? ", then SIGKILLed" : "");
}

void PrintDatabase(const Figures& f) {
  std::printf(
      "sqlite: PRAGMA integrity_check: %s; foreign_key_check: %s; %.1f MB (+ %.1f MB "
      "wal)\n        rows: %s\n",
      f.integrity.c_str(), f.foreign_keys.empty() ? "clean" : f.foreign_keys.c_str(),
      f.db_bytes / 1048576.0, f.wal_bytes / 1048576.0, f.table_rows.c_str());
}

void PrintServerLog(const Figures& f) {
  std::printf("server log: %lld lines%s\n", static_cast<long long>(f.server_log_lines),
              f.server_log_tail.empty() ? "" : "; last ones:");
  for (const std::string& line : f.server_log_tail) std::printf("   | %s\n", line.c_str());
}

// Calls, errors and resources per time bucket.
void PrintTimeline(const Figures& f) {
  std::printf("\nover time:\n%-13s %8s %7s  %-24s %9s %8s %6s\n", "seconds", "calls", "errors",
              "unary ok ms p50/p99/max", "RSS MB", "threads", "fds");
  for (const Bucket& b : f.buckets) {
    std::printf("%5.0f - %-5.0f %8lld %7lld  %-24s %9.1f %8lld %6lld\n", b.t0_s, b.t1_s,
                static_cast<long long>(b.calls), static_cast<long long>(b.errors),
                Lat(b.unary_ok).c_str(), Mb(b.rss_max_kb), static_cast<long long>(b.threads_max),
                static_cast<long long>(b.fds_max));
  }
}

// Each RPC's median latency per time bucket: a slow drift shows here.
void PrintLatencyOverTime(const Figures& f) {
  static const char* kShort[kNumOps] = {"Models", "Tokenize", "Upload", "ListDs", "Submit", "Watch",
                                        "GetJob", "ListJobs", "Cancel", "Query",  "Export"};
  std::printf("\np50 latency ms per RPC over time (Watch: whole streams):\n%-13s", "seconds");
  for (int op = 0; op < kNumOps; ++op) std::printf(" %8s", kShort[op]);
  std::printf("\n");
  for (const Bucket& b : f.buckets) {
    std::printf("%5.0f - %-5.0f", b.t0_s, b.t1_s);
    for (const Latency& l : b.per_op) {
      if (l.n == 0) {
        std::printf(" %8s", "-");
      } else {
        std::printf(" %8.1f", l.p50);
      }
    }
    std::printf("\n");
  }
}

json::Value LatJson(const Latency& l) {
  json::Value v = json::Value::MakeObject();
  v.Set("n", json::Value::Int(l.n));
  v.Set("p50", json::Value::Number(l.p50));
  v.Set("p99", json::Value::Number(l.p99));
  v.Set("max", json::Value::Number(l.max));
  return v;
}

json::Value CountsJson(const std::map<std::string, int64_t>& m) {
  json::Value v = json::Value::MakeObject();
  for (const auto& [k, n] : m) v.Set(k, json::Value::Int(n));
  return v;
}

json::Value Strings(const std::vector<std::string>& list) {
  json::Value v = json::Value::MakeArray();
  for (const std::string& s : list) v.mutable_array().push_back(json::Value::String(s));
  return v;
}

// The run itself: its size, timings and where it ran.
json::Value ConfigJson(const Figures& f) {
  using json::Value;
  Value config = Value::MakeObject();
  config.Set("clients", Value::Int(f.clients));
  config.Set("duration_s", Value::Int(f.duration_s));
  config.Set("load_s", Value::Number(f.load_s));
  config.Set("setup_s", Value::Number(f.setup_s));
  config.Set("idle_audit_s", Value::Number(f.idle_audit_s));
  config.Set("address", Value::String(f.address));
  config.Set("server_binary", Value::String(f.server_binary));
  config.Set("work_dir", Value::String(f.work_dir));
  config.Set("projects", Value::Bool(f.projects));
  return config;
}

json::Value ProjectsJson(const Figures& f) {
  using json::Value;
  const ProjectFigures& p = f.project_figures;
  Value projects = Value::MakeObject();
  projects.Set("users", Value::Int(p.users));
  Value probes = Value::MakeObject();
  for (const auto& [kind, codes] : p.probes) probes.Set(kind, CountsJson(codes));
  projects.Set("probes", probes);
  projects.Set("cross_project_reads_answered", Value::Int(p.cross_project_ok));
  projects.Set("reader_writes_accepted", Value::Int(p.reader_writes_ok));
  projects.Set("ledger_read", Value::Bool(p.ledger_ok));
  projects.Set("jobs_told_stored", Value::Int(p.ledger_jobs));
  projects.Set("jobs_lost", Value::Int(p.lost_jobs));
  projects.Set("jobs_duplicated", Value::Int(p.duplicated_jobs));
  projects.Set("jobs_misplaced", Value::Int(p.misplaced_jobs));
  projects.Set("datasets_told_stored", Value::Int(p.ledger_datasets));
  projects.Set("datasets_lost", Value::Int(p.lost_datasets));
  projects.Set("datasets_duplicated", Value::Int(p.duplicated_datasets));
  projects.Set("datasets_misplaced", Value::Int(p.misplaced_datasets));
  return projects;
}

json::Value RpcsJson(const Figures& f) {
  using json::Value;
  Value rpcs = Value::MakeArray();
  for (const OpSummary& o : f.ops) {
    Value r = Value::MakeObject();
    r.Set("rpc", Value::String(o.name));
    r.Set("calls", Value::Int(o.calls));
    r.Set("ok", Value::Int(o.ok));
    r.Set("expected_refusals", CountsJson(o.expected_by_code));
    r.Set("errors", CountsJson(o.errors_by_code));
    Value messages = Value::MakeObject();
    for (const auto& [code, list] : o.error_messages) messages.Set(code, Strings(list));
    r.Set("error_messages", messages);
    r.Set("dropped", Value::Int(o.dropped));
    r.Set("cut_at_end", Value::Int(o.cut));
    r.Set("latency_ms", LatJson(o.total));
    if (o.stream) r.Set("first_message_ms", LatJson(o.first));
    rpcs.mutable_array().push_back(r);
  }
  return rpcs;
}

json::Value JobsJson(const Figures& f) {
  using json::Value;
  Value jobs = Value::MakeObject();
  jobs.Set("submitted", Value::Int(f.submitted));
  jobs.Set("by_state_after_load", CountsJson(f.jobs_by_state));
  jobs.Set("cancels_accepted", Value::Int(f.cancels_accepted));
  jobs.Set("watched_to_end", Value::Int(f.watched_to_end));
  jobs.Set("failed_job_errors", Strings(f.failed_job_errors));
  return jobs;
}

json::Value ServerJson(const Figures& f) {
  using json::Value;
  Value server = Value::MakeObject();
  server.Set("rss_start_kb", Value::Int(f.at_start.vm_rss_kb));
  server.Set("rss_end_kb", Value::Int(f.at_end.vm_rss_kb));
  server.Set("rss_peak_kb", Value::Int(f.rss_peak_kb));
  server.Set("vm_hwm_kb", Value::Int(f.hwm_kb));
  server.Set("threads_start", Value::Int(f.at_start.threads));
  server.Set("threads_peak", Value::Int(f.threads_peak));
  server.Set("threads_end", Value::Int(f.at_end.threads));
  server.Set("fds_start", Value::Int(f.fds_start));
  server.Set("fds_peak", Value::Int(f.fds_peak));
  server.Set("fds_end", Value::Int(f.fds_end));
  server.Set("serving_after_load", Value::Bool(f.serving_after_load));
  server.Set("crashed", Value::Bool(f.crashed));
  server.Set("crash", Value::String(f.crash));
  server.Set("sigterm_clean", Value::Bool(f.sigterm_clean));
  server.Set("exit", Value::String(f.exit_description));
  server.Set("shutdown_s", Value::Number(f.shutdown_s));
  server.Set("log_lines", Value::Int(f.server_log_lines));
  server.Set("log_tail", Strings(f.server_log_tail));
  return server;
}

json::Value SqliteJson(const Figures& f) {
  using json::Value;
  Value db = Value::MakeObject();
  db.Set("integrity_check", Value::String(f.integrity));
  db.Set("integrity_ok", Value::Bool(f.integrity_ok));
  db.Set("foreign_key_check", Value::String(f.foreign_keys));
  db.Set("rows", Value::String(f.table_rows));
  db.Set("db_bytes", Value::Int(f.db_bytes));
  db.Set("wal_bytes", Value::Int(f.wal_bytes));
  return db;
}

json::Value TimelineJson(const Figures& f) {
  using json::Value;
  Value timeline = Value::MakeArray();
  for (const Bucket& b : f.buckets) {
    Value v = Value::MakeObject();
    v.Set("t0_s", Value::Number(b.t0_s));
    v.Set("t1_s", Value::Number(b.t1_s));
    v.Set("calls", Value::Int(b.calls));
    v.Set("errors", Value::Int(b.errors));
    v.Set("unary_ok_ms", LatJson(b.unary_ok));
    v.Set("rss_max_kb", Value::Int(b.rss_max_kb));
    v.Set("threads_max", Value::Int(b.threads_max));
    v.Set("fds_max", Value::Int(b.fds_max));
    Value by_rpc = Value::MakeObject();
    for (int op = 0; op < kNumOps; ++op) by_rpc.Set(OpName(op), LatJson(b.per_op[op]));
    v.Set("latency_ms_by_rpc", by_rpc);
    timeline.mutable_array().push_back(v);
  }
  return timeline;
}

// [t_s, rss_kb, threads, fds] per sample.
json::Value SamplesJson(const Figures& f) {
  using json::Value;
  Value samples = Value::MakeArray();
  for (const ResourceSample& r : f.resources) {
    Value row = Value::MakeArray();
    row.mutable_array().push_back(Value::Number(std::round(r.t_s * 10) / 10));
    row.mutable_array().push_back(Value::Int(r.rss_kb));
    row.mutable_array().push_back(Value::Int(r.threads));
    row.mutable_array().push_back(Value::Int(r.fds));
    samples.mutable_array().push_back(row);
  }
  return samples;
}

void PrintGateway(const Figures& f) {
  const GatewayFigures& g = f.gateway;
  std::printf("\nHTTP gateway under pressure\n");
  std::printf(
      "  slow clients (127.0.0.2, a byte a second): %d, %lld connections, %lld cut by "
      "the server\n",
      g.slow_clients, static_cast<long long>(g.slow_connections),
      static_cast<long long>(g.slow_cut));
  std::printf("  cross-site attempts: %lld, not refused: %lld\n",
              static_cast<long long>(g.cross_site_attempts),
              static_cast<long long>(g.cross_site_not_refused));
  std::printf(
      "  /healthz (127.0.0.1, new connection each): %lld probes, %lld failed, p50 %.1f "
      "ms, p99 %.1f ms, max %.1f ms\n",
      static_cast<long long>(g.healthz_probes), static_cast<long long>(g.healthz_failures),
      g.healthz_p50_ms, g.healthz_p99_ms, g.healthz_max_ms);
}

json::Value GatewayJson(const Figures& f) {
  using json::Value;
  const GatewayFigures& g = f.gateway;
  Value v = Value::MakeObject();
  v.Set("slow_clients", Value::Number(g.slow_clients));
  v.Set("slow_connections", Value::Number(static_cast<double>(g.slow_connections)));
  v.Set("slow_cut", Value::Number(static_cast<double>(g.slow_cut)));
  v.Set("cross_site_attempts", Value::Number(static_cast<double>(g.cross_site_attempts)));
  v.Set("cross_site_not_refused", Value::Number(static_cast<double>(g.cross_site_not_refused)));
  v.Set("healthz_probes", Value::Number(static_cast<double>(g.healthz_probes)));
  v.Set("healthz_failures", Value::Number(static_cast<double>(g.healthz_failures)));
  v.Set("healthz_p50_ms", Value::Number(g.healthz_p50_ms));
  v.Set("healthz_p99_ms", Value::Number(g.healthz_p99_ms));
  v.Set("healthz_max_ms", Value::Number(g.healthz_max_ms));
  return v;
}

}  // namespace

double Mb(int64_t kb) { return kb / 1024.0; }

void PrintFigures(const Figures& f) {
  PrintHeader(f);
  PrintRpcs(f);
  PrintJobs(f);
  PrintProjects(f);
  PrintServer(f);
  PrintDatabase(f);
  PrintServerLog(f);
  PrintTimeline(f);
  PrintLatencyOverTime(f);
  PrintGateway(f);
  std::printf("\nverdict: %s\n", f.problems.empty() ? "PASS" : "FAIL");
  for (const std::string& p : f.problems) std::printf("   - %s\n", p.c_str());
  std::fflush(stdout);
}

void JudgeProjects(const ProjectFigures& p, std::vector<std::string>* problems) {
  auto count = [&](int64_t n, const char* what) {
    if (n > 0) problems->push_back(absl::StrCat(n, " ", what));
  };
  count(p.cross_project_ok, "cross-project reads answered");
  count(p.reader_writes_ok, "reader writes accepted");
  count(p.lost_jobs, "jobs lost");
  count(p.duplicated_jobs, "jobs listed twice");
  count(p.misplaced_jobs, "jobs listed in another project");
  count(p.lost_datasets, "datasets lost");
  count(p.duplicated_datasets, "datasets listed twice");
  count(p.misplaced_datasets, "datasets listed in another project");
  if (!p.ledger_ok) problems->push_back("a project's listing could not be read");
  if (p.probes.empty()) problems->push_back("no probe of another project was made");
}

json::Value FiguresJson(const Figures& f) {
  using json::Value;
  Value root = Value::MakeObject();
  root.Set("config", ConfigJson(f));
  root.Set("rpcs", RpcsJson(f));
  root.Set("jobs", JobsJson(f));
  if (f.projects) root.Set("projects", ProjectsJson(f));
  root.Set("server", ServerJson(f));
  root.Set("sqlite", SqliteJson(f));
  root.Set("timeline", TimelineJson(f));
  root.Set("samples_t_rsskb_threads_fds", SamplesJson(f));
  root.Set("http_gateway", GatewayJson(f));
  root.Set("pass", Value::Bool(f.problems.empty()));
  root.Set("problems", Strings(f.problems));
  return root;
}

}  // namespace fca::soak
