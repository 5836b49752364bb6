// fca_listing_bench: per-page latency of every listing RPC through a real
// fca server (gRPC on 127.0.0.1, auth on) over an aged database.
//
// Builds a database of --jobs finished jobs (spread over the past year and
// over 10 users' personal projects and 3 shared ones, each job with its
// submission provenance, 5 events, 10 result rows and its task), 200
// queued jobs, --datasets
// datasets (spread the same way) and 20,000 audit log rows, in bulk through
// SQL after the store has made the schema; ages it: a retention pass
// (server/core/retention.h) purges the jobs that ended over --purge_days
// ago and the datasets unused as long, and every 7th remaining dataset is
// deleted, so the file has holes and its rows are no longer in insertion
// order. Times the reading of stored spec and provenance JSON per page of
// 500 jobs with protobuf's parser and with ParseProtoJson's fast path, side
// by side. Then starts the server on it (no workers: nothing runs), prints
// the CPU it uses idle (its sweeps over the aged store), and walks the
// pages of every listing RPC (ListDatasets, ListJobs plain and filtered,
// QueryResults, QueryAuditLog, ListApiKeys, ListProjects, ListWebhooks), as
// an admin (every project) and as one user (a project), and prints per
// page: the first page, the deepest page walked, the median and the p95,
// in milliseconds, against the 20 ms target.
//
// Usage: fca_listing_bench [--dir=DIR] [--jobs=N] [--datasets=N]
//                          [--purge_days=D] [--keep]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_check.h"
#include "common/build_version.h"
#include "common/proto_json.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "server/core/retention.h"
#include "server/jobs/mapping.h"
#include "server/runtime/messages.h"
#include "server/server.h"
#include "storage/sqlite.h"
#include "storage/store.h"

