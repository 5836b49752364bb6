// Long file: one test per schema version, each from a file of the old schema.
// Migrations of old databases: a schema-version-2 one (jobs without tasks)
// to version 3, where active jobs get one QUEUED task per model of their
// spec, and a version-3 one to version 4 (provenance).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

// Schema versions 1 and 2 as published in storage/schema.cc (migrations are
// never edited, so this copy stays exact).
const char* const kVersion1And2[] = {
    R"sql(CREATE TABLE models (
      name TEXT PRIMARY KEY,
      family TEXT NOT NULL,
      weights_sha256 TEXT NOT NULL,
      config_json TEXT NOT NULL,
      num_parameters INTEGER NOT NULL,
      registered_at_us INTEGER NOT NULL))sql",
    R"sql(CREATE TABLE dataset_blobs (
      sha256 TEXT PRIMARY KEY,
      size_bytes INTEGER NOT NULL,
      num_chunks INTEGER NOT NULL))sql",
    R"sql(CREATE TABLE dataset_chunks (
      sha256 TEXT NOT NULL REFERENCES dataset_blobs(sha256) ON DELETE CASCADE,
      idx INTEGER NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY (sha256, idx)))sql",
    R"sql(CREATE TABLE datasets (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      name TEXT NOT NULL,
      kind TEXT NOT NULL CHECK (kind IN ('text', 'tokens')),
      owner TEXT NOT NULL,
      sha256 TEXT NOT NULL REFERENCES dataset_blobs(sha256),
      created_at_us INTEGER NOT NULL,
      UNIQUE (owner, name)))sql",
    "CREATE INDEX datasets_by_sha256 ON datasets(sha256)",
    R"sql(CREATE TABLE jobs (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      owner TEXT NOT NULL,
      spec_json TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN
          ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
      error TEXT NOT NULL DEFAULT '',
      created_at_us INTEGER NOT NULL,
      started_at_us INTEGER NOT NULL DEFAULT 0,
      finished_at_us INTEGER NOT NULL DEFAULT 0,
      attempts INTEGER NOT NULL DEFAULT 0,
      cancel_requested INTEGER NOT NULL DEFAULT 0))sql",
    "CREATE INDEX jobs_by_state ON jobs(state)",
    "CREATE INDEX jobs_by_owner_state ON jobs(owner, state)",
    R"sql(CREATE TABLE job_events (
      job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
      seq INTEGER NOT NULL,
      payload BLOB NOT NULL,
      created_at_us INTEGER NOT NULL,
      PRIMARY KEY (job_id, seq)))sql",
    R"sql(CREATE TABLE results (
      id INTEGER PRIMARY KEY,
      job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
      model TEXT NOT NULL,
      weights_sha256 TEXT NOT NULL,
      dataset_sha256 TEXT NOT NULL,
      intervention TEXT NOT NULL,
      metric TEXT NOT NULL,
      value REAL,
      defined INTEGER NOT NULL,
      ci_low REAL,
      ci_high REAL,
      n INTEGER NOT NULL,
      created_at_us INTEGER NOT NULL,
      UNIQUE (job_id, model, intervention, metric)))sql",
    "CREATE INDEX results_by_model ON results(model)",
    "CREATE INDEX results_by_intervention ON results(intervention)",
    "CREATE INDEX results_by_metric ON results(metric)",
    "CREATE INDEX results_by_dataset ON results(dataset_sha256)",
    "CREATE INDEX results_by_time ON results(created_at_us)",
    ("CREATE INDEX results_by_model_intervention_metric "
     "ON results(model, intervention, metric)"),
    R"sql(CREATE TABLE coeff_cache (
      id INTEGER PRIMARY KEY,
      weights_sha256 TEXT NOT NULL,
      window_hash TEXT NOT NULL,
      dtype TEXT NOT NULL,
      meta BLOB NOT NULL,
      blob_bytes INTEGER NOT NULL,
      size_bytes INTEGER NOT NULL,
      num_chunks INTEGER NOT NULL,
      created_at_us INTEGER NOT NULL,
      last_used_us INTEGER NOT NULL,
      last_used_seq INTEGER NOT NULL,
      UNIQUE (weights_sha256, window_hash, dtype)))sql",
    "CREATE INDEX coeff_cache_by_use ON coeff_cache(last_used_seq)",
    R"sql(CREATE TABLE coeff_chunks (
      entry_id INTEGER NOT NULL REFERENCES coeff_cache(id) ON DELETE CASCADE,
      idx INTEGER NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY (entry_id, idx)))sql",
    R"sql(CREATE TABLE api_keys (
      key_sha256 TEXT PRIMARY KEY,
      user TEXT NOT NULL,
      role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
      created_at_us INTEGER NOT NULL))sql",
    "PRAGMA user_version = 1",
    // Version 2.
    "DROP TABLE coeff_chunks",
    "DROP TABLE coeff_cache",
    R"sql(CREATE TABLE coeff_cache (
      id INTEGER PRIMARY KEY,
      owner TEXT NOT NULL,
      weights_sha256 TEXT NOT NULL,
      window_hash TEXT NOT NULL,
      dtype TEXT NOT NULL,
      device TEXT NOT NULL,
      meta BLOB NOT NULL,
      blob_bytes INTEGER NOT NULL,
      size_bytes INTEGER NOT NULL,
      num_chunks INTEGER NOT NULL,
      created_at_us INTEGER NOT NULL,
      last_used_us INTEGER NOT NULL,
      last_used_seq INTEGER NOT NULL,
      UNIQUE (owner, weights_sha256, window_hash, dtype, device)))sql",
    "CREATE INDEX coeff_cache_by_use ON coeff_cache(last_used_seq)",
    R"sql(CREATE TABLE coeff_chunks (
      entry_id INTEGER NOT NULL REFERENCES coeff_cache(id) ON DELETE CASCADE,
      idx INTEGER NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY (entry_id, idx)))sql",
    R"sql(CREATE TABLE uploads (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      owner TEXT NOT NULL,
      size_bytes INTEGER NOT NULL DEFAULT 0,
      num_chunks INTEGER NOT NULL DEFAULT 0,
      created_at_us INTEGER NOT NULL))sql",
    R"sql(CREATE TABLE upload_chunks (
      upload_id INTEGER NOT NULL REFERENCES uploads(id) ON DELETE CASCADE,
      idx INTEGER NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY (upload_id, idx)))sql",
    "CREATE INDEX datasets_by_owner ON datasets(owner)",
    "PRAGMA user_version = 2",
};

