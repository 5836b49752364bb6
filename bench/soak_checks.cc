#include "bench/soak_checks.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "bench/soak_process.h"

// Defined with the others in soak_bench.cc.
ABSL_DECLARE_FLAG(std::string, sqlite3);

namespace fca::soak {
namespace {

namespace fs = std::filesystem;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A FAILED job's error with digits and the model names blanked, so that
// one cause groups as one line.
std::string ErrorKey(std::string key) {
  for (char& c : key) c = (c >= '0' && c <= '9') ? '#' : c;
  for (const char* name : {"fg-a", "fg-b"}) {
    for (size_t at; (at = key.find(name)) != std::string::npos;) key.replace(at, 4, "*");
  }
  return key;
}

// Every page of one project's listing as `token` sees it: `list` calls the
// RPC, `each` reads a page. False when a page could not be read.
template <typename Request, typename Response, typename List, typename Each>
bool ListProjectPages(const std::string& token, const std::string& project, List list, Each each) {
  Request req;
  req.set_project(project);
  req.set_page_size(500);
  for (int page = 0; page < 10000; ++page) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Authorize(token, &ctx);
    Response resp;
    if (!list(&ctx, req, &resp).ok()) return false;
    each(resp);
    if (resp.next_page_token().empty()) return true;
    req.set_page_token(resp.next_page_token());
  }
  return false;
}

// Every job of `project` as the admin lists it (all pages): id -> times
// listed; a job naming another project counts in `misplaced`.
bool ListProjectJobs(v1::AuditService::Stub& stub, const std::string& token,
                     const std::string& project, std::map<int64_t, int>* listed,
                     int64_t* misplaced) {
  return ListProjectPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      token, project,
      [&](grpc::ClientContext* ctx, const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
        return stub.ListJobs(ctx, req, resp);
      },
      [&](const v1::ListJobsResponse& resp) {
        for (const v1::Job& j : resp.jobs()) {
          ++(*listed)[j.id()];
          if (j.project() != project) ++*misplaced;
        }
      });
}

// Every dataset of `project`, page by page (ListDatasets serves 100 a page
// by default): name -> times listed.
bool ListProjectDatasets(v1::AuditService::Stub& stub, const std::string& token,
                         const std::string& project, std::map<std::string, int>* names,
                         int64_t* misplaced) {
  return ListProjectPages<v1::ListDatasetsRequest, v1::ListDatasetsResponse>(
      token, project,
      [&](grpc::ClientContext* ctx, const v1::ListDatasetsRequest& req,
          v1::ListDatasetsResponse* resp) { return stub.ListDatasets(ctx, req, resp); },
      [&](const v1::ListDatasetsResponse& resp) {
        for (const v1::Dataset& d : resp.datasets()) {
          ++(*names)[d.name()];
          if (d.project() != project) ++*misplaced;
        }
      });
}

}  // namespace

bool SweepJobs(v1::AuditService::Stub& stub, const std::string& token, Figures* f) {
  v1::ListJobsRequest req;
  req.set_page_size(500);
  std::map<std::string, std::pair<int64_t, std::string>> failed;  // key -> (jobs, example)
  bool ok = true;
  for (int page = 0; page < 10000; ++page) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Authorize(token, &ctx);
    v1::ListJobsResponse resp;
    if (!stub.ListJobs(&ctx, req, &resp).ok()) {
      ok = false;
      break;
    }
    for (const v1::Job& j : resp.jobs()) {
      std::string state = v1::JobState_Name(j.state());
      if (state.rfind("JOB_STATE_", 0) == 0) state = state.substr(10);
      ++f->jobs_by_state[state];
      if (j.state() == v1::JOB_STATE_FAILED) {
        auto it = failed
                      .try_emplace(ErrorKey(j.error()), 0,
                                   absl::StrFormat("job %d: %s", j.id(), j.error()))
                      .first;
        ++it->second.first;
      }
    }
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  for (const auto& [key, group] : failed) {
    f->failed_job_errors.push_back(absl::StrFormat("%d x, e.g. %s", group.first, group.second));
  }
  return ok;
}

void CheckLedger(v1::AuditService::Stub& stub, Shared* shared, Figures* f) {
  ProjectFigures& p = f->project_figures;
  std::lock_guard<std::mutex> lock(shared->ledger_mu);
  std::map<int64_t, int> home;  // job -> the project listing it first
  p.ledger_ok = true;
  for (int k = 0; k < kNumProjects; ++k) {
    std::map<int64_t, int> listed;
    p.ledger_ok =
        ListProjectJobs(stub, shared->admin_token, kProjects[k], &listed, &p.misplaced_jobs) &&
        p.ledger_ok;
    for (const auto& [id, times] : listed) {
      p.duplicated_jobs += times - 1;
      if (!home.emplace(id, k).second) ++p.duplicated_jobs;
    }
    for (int64_t id : shared->jobs_of[k]) {
      ++p.ledger_jobs;
      if (listed.count(id) == 0) ++p.lost_jobs;
    }
    std::map<std::string, int> names;
    if (!ListProjectDatasets(stub, shared->admin_token, kProjects[k], &names,
                             &p.misplaced_datasets)) {
      p.ledger_ok = false;
      continue;
    }
    for (const auto& [name, times] : names) p.duplicated_datasets += times - 1;
    for (const std::string& name : shared->datasets_of[k]) {
      ++p.ledger_datasets;
      if (names.count(name) == 0) ++p.lost_datasets;
    }
  }
}

void CheckDatabase(const std::string& db, Figures* f) {
  const std::string sqlite3 = absl::GetFlag(FLAGS_sqlite3);
  if (access(sqlite3.c_str(), X_OK) == 0) {
    CommandResult r = Run({sqlite3, db, "PRAGMA integrity_check;"}, {}, 600);
    f->integrity = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
    f->integrity_ok = r.exit_code == 0 && f->integrity == "ok";
    r = Run({sqlite3, db, "PRAGMA foreign_key_check;"}, {}, 600);
    f->foreign_keys = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
    r = Run({sqlite3, db,
             "SELECT 'jobs ' || (SELECT count(*) FROM jobs) || ', job_events ' || "
             "(SELECT count(*) FROM job_events) || ', results ' || (SELECT count(*) FROM "
             "results) || ', datasets ' || (SELECT count(*) FROM datasets) || "
             "', dataset_blobs ' || (SELECT count(*) FROM dataset_blobs) || "
             "', coeff_cache ' || (SELECT count(*) FROM coeff_cache) || '; job states: ' "
             "|| (SELECT group_concat(state || ' ' || n, ', ') FROM (SELECT state, "
             "count(*) AS n FROM jobs GROUP BY state));"},
            {}, 600);
    f->table_rows = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
  } else {
    f->integrity = "not checked: no " + sqlite3 + " (apt-get install sqlite3)";
  }
  std::error_code ec;
  f->db_bytes = static_cast<int64_t>(fs::file_size(db, ec));
  if (ec) f->db_bytes = 0;
  f->wal_bytes = static_cast<int64_t>(fs::file_size(db + "-wal", ec));
  if (ec) f->wal_bytes = 0;
}

}  // namespace fca::soak