namespace fca {
namespace {

using bench::Check;
using bench::Clock;
using bench::SecondsSince;

constexpr double kTargetMs = 20;
constexpr int kUsers = 10;
constexpr int kShared = 3;
constexpr int kQueuedJobs = 200;
constexpr int kAuditRows = 20000;
constexpr int64_t kDayUs = int64_t{86400} * 1000 * 1000;
constexpr char kAdminKey[] = "bench-admin-key-0123456789abcdef";
constexpr char kUserKey[] = "bench-user0-key-0123456789abcdef";
const char* const kModels[] = {"fg_a", "fg_b", "fg_c"};
const char* const kInterventions[] = {"correct", "cross_input", "token_shuffle", "static_layer",
                                      "global_mean"};
const char* const kMetrics[] = {"nll", "penalty"};

std::string User(int64_t i) { return absl::StrCat("user", i % kUsers); }

// Rows go to the users' personal projects, every 4th to a shared one.
std::string Project(int64_t i) { return i % 4 == 3 ? absl::StrCat("lab", i % kShared) : User(i); }

std::string Hex64(int64_t n) { return absl::StrFormat("%064x", n); }

std::string Spec(int64_t i) {
  v1::AuditSpec spec;
  spec.add_models(kModels[i % 3]);
  spec.set_eval_dataset(absl::StrCat("eval", i % 50));
  spec.set_calib_dataset(absl::StrCat("calib", i % 50));
  spec.set_window_length(128);
  spec.set_label(absl::StrCat("run ", i % 100));
  return runtime::SpecToJson(spec);
}

// What Store::CreateJob records of Spec(i)'s resolution at submission
// (server/core/service.cc SubmitProvenance): every listed job carries it.
std::string Provenance(int64_t i) {
  v1::Provenance provenance;
  provenance.set_eval_dataset(absl::StrCat("eval", i % 50));
  provenance.set_eval_sha256(Hex64(i % 50));
  provenance.set_calib_dataset(absl::StrCat("calib", i % 50));
  provenance.set_calib_sha256(Hex64(50 + i % 50));
  provenance.set_server_version(BuildVersion());
  return runtime::ToStoredJson(provenance);
}

std::string Event(v1::JobState state) {
  v1::JobEvent event;
  event.set_state(state);
  return event.SerializeAsString();
}

// A statement run once per row: `bind` binds the row, then it runs.
void InsertRows(storage::Database& db, const char* sql, int64_t rows,
                const std::function<void(storage::Statement&, int64_t)>& bind) {
  storage::Statement stmt = Check(db.Prepare(sql, "bench insert"), sql);
  for (int64_t i = 0; i < rows; ++i) {
    bind(stmt, i);
    Check(stmt.Run(), sql);
    Check(stmt.Reset(), sql);
  }
}

// The store makes the schema, the keys and the projects; the rows go in
// through SQL in one transaction (hours of a real server's writes).
void Build(const std::string& path, int64_t jobs, int64_t datasets) {
  const Clock::time_point start = Clock::now();
  {
    storage::StoreOptions options;
    options.path = path;
    auto store = Check(storage::Store::Open(options), "open store");
    Check(store->AddApiKey("admin", "admin", kAdminKey), "admin key");
    Check(store->AddApiKey(User(0), "user", kUserKey), "user key");
    for (int u = 0; u < kUsers; ++u) {
      Check(store->EnsurePersonalProject(User(u)).status(), "personal project");
    }
    for (int p = 0; p < kShared; ++p) {
      Check(store->CreateProject(absl::StrCat("lab", p), "admin", User(p)).status(), "project");
      for (int u = 0; u < kUsers; ++u) {
        if (u != p) Check(store->SetMember(absl::StrCat("lab", p), User(u), "writer"), "member");
      }
    }
  }
  auto db = Check(storage::Database::Open(path, 5000), "open database");
  const int64_t now = absl::ToUnixMicros(absl::Now());
  const int64_t year = 365 * kDayUs;
  Check(db->Transaction([&]() -> absl::Status {
    InsertRows(*db, "INSERT INTO dataset_blobs (sha256, size_bytes, num_chunks) VALUES (?1, 16, 1)",
               datasets, [](storage::Statement& s, int64_t i) { s.BindText(1, Hex64(i)); });
    InsertRows(*db, "INSERT INTO dataset_chunks (sha256, idx, data) VALUES (?1, 0, ?2)", datasets,
               [](storage::Statement& s, int64_t i) {
                 s.BindText(1, Hex64(i));
                 s.BindBlob(2, absl::StrFormat("%016d", i));
               });
    InsertRows(*db,
               "INSERT INTO datasets (name, kind, owner, project, sha256, created_at_us, "
               "last_used_us) VALUES (?1, 'text', ?2, ?3, ?4, ?5, ?5)",
               datasets, [&](storage::Statement& s, int64_t i) {
                 s.BindText(1, absl::StrCat("d", i));
                 s.BindText(2, User(i));
                 s.BindText(3, Project(i));
                 s.BindText(4, Hex64(i));
                 s.BindInt(5, now - year + i * (year / datasets));
               });
    const std::string done = Event(v1::JOB_STATE_SUCCEEDED);
    const std::string queued = Event(v1::JOB_STATE_QUEUED);
    InsertRows(
        *db,
        "INSERT INTO jobs (owner, project, spec_json, state, created_at_us, started_at_us, "
        "finished_at_us, attempts, provenance_json) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8)",
        jobs + kQueuedJobs, [&](storage::Statement& s, int64_t i) {
          const bool active = i >= jobs;
          const int64_t created = active ? now : now - year + i * (year / jobs);
          s.BindText(1, User(i));
          s.BindText(2, Project(i));
          s.BindText(3, Spec(i));
          s.BindText(4, active ? "QUEUED" : (i % 20 == 0 ? "FAILED" : "SUCCEEDED"));
          s.BindInt(5, created);
          s.BindInt(6, active ? 0 : created + 3600 * int64_t{1000000});
          s.BindInt(7, active ? 0 : 1);
          s.BindText(8, Provenance(i));
        });
    InsertRows(*db,
               "INSERT INTO tasks (job_id, idx, model, state, attempts) VALUES (?1, 0, ?2, ?3, ?4)",
               jobs + kQueuedJobs, [&](storage::Statement& s, int64_t i) {
                 const bool active = i >= jobs;
                 s.BindInt(1, i + 1);
                 s.BindText(2, kModels[i % 3]);
                 s.BindText(3, active ? "QUEUED" : (i % 20 == 0 ? "FAILED" : "SUCCEEDED"));
                 s.BindInt(4, active ? 0 : 1);
               });
    // What Store::CreateJob records of each spec (Spec(i) names one model).
    InsertRows(*db, "INSERT INTO job_models (model, job_id) VALUES (?1, ?2)", jobs + kQueuedJobs,
               [&](storage::Statement& s, int64_t i) {
                 s.BindText(1, kModels[i % 3]);
                 s.BindInt(2, i + 1);
               });
    InsertRows(*db,
               "INSERT INTO job_events (job_id, seq, payload, created_at_us) VALUES (?1, ?2, ?3, "
               "?4)",
               jobs * 5, [&](storage::Statement& s, int64_t k) {
                 s.BindInt(1, k / 5 + 1);
                 s.BindInt(2, k % 5 + 1);
                 s.BindBlob(3, k % 5 == 4 ? done : queued);
                 s.BindInt(4, now - year + (k / 5) * (year / jobs));
               });
    InsertRows(*db,
               "INSERT INTO results (job_id, model, weights_sha256, dataset_sha256, intervention, "
               "metric, value, defined, ci_low, ci_high, n, created_at_us, calib_sha256) VALUES "
               "(?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?7, ?7, 48, ?8, ?4)",
               jobs * 10, [&](storage::Statement& s, int64_t k) {
                 const int64_t job = k / 10;
                 s.BindInt(1, job + 1);
                 s.BindText(2, kModels[job % 3]);
                 s.BindText(3, Hex64(job % 3));
                 s.BindText(4, Hex64(job % 50));
                 s.BindText(5, kInterventions[(k % 10) / 2]);
                 s.BindText(6, kMetrics[k % 2]);
                 s.BindDouble(7, 1.0 + 0.001 * static_cast<double>(k % 997));
                 s.BindInt(8, now - year + job * (year / jobs));
               });
    InsertRows(*db,
               "INSERT INTO audit_log (at_us, user, key_id, peer, action, object_kind, object_id, "
               "outcome, detail) VALUES (?1, ?2, 0, '127.0.0.1', ?3, 'job', ?4, 'OK', '')",
               kAuditRows, [&](storage::Statement& s, int64_t i) {
                 s.BindInt(1, now - kDayUs + i * (kDayUs / kAuditRows));
                 s.BindText(2, User(i));
                 s.BindText(3, i % 2 == 0 ? "job.submit" : "job.delete");
                 s.BindText(4, absl::StrCat(i));
               });
    return absl::OkStatus();
  }),
        "fill");
  Check(db->Execute("ANALYZE", "analyze"), "analyze");
  std::printf(
      "built %lld jobs (+%d queued) with %lld events and %lld result rows, %lld datasets, "
      "%d audit rows, over %d personal and %d shared projects in %.1f s\n",
      static_cast<long long>(jobs), kQueuedJobs, static_cast<long long>(jobs * 5),
      static_cast<long long>(jobs * 10), static_cast<long long>(datasets), kAuditRows, kUsers,
      kShared, SecondsSince(start));
}

int64_t FileBytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(size);
}

// Purges what ended or was last used over `purge_days` ago, then deletes
// every 7th remaining dataset: the aged file.
void Age(const std::string& path, int purge_days) {
  const int64_t before = FileBytes(path);
  core::PurgeCounts counts;
  double seconds = 0;
  int64_t deleted = 0;
  {
    storage::StoreOptions options;
    options.path = path;
    auto store = Check(storage::Store::Open(options), "open store");
    core::RetentionOptions retention;
    retention.defaults = {purge_days, purge_days};
    core::Retention purger(store.get(), retention);
    const Clock::time_point start = Clock::now();
    counts = Check(purger.PurgeOnce(), "purge");
    seconds = SecondsSince(start);
    std::string token;
    int64_t seen = 0;
    do {
      const storage::DatasetPage page =
          Check(store->ListDatasets(std::nullopt, storage::Store::kMaxPageSize, token), "list");
      for (const storage::DatasetRecord& d : page.datasets) {
        if (++seen % 7 == 0) {
          Check(store->DeleteDataset(d.id).status(), "delete dataset");
          ++deleted;
        }
      }
      token = page.next_page_token;
    } while (!token.empty());
  }  // closing checkpoints the write-ahead log into the file
  std::printf(
      "aged: a retention pass (%d days) purged %lld jobs with their events and results and %lld "
      "datasets in %.1f s (%.2f ms a row); then %lld datasets deleted; file %.1f MiB -> "
      "%.1f MiB\n",
      purge_days, static_cast<long long>(counts.jobs), static_cast<long long>(counts.datasets),
      seconds,
      counts.jobs + counts.datasets > 0
          ? seconds * 1000 / static_cast<double>(counts.jobs + counts.datasets)
          : 0.0,
      static_cast<long long>(deleted), static_cast<double>(before) / (1 << 20),
      static_cast<double>(FileBytes(path)) / (1 << 20));
}

std::unique_ptr<grpc::ClientContext> Context(const char* key) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("authorization", absl::StrCat("Bearer ", key));
  return context;
}