struct OldJob {
  std::string spec_json;
  std::string state;
  int64_t started_at_us = 0;
  int64_t finished_at_us = 0;
  int attempts = 0;
  bool cancel_requested = false;
};

class StoreMigrationTest : public ::testing::Test {
 protected:
  // Writes a version-2 database holding `jobs` (ids 1, 2, ...), and one
  // event and one result row of job 1.
  void WriteVersion2(const std::vector<OldJob>& jobs) {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    ASSERT_OK((*db)->Execute("PRAGMA page_size = 16384", "test"));
    ASSERT_OK((*db)->Transaction([&]() -> absl::Status {
      for (const char* sql : kVersion1And2) {
        absl::Status status = (*db)->Execute(sql, "test");
        if (!status.ok()) return status;
      }
      int64_t id = 0;
      for (const OldJob& job : jobs) {
        absl::StatusOr<Statement> insert = (*db)->Prepare(
            "INSERT INTO jobs (id, owner, spec_json, state, created_at_us, started_at_us, "
            "finished_at_us, attempts, cancel_requested) "
            "VALUES (?1, 'ann', ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            "test");
        if (!insert.ok()) return insert.status();
        insert->BindInt(1, ++id);
        insert->BindText(2, job.spec_json);
        insert->BindText(3, job.state);
        insert->BindInt(4, 100 * id);
        insert->BindInt(5, job.started_at_us);
        insert->BindInt(6, job.finished_at_us);
        insert->BindInt(7, job.attempts);
        insert->BindInt(8, job.cancel_requested ? 1 : 0);
        absl::Status status = insert->Run();
        if (!status.ok()) return status;
      }
      if (!jobs.empty()) {
        absl::Status status = (*db)->Execute(
            "INSERT INTO job_events (job_id, seq, payload, created_at_us) VALUES (1, 1, 'q', 1)",
            "test");
        if (!status.ok()) return status;
        status = (*db)->Execute(
            "INSERT INTO results (job_id, model, weights_sha256, dataset_sha256, intervention, "
            "metric, value, defined, n, created_at_us) "
            "VALUES (1, 'a', 'w', 'd', 'zero', 'nll', 1.5, 1, 4, 1)",
            "test");
        if (!status.ok()) return status;
      }
      return absl::OkStatus();
    }));
    ASSERT_OK_AND_ASSIGN(const std::string version,
                         (*db)->QueryText("PRAGMA user_version", "test"));
    ASSERT_EQ(version, "2");
  }

  StoreOptions Options() const {
    StoreOptions options;
    options.path = path_;
    options.now_us = [] { return int64_t{5'000'000}; };
    return options;
  }

  testing_util::TempDbPath tmp_;
  std::string path_ = tmp_.path();  // the database WriteVersion2 and Options() use
};

std::vector<std::string> Models(const std::vector<TaskRecord>& tasks) {
  std::vector<std::string> models;
  for (const TaskRecord& t : tasks) models.push_back(t.model);
  return models;
}

TEST_F(StoreMigrationTest, ActiveVersion2JobsGetTasksFromTheirSpec) {
  OldJob queued{R"({"models":["a","b"]})", "QUEUED"};
  OldJob running{R"({"models":["c"]})", "RUNNING", 400, 0, 1};
  OldJob succeeded{R"({"models":["d"]})", "SUCCEEDED", 300, 350, 1};
  OldJob malformed{"{", "QUEUED"};
  OldJob failed{R"({"models":["e"]})", "FAILED", 300, 350, 1};
  WriteVersion2({queued, running, succeeded, malformed, failed});

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  {
    auto db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    ASSERT_OK_AND_ASSIGN(const std::string version,
                         (*db)->QueryText("PRAGMA user_version", "test"));
    EXPECT_EQ(version, std::to_string(kSchemaVersion));
  }

  ASSERT_OK_AND_ASSIGN(const JobRecord j1, store->GetJob(1));
  EXPECT_EQ(j1.state, JobState::kQueued);
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> t1, store->ListTasks(1));
  ASSERT_EQ(t1.size(), 2u);
  EXPECT_EQ(Models(t1), (std::vector<std::string>{"a", "b"}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t1[i].index, i);
    EXPECT_EQ(t1[i].job_id, 1);
    EXPECT_EQ(t1[i].state, JobState::kQueued);
    EXPECT_EQ(t1[i].attempts, 0);
    EXPECT_EQ(t1[i].lease_seq, 0);
    EXPECT_EQ(t1[i].worker, "");
    EXPECT_EQ(t1[i].executor_ref, "");
  }

  ASSERT_OK_AND_ASSIGN(const JobRecord j2, store->GetJob(2));
  EXPECT_EQ(j2.state, JobState::kQueued);  // the old server's run was lost
  EXPECT_EQ(j2.started_at_us, 0);
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> t2, store->ListTasks(2));
  ASSERT_EQ(t2.size(), 1u);
  EXPECT_EQ(t2[0].model, "c");
  EXPECT_EQ(t2[0].index, 0);
  EXPECT_EQ(t2[0].state, JobState::kQueued);

  ASSERT_OK_AND_ASSIGN(const JobRecord j3, store->GetJob(3));
  EXPECT_EQ(j3.state, JobState::kSucceeded);
  EXPECT_EQ(j3.finished_at_us, 350);
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> t3, store->ListTasks(3));
  EXPECT_TRUE(t3.empty());
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> t5, store->ListTasks(5));
  EXPECT_TRUE(t5.empty());

  ASSERT_OK_AND_ASSIGN(const JobRecord j4, store->GetJob(4));
  EXPECT_EQ(j4.state, JobState::kQueued);
  EXPECT_EQ(j4.spec_json, "{");
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> t4, store->ListTasks(4));
  EXPECT_TRUE(t4.empty());

  // Old rows are kept.
  ASSERT_OK_AND_ASSIGN(const auto events, store->ListJobEvents(1, 0, 10));
  EXPECT_EQ(events.size(), 1u);
  ASSERT_OK_AND_ASSIGN(const ResultPage results, store->QueryResults({}, 10, ""));
  EXPECT_EQ(results.rows.size(), 1u);
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");

  // The migrated queue runs: a, b, then c; the malformed job, which has
  // nothing to run, is ended by the coordinator's settling.
  std::vector<std::string> claimed;
  for (int i = 0; i < 10; ++i) {
    ClaimRequest request;
    request.worker = "w";
    request.lease_us = 1000;
    ASSERT_OK_AND_ASSIGN(const std::optional<TaskClaim> claim, store->ClaimTask(request));
    if (!claim) break;
    claimed.push_back(claim->task.model);
  }
  EXPECT_EQ(claimed, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store->UnsettledJobs());
  EXPECT_EQ(unsettled, std::vector<int64_t>{4});
  ASSERT_OK_AND_ASSIGN(const auto settled, store->SettleJob(4, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kFailed);

  // Ids go on after the old ones; reopening migrates nothing twice.
  ASSERT_OK_AND_ASSIGN(const JobRecord fresh, store->CreateJob("bob", "{}", {"f"}));
  EXPECT_GT(fresh.id, 5);
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> again, store->ListTasks(1));
  EXPECT_EQ(again.size(), 2u);
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> queued_now,
                       store->ListTasksInState(JobState::kQueued, 100));
  EXPECT_EQ(Models(queued_now), std::vector<std::string>{"f"});
}