struct Pages {
  std::vector<double> ms;
  int64_t rows = 0;
  double At(double q) const {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
  }
};

// protobuf's parser alone, as ParseProtoJson was before its fast path.
absl::Status ProtobufParse(const std::string& json, google::protobuf::Message* message,
                           UnknownFields unknown) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = unknown == UnknownFields::kIgnore;
  return google::protobuf::util::JsonStringToMessage(json, message, options).ok()
             ? absl::OkStatus()
             : absl::DataLossError("protobuf refused a stored document");
}

// What a ListJobs page of 500 spends reading its jobs' stored spec and
// provenance JSON (their conversion to fca.v1.Job) with protobuf's parser
// and with ParseProtoJson (common/proto_json.h, its fast path), over the
// same pages of the aged file, taking turns at going first: ms per page.
void CompareParsers(const std::string& path) {
  storage::StoreOptions options;
  options.path = path;
  auto store = Check(storage::Store::Open(options), "open store");
  using Parse = absl::Status (*)(const std::string&, google::protobuf::Message*, UnknownFields);
  const Parse parsers[] = {
      ProtobufParse, [](const std::string& json, google::protobuf::Message* message,
                        UnknownFields unknown) { return ParseProtoJson(json, message, unknown); }};
  Pages pages[2];
  std::string token;
  for (int turn = 0;; ++turn) {
    const storage::JobPage page = Check(store->ListJobs({}, 500, token), "list jobs");
    for (int k : {turn % 2, 1 - turn % 2}) {
      const Clock::time_point start = Clock::now();
      for (const storage::JobRecord& job : page.jobs) {
        v1::AuditSpec spec;
        v1::Provenance provenance;
        Check(parsers[k](job.spec_json, &spec, UnknownFields::kRefuse), "stored spec");
        Check(parsers[k](job.provenance_json, &provenance, UnknownFields::kIgnore),
              "stored provenance");
      }
      pages[k].ms.push_back(SecondsSince(start) * 1000);
      pages[k].rows += static_cast<int64_t>(page.jobs.size());
    }
    token = page.next_page_token;
    if (token.empty()) break;
  }
  std::printf("\nreading the stored spec and provenance JSON of a page of 500 jobs, ms\n");
  const char* const names[] = {"protobuf's JsonStringToMessage", "ParseProtoJson (fast path)"};
  for (int k : {0, 1}) {
    std::printf("  %-32s %4zu pages  median %6.2f  p95 %6.2f\n", names[k], pages[k].ms.size(),
                pages[k].At(0.5), pages[k].At(0.95));
  }
}