// BUG: a job RUNNING with a cancel request when the old server stopped is
// put back to QUEUED with QUEUED tasks, which no claim takes (its cancel
// was requested) and UnsettledJobs does not list (a task is QUEUED): the
// job stays QUEUED forever (and counts against its owner's queue limit).
// The old server's recovery cancelled such jobs.
TEST_F(StoreMigrationTest, ARunningJobWithACancelRequestIsNotStuck) {
  OldJob cancelling{R"({"models":["x","y"]})", "RUNNING", 400, 0, 1, true};
  WriteVersion2({cancelling});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ClaimRequest request;
  request.worker = "w";
  request.lease_us = 1000;
  ASSERT_OK_AND_ASSIGN(const std::optional<TaskClaim> claim, store->ClaimTask(request));
  EXPECT_FALSE(claim.has_value());  // its cancel was requested
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store->GetJob(1));
  if (!IsTerminal(job.state)) {
    ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store->UnsettledJobs());
    EXPECT_EQ(unsettled, std::vector<int64_t>{1})
        << "job 1 is " << JobStateName(job.state) << " and nothing will ever end it";
    ASSERT_OK_AND_ASSIGN(const auto settled, store->SettleJob(1, nullptr));
    ASSERT_TRUE(settled.has_value());
    EXPECT_EQ(settled->job.state, JobState::kCancelled);
  } else {
    EXPECT_EQ(job.state, JobState::kCancelled);
  }
}

// Specs that are JSON but have no list of model names: the job gets no
// tasks (it is then failed as having nothing to run), and the migration,
// which would otherwise keep the server from starting, goes through.
TEST_F(StoreMigrationTest, SpecsWithoutAModelListDoNotBreakTheMigration) {
  for (const std::string spec :
       {R"({})", R"([])", R"("models")", R"({"models":[]})", R"({"models":"x"})", R"({"models":7})",
        R"({"models":[null]})", R"({"models":{"k":"v"}})"}) {
    SCOPED_TRACE(spec);
    testing_util::TempDbPath path;
    path_ = path.path();
    WriteVersion2({{spec, "QUEUED"}, {R"({"models":["ok"]})", "QUEUED"}});
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(Options());
    EXPECT_TRUE(store.ok()) << "the server cannot start: " << store.status();
    if (!store.ok()) continue;
    absl::StatusOr<std::vector<TaskRecord>> none = (*store)->ListTasks(1);
    ASSERT_OK(none);
    EXPECT_TRUE(none->empty()) << none->size() << " task(s), the first " << (*none)[0].model;
    absl::StatusOr<std::vector<TaskRecord>> ok = (*store)->ListTasks(2);
    ASSERT_OK(ok);
    EXPECT_EQ(Models(*ok), std::vector<std::string>{"ok"});
  }
}

// Schema version 3's additions as published in storage/schema.cc (its data
// statements left out: the database below has no active job to give tasks).
const char* const kVersion3Tables[] = {
    R"sql(CREATE TABLE tasks (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
      idx INTEGER NOT NULL,
      model TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN
          ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
      attempts INTEGER NOT NULL DEFAULT 0,
      lease_seq INTEGER NOT NULL DEFAULT 0,
      worker TEXT NOT NULL DEFAULT '',
      lease_expires_us INTEGER NOT NULL DEFAULT 0,
      error TEXT NOT NULL DEFAULT '',
      executor_ref TEXT NOT NULL DEFAULT '',
      started_at_us INTEGER NOT NULL DEFAULT 0,
      finished_at_us INTEGER NOT NULL DEFAULT 0,
      UNIQUE (job_id, idx)))sql",
    "CREATE INDEX tasks_by_state ON tasks(state, job_id, idx)",
    R"sql(INSERT INTO tasks (job_id, idx, model, state, attempts, lease_seq, worker,
                         started_at_us, finished_at_us)
      VALUES (1, 0, 'a', 'SUCCEEDED', 1, 1, 'local/0', 400, 450))sql",
    "PRAGMA user_version = 3",
};

// Version 3 -> 4 (provenance): old jobs, tasks and rows are kept with empty
// provenance (none was recorded, none is made up); new ones keep theirs.
TEST_F(StoreMigrationTest, Version3RowsKeepTheirDataAndGetEmptyProvenance) {
  WriteVersion2({{R"({"models":["a"]})", "SUCCEEDED", 400, 450, 1}});
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    for (const char* sql : kVersion3Tables) ASSERT_OK((*db)->Execute(sql, "test"));
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const JobRecord old_job, store->GetJob(1));
  EXPECT_EQ(old_job.state, JobState::kSucceeded);
  EXPECT_EQ(old_job.provenance_json, "");
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> old_tasks, store->ListTasks(1));
  ASSERT_EQ(old_tasks.size(), 1u);
  EXPECT_EQ(old_tasks[0].worker, "local/0");
  EXPECT_EQ(old_tasks[0].finished_at_us, 450);
  EXPECT_EQ(old_tasks[0].provenance_json, "");
  ASSERT_OK_AND_ASSIGN(const ResultPage old_rows, store->QueryResults({}, 10, ""));
  ASSERT_EQ(old_rows.rows.size(), 1u);
  EXPECT_EQ(old_rows.rows[0].dataset_sha256, "d");
  EXPECT_EQ(old_rows.rows[0].calib_sha256, "");
  EXPECT_EQ(old_rows.rows[0].value, 1.5);

  // New jobs, tasks and rows keep their provenance.
  ASSERT_OK_AND_ASSIGN(const JobRecord job,
                       store->CreateJob("bob", "{}", {"m"}, R"({"eval_sha256":"e"})"));
  EXPECT_EQ(job.provenance_json, R"({"eval_sha256":"e"})");
  ClaimRequest request;
  request.worker = "w";
  request.lease_us = 1000;
  ASSERT_OK_AND_ASSIGN(const std::optional<TaskClaim> claim, store->ClaimTask(request));
  ASSERT_TRUE(claim.has_value());
  ASSERT_OK_AND_ASSIGN(const TaskRecord done,
                       store->FinishTask(claim->task.id, claim->task.lease_seq,
                                         JobState::kSucceeded, "", R"({"host":"h"})"));
  EXPECT_EQ(done.provenance_json, R"({"host":"h"})");
  ResultRow row;
  row.model = "m";
  row.intervention = "correct";
  row.metric = "nll";
  row.dataset_sha256 = "e";
  row.calib_sha256 = "c";
  ASSERT_OK(store->InsertResults(job.id, {row}).status());
  ResultFilter filter;
  filter.job_id = job.id;
  ASSERT_OK_AND_ASSIGN(const ResultPage rows, store->QueryResults(filter, 10, ""));
  ASSERT_EQ(rows.rows.size(), 1u);
  EXPECT_EQ(rows.rows[0].calib_sha256, "c");

  // Reopening migrates nothing twice.
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const JobRecord again, store->GetJob(job.id));
  EXPECT_EQ(again.provenance_json, R"({"eval_sha256":"e"})");
}