// Calls `page(token, &next)` (returns the rows it got) until the last page
// or `max_pages`.
Pages Walk(int max_pages, const std::function<int64_t(const std::string&, std::string*)>& page) {
  Pages pages;
  std::string token;
  for (int i = 0; i < max_pages; ++i) {
    std::string next;
    const Clock::time_point start = Clock::now();
    pages.rows += page(token, &next);
    pages.ms.push_back(SecondsSince(start) * 1000);
    if (next.empty()) break;
    token = next;
  }
  return pages;
}

int missed = 0;

// CPU seconds this process has used (every thread, user and system).
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// What the started server costs while nobody calls it (its coordinator's
// sweep, every 200 ms, over the aged store): CPU per second of wall time.
// A sweep query that reads every row shows here first (it held the store
// for 45 ms of every 200 at 100k jobs, so every listing waited behind it).
void MeasureIdle() {
  absl::SleepFor(absl::Seconds(1));  // past start-up
  const double cpu = CpuSeconds();
  const Clock::time_point start = Clock::now();
  absl::SleepFor(absl::Seconds(3));
  std::printf("\nan idle server (sweeps only, no calls): %.1f ms of CPU per second\n",
              (CpuSeconds() - cpu) * 1000 / SecondsSince(start));
}

void Report(const std::string& name, const Pages& p) {
  const bool ok = p.At(0.95) < kTargetMs && p.ms.front() < kTargetMs && p.ms.back() < kTargetMs;
  missed += ok ? 0 : 1;
  std::printf("%-46s %6zu %8lld %7.2f %7.2f %7.2f %7.2f  %s\n", name.c_str(), p.ms.size(),
              static_cast<long long>(p.rows), p.ms.front(), p.ms.back(), p.At(0.5), p.At(0.95),
              ok ? "ok" : "MISSED");
}