// A task that ends without provenance (an older worker) keeps what it had.
TEST_F(StoreMigrationTest, FinishingWithoutProvenanceKeepsItEmpty) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store->CreateJob("bob", "{}", {"m"}));
  EXPECT_EQ(job.provenance_json, "");
  ClaimRequest request;
  request.worker = "w";
  request.lease_us = 1000;
  ASSERT_OK_AND_ASSIGN(const std::optional<TaskClaim> claim, store->ClaimTask(request));
  ASSERT_TRUE(claim.has_value());
  ASSERT_OK_AND_ASSIGN(
      const TaskRecord done,
      store->FinishTask(claim->task.id, claim->task.lease_seq, JobState::kFailed, "boom"));
  EXPECT_EQ(done.provenance_json, "");
  EXPECT_EQ(done.error, "boom");
}

// Version 4 -> 5 (key lifecycle, audit log): a key stored by an older
// server keeps working, gets an id, no prefix (only its hash was kept) and
// no expiry; the audit log starts empty.
TEST_F(StoreMigrationTest, OlderKeysKeepWorkingAndGetIds) {
  WriteVersion2({});
  const std::string key = "old-key-0123456789abcdef";
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    for (const char* sql : kVersion3Tables) ASSERT_OK((*db)->Execute(sql, "test"));
    absl::StatusOr<Statement> insert = (*db)->Prepare(
        "INSERT INTO api_keys (key_sha256, user, role, created_at_us) VALUES (?1, 'ann', "
        "'admin', 77)",
        "test");
    ASSERT_OK(insert);
    insert->BindText(1, Sha256Hex(key));
    ASSERT_OK(insert->Run());
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const std::optional<ApiKeyInfo> info, store->LookupApiKey(key));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->user, "ann");
  EXPECT_EQ(info->role, "admin");
  EXPECT_EQ(info->state, ApiKeyState::kActive);
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord record, store->GetApiKey(info->id));
  EXPECT_EQ(record.prefix, "");
  EXPECT_EQ(record.created_at_us, 77);
  EXPECT_EQ(record.expires_at_us, 0);
  ASSERT_OK_AND_ASSIGN(const AuditLogPage log, store->QueryAuditLog({}, 0, ""));
  EXPECT_TRUE(log.rows.empty());
}

// Version 7 (projects), from a file written with the old schema: every user
// seen (owners of jobs and datasets, API keys' users) gets a personal project
// they own, and everything they owned goes there; dataset ids go on after
// the old ones; cached coefficients keep their hits under the owner's
// personal project.
TEST_F(StoreMigrationTest, OldObjectsGoToTheirOwnersPersonalProjects) {
  WriteVersion2({{R"({"models":["a"]})", "SUCCEEDED", 300, 350, 1}});  // ann's job 1
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    for (const char* sql : {
             "INSERT INTO dataset_blobs (sha256, size_bytes, num_chunks) VALUES ('s1', 0, 0)",
             "INSERT INTO datasets (id, name, kind, owner, sha256, created_at_us) "
             "VALUES (7, 'eval', 'text', 'ann', 's1', 1)",
             "INSERT INTO datasets (id, name, kind, owner, sha256, created_at_us) "
             "VALUES (9, 'eval', 'text', 'bob', 's1', 2)",
             "INSERT INTO api_keys (key_sha256, user, role, created_at_us) "
             "VALUES ('k1', 'carl', 'user', 1)",
             "INSERT INTO coeff_cache (owner, weights_sha256, window_hash, dtype, device, meta, "
             "blob_bytes, size_bytes, num_chunks, created_at_us, last_used_us, last_used_seq) "
             "VALUES ('ann', 'w', 'h', 'float32', 'cpu', '', 0, 0, 0, 1, 1, 1)",
         }) {
      ASSERT_OK((*db)->Execute(sql, "test"));
    }
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));

  ASSERT_OK_AND_ASSIGN(const JobRecord job, store->GetJob(1));
  EXPECT_EQ(job.owner, "ann");
  EXPECT_EQ(job.project, "ann");
  ASSERT_OK_AND_ASSIGN(const DatasetRecord ann_eval, store->FindDataset("eval", "ann"));
  EXPECT_EQ(ann_eval.id, 7);
  EXPECT_EQ(ann_eval.owner, "ann");
  ASSERT_OK_AND_ASSIGN(const DatasetRecord bob_eval, store->FindDataset("eval", "bob"));
  EXPECT_EQ(bob_eval.id, 9);
  EXPECT_EQ(bob_eval.project, "bob");
  for (const std::string user : {"ann", "bob", "carl"}) {
    ASSERT_OK_AND_ASSIGN(const ProjectRecord project, store->GetProject(user));
    EXPECT_TRUE(project.personal) << user;
    ASSERT_OK_AND_ASSIGN(const auto role, store->MemberRole(user, user));
    EXPECT_EQ(role, std::optional<std::string>("owner")) << user;
  }
  ASSERT_OK_AND_ASSIGN(const auto all, store->ListProjects(std::nullopt));
  EXPECT_EQ(all.size(), 3u);
  ASSERT_OK_AND_ASSIGN(const auto entry,
                       store->GetCoefficients({"ann", "w", "h", "float32", "cpu"}));
  EXPECT_TRUE(entry.has_value());
  // Dataset ids go on after the highest ever given; names are per project.
  ASSERT_OK_AND_ASSIGN(const DatasetRecord fresh,
                       store->PutDataset("eval", "text", "bob", "new", "ann-lab"));
  EXPECT_GT(fresh.id, 9);
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");

  store.reset();  // reopening migrates nothing twice
  ASSERT_OK_AND_ASSIGN(store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const auto again, store->ListMembers("ann"));
  EXPECT_EQ(again.size(), 1u);
}

// Version 8 (retention), from a file written with the old schema (and
// without incremental vacuum): a dataset was last used when it was
// uploaded, no project has a rule of its own, a rule can be set, and the
// file was rewritten once for incremental vacuum.
TEST_F(StoreMigrationTest, OldDatasetsWereLastUsedAtTheirUpload) {
  WriteVersion2({{R"({"models":["a"]})", "SUCCEEDED", 300, 350, 1}});
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    ASSERT_OK_AND_ASSIGN(const std::string vacuum, (*db)->QueryText("PRAGMA auto_vacuum", "test"));
    EXPECT_EQ(vacuum, "0");  // as files of older servers
    for (const char* sql : {
             "INSERT INTO dataset_blobs (sha256, size_bytes, num_chunks) VALUES ('s1', 0, 0)",
             "INSERT INTO datasets (id, name, kind, owner, sha256, created_at_us) "
             "VALUES (7, 'eval', 'text', 'ann', 's1', 1234)",
         }) {
      ASSERT_OK((*db)->Execute(sql, "test"));
    }
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ASSERT_OK_AND_ASSIGN(const RetentionRule none, store->GetRetentionRule("ann"));
  EXPECT_FALSE(none.keep_jobs_days.has_value());
  EXPECT_FALSE(none.keep_unused_datasets_days.has_value());
  ASSERT_OK(store->SetRetentionRule({"ann", 3, 4}, "ann"));
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> jobs, store->ExpiredJobs({0, 0}, 10));
  EXPECT_TRUE(jobs.empty());  // 3 days have not passed since 350 us
  store.reset();
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
  ASSERT_OK(db);
  ASSERT_OK_AND_ASSIGN(const std::string used,
                       (*db)->QueryText("SELECT last_used_us FROM datasets WHERE id = 7", "test"));
  EXPECT_EQ(used, "1234");
  ASSERT_OK_AND_ASSIGN(const std::string vacuum, (*db)->QueryText("PRAGMA auto_vacuum", "test"));
  EXPECT_EQ(vacuum, "2");  // INCREMENTAL
  ASSERT_OK_AND_ASSIGN(const std::string version, (*db)->QueryText("PRAGMA user_version", "test"));
  EXPECT_EQ(version, std::to_string(kSchemaVersion));
}