void CheckRpc(const grpc::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.error_message().c_str());
    std::exit(1);
  }
}

// A paged RPC as a page function: `Rpc` the stub's method.
template <typename Req, typename Resp, typename Call, typename Rows>
std::function<int64_t(const std::string&, std::string*)> Paged(const char* key, Req req, Call call,
                                                               Rows rows) {
  return [key, req, call, rows](const std::string& token, std::string* next) mutable {
    req.set_page_token(token);
    Resp resp;
    CheckRpc(call(Context(key).get(), req, &resp), Req::descriptor()->name().c_str());
    *next = resp.next_page_token();
    return static_cast<int64_t>(rows(resp));
  };
}

// An unpaged RPC, called `times` times.
template <typename Req, typename Resp, typename Call, typename Rows>
Pages Repeat(int times, const char* key, const Req& req, Call call, Rows rows) {
  return Walk(times, [&](const std::string&, std::string* next) {
    Resp resp;
    CheckRpc(call(Context(key).get(), req, &resp), Req::descriptor()->name().c_str());
    *next = "again";
    return static_cast<int64_t>(rows(resp));
  });
}

void Measure(v1::AuditService::Stub& stub) {
  std::printf("\n%-46s %6s %8s %7s %7s %7s %7s\n", "per page, ms (through gRPC)", "pages", "rows",
              "first", "deepest", "median", "p95");
  const auto list_datasets = [&](auto&&... a) { return stub.ListDatasets(a...); };
  const auto list_jobs = [&](auto&&... a) { return stub.ListJobs(a...); };
  const auto query = [&](auto&&... a) { return stub.QueryResults(a...); };
  const auto audit = [&](auto&&... a) { return stub.QueryAuditLog(a...); };
  const auto datasets_of = [](const v1::ListDatasetsResponse& r) { return r.datasets_size(); };
  const auto jobs_of = [](const v1::ListJobsResponse& r) { return r.jobs_size(); };
  const auto results_of = [](const v1::QueryResultsResponse& r) { return r.results_size(); };
  for (const auto& [who, key, project] :
       {std::tuple{"admin", kAdminKey, ""}, std::tuple{"user0", kUserKey, "user0"},
        std::tuple{"user0", kUserKey, "lab0"}}) {
    const std::string as = absl::StrCat(who, project[0] ? absl::StrCat(" in ", project) : "");
    for (int size : {100, 1000}) {
      v1::ListDatasetsRequest req;
      req.set_project(project);
      req.set_page_size(size);
      Report(absl::StrFormat("ListDatasets %s, page %d, all", as, size),
             Walk(1000000, Paged<v1::ListDatasetsRequest, v1::ListDatasetsResponse>(
                               key, req, list_datasets, datasets_of)));
    }
    for (int size : {50, 500}) {
      v1::ListJobsRequest req;
      req.set_project(project);
      req.set_page_size(size);
      Report(absl::StrFormat("ListJobs %s, page %d, all", as, size),
             Walk(1000000,
                  Paged<v1::ListJobsRequest, v1::ListJobsResponse>(key, req, list_jobs, jobs_of)));
    }
    v1::ListJobsRequest failed;
    failed.set_project(project);
    failed.set_state(v1::JOB_STATE_FAILED);
    Report(absl::StrFormat("ListJobs %s, state FAILED, all", as),
           Walk(1000000,
                Paged<v1::ListJobsRequest, v1::ListJobsResponse>(key, failed, list_jobs, jobs_of)));
    v1::ListJobsRequest model;
    model.set_project(project);
    model.set_model("fg_b");
    Report(absl::StrFormat("ListJobs %s, model fg_b, first 100", as),
           Walk(100,
                Paged<v1::ListJobsRequest, v1::ListJobsResponse>(key, model, list_jobs, jobs_of)));
    v1::QueryResultsRequest results;
    if (project[0] == 0) {
      Report(absl::StrFormat("QueryResults %s, all, page 100, first 1000", as),
             Walk(1000, Paged<v1::QueryResultsRequest, v1::QueryResultsResponse>(
                            key, results, query, results_of)));
      v1::QueryResultsRequest by_model;
      by_model.mutable_filter()->add_models("fg_c");
      by_model.mutable_filter()->add_metrics("penalty");
      Report(absl::StrFormat("QueryResults %s, model+metric, first 1000", as),
             Walk(1000, Paged<v1::QueryResultsRequest, v1::QueryResultsResponse>(
                            key, by_model, query, results_of)));
      v1::QueryAuditLogRequest log;
      Report("QueryAuditLog admin, page 100, all",
             Walk(1000000, Paged<v1::QueryAuditLogRequest, v1::QueryAuditLogResponse>(
                               key, log, audit, [](const v1::QueryAuditLogResponse& r) {
                                 return r.entries_size();
                               })));
    }
  }
  // One job's rows: a finished job of user0 that survived the aging.
  v1::ListJobsRequest recent;
  recent.set_project("user0");
  recent.set_state(v1::JOB_STATE_SUCCEEDED);
  recent.set_page_size(1);
  v1::ListJobsResponse newest;
  CheckRpc(stub.ListJobs(Context(kUserKey).get(), recent, &newest), "ListJobs");
  if (newest.jobs_size() > 0) {
    v1::QueryResultsRequest by_job;
    by_job.mutable_filter()->add_job_ids(newest.jobs(0).id());
    Report("QueryResults user0, one job, x100",
           Repeat<v1::QueryResultsRequest, v1::QueryResultsResponse>(100, kUserKey, by_job, query,
                                                                     results_of));
  }
  Report("ListApiKeys admin, x100",
         Repeat<v1::ListApiKeysRequest, v1::ListApiKeysResponse>(
             100, kAdminKey, {}, [&](auto&&... a) { return stub.ListApiKeys(a...); },
             [](const v1::ListApiKeysResponse& r) { return r.keys_size(); }));
  for (const auto& [who, key] : {std::pair{"admin", kAdminKey}, std::pair{"user0", kUserKey}}) {
    Report(absl::StrFormat("ListProjects %s, x100", who),
           Repeat<v1::ListProjectsRequest, v1::ListProjectsResponse>(
               100, key, {}, [&](auto&&... a) { return stub.ListProjects(a...); },
               [](const v1::ListProjectsResponse& r) { return r.projects_size(); }));
  }
  v1::ListWebhooksRequest hooks;
  hooks.set_project("lab0");
  Report("ListWebhooks user0 in lab0, x100",
         Repeat<v1::ListWebhooksRequest, v1::ListWebhooksResponse>(
             100, kUserKey, hooks, [&](auto&&... a) { return stub.ListWebhooks(a...); },
             [](const v1::ListWebhooksResponse& r) { return r.webhooks_size(); }));
}