// Version 9's job_models: an old job is found by ListJobs' model filter for
// each model its spec names (and its dense twin), and for no other name.
TEST_F(StoreMigrationTest, OldJobsAreFoundByTheirModels) {
  WriteVersion2({{R"({"models":["a","b"],"dense_twin":"d"})", "SUCCEEDED", 300, 350, 1},
                 {R"({"models":["b"]})", "SUCCEEDED", 400, 450, 1},
                 {"not json", "FAILED", 500, 550, 1}});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  auto ids = [&](const std::string& model) {
    JobFilter filter;
    filter.model = model;
    std::vector<int64_t> out;
    absl::StatusOr<JobPage> page = store->ListJobs(filter, 100, "");
    EXPECT_OK(page);
    if (page.ok()) {
      for (const JobRecord& job : page->jobs) out.push_back(job.id);
    }
    return out;
  };
  EXPECT_EQ(ids("a"), std::vector<int64_t>{1});
  EXPECT_EQ(ids("b"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ids("d"), std::vector<int64_t>{1});
  EXPECT_TRUE(ids("not json").empty());
  ASSERT_OK(store->DeleteJob(1));
  EXPECT_TRUE(ids("a").empty());  // its models go with the job
}

// Version 11: a deleted project's webhooks, left behind by older servers,
// are gone (with their deliveries), so a project created under that name
// later inherits none; a live project's webhooks stay, and so does one its
// creator added to their own personal project before that project exists.
TEST_F(StoreMigrationTest, ADeletedProjectsWebhooksAreGone) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
    ASSERT_OK(store->CreateProject("live", "root", "ann").status());
  }
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path_, 1000);
    ASSERT_OK(db);
    for (const char* sql : {
             "INSERT INTO webhooks (id, project, url, secret, created_by, created_at_us) VALUES "
             "(1, 'gone', 'http://h/old', 's1', 'ann', 1), "
             "(2, 'live', 'http://h/live', 's2', 'ann', 1), "
             "(3, 'cleo', 'http://h/own', 's3', 'cleo', 1)",
             "INSERT INTO webhook_deliveries (webhook_id, job_id, job_state, payload, state, "
             "next_attempt_us, created_at_us) VALUES (1, 9, 'SUCCEEDED', '{}', 'PENDING', 0, 1)",
             "PRAGMA user_version = 10",
         }) {
      ASSERT_OK((*db)->Execute(sql, "test"));
    }
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(Options()));
  ASSERT_OK(store->CreateProject("gone", "root", "bob").status());
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> inherited, store->ListWebhooks("gone"));
  EXPECT_TRUE(inherited.empty());
  ASSERT_OK_AND_ASSIGN(const auto due, store->DueWebhookDeliveries(10, 10));
  EXPECT_TRUE(due.empty());
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> live, store->ListWebhooks("live"));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].id, 2);
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> own, store->ListWebhooks("cleo"));
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].id, 3);
}

}  // namespace
}  // namespace fca::storage