int Main(int argc, char** argv) {
  std::string dir;
  int64_t jobs = 100000, datasets = 100000;
  int purge_days = 330;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* name) -> const char* {
      const std::string prefix = absl::StrCat("--", name, "=");
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("dir")) {
      dir = v;
    } else if (const char* v = value("jobs"); v && absl::SimpleAtoi(v, &jobs) && jobs > 0) {
    } else if (const char* v = value("datasets");
               v && absl::SimpleAtoi(v, &datasets) && datasets > 0) {
    } else if (const char* v = value("purge_days");
               v && absl::SimpleAtoi(v, &purge_days) && purge_days > 0) {
    } else if (arg == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: fca_listing_bench [--dir=DIR] [--jobs=N] [--datasets=N] "
                   "[--purge_days=D] [--keep]\n");
      return 2;
    }
  }
  const bool own_dir = dir.empty();
  if (own_dir) dir = absl::StrCat("/tmp/fca_listing_bench_", getpid());
  std::filesystem::create_directories(dir + "/models");
  const std::string path = dir + "/fca.db";
  Build(path, jobs, datasets);
  Age(path, purge_days);
  CompareParsers(path);
  {
    ServerOptions options;
    options.db = path;
    options.repository.root = dir + "/models";
    options.auth = true;
    options.threads = 1;
    auto server = Check(Server::BuildAndStart(options), "start server");
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->grpc_port()),
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::AuditService::NewStub(channel);
    MeasureIdle();
    Measure(*stub);
    server->Shutdown();
  }
  std::printf("\n%d of the listings above missed the %.0f ms target (first, deepest or p95)\n",
              missed, kTargetMs);
  if (own_dir && !keep) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) { return fca::Main(argc, argv); }
