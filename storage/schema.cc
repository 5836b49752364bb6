#include "storage/schema.h"

#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace fca::storage {
namespace {

// Migration N takes a database from user_version N-1 to N. Never edit a
// published migration: append a new one and bump kSchemaVersion.
struct Migration {
  int version;
  const char* const* statements;  // null-terminated
};

// Version 1: the initial schema.
//
// Times are unix microseconds. Blobs (datasets, coefficients) are split into
// chunks so that no single value approaches SQLite's blob limit and reads can
// stream; chunks hang off their parent with ON DELETE CASCADE.
const char* const kVersion1[] = {
    R"sql(CREATE TABLE models (
      name TEXT PRIMARY KEY,
      family TEXT NOT NULL,
      weights_sha256 TEXT NOT NULL,
      config_json TEXT NOT NULL,
      num_parameters INTEGER NOT NULL,
      registered_at_us INTEGER NOT NULL))sql",

    // Content-addressed dataset bytes, shared by every dataset row naming
    // the same SHA-256.
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

    // AUTOINCREMENT: job ids are shown to users and must never be reused.
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

    // One row per (job, model, intervention, metric). Every index ends,
    // implicitly, in the rowid, which is the paging order.
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
    // Single-column indexes: an equality on one of them yields rows already
    // in id order, so a page is read without sorting and the scan stops
    // after page_size matches. The three-column index serves the common
    // model x intervention x metric lookup exactly.
    "CREATE INDEX results_by_model ON results(model)",
    "CREATE INDEX results_by_intervention ON results(intervention)",
    "CREATE INDEX results_by_metric ON results(metric)",
    "CREATE INDEX results_by_dataset ON results(dataset_sha256)",
    "CREATE INDEX results_by_time ON results(created_at_us)",
    "CREATE INDEX results_by_model_intervention_metric ON results(model, intervention, metric)",

    // last_used_seq orders eviction; unlike last_used_us it is strictly
    // increasing, so ties and wall-clock steps cannot reorder the LRU.
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
    nullptr,
};

// Version 2: the coefficient cache is per owner (one user's audits never
// reveal, by a hit or an export, what another user audited) and per device
// (kernels differ across devices); its old entries are dropped, which only
// costs cache misses. Uploads are staged chunk by chunk in the store, so the
// server never holds a whole upload in memory.
const char* const kVersion2[] = {
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
    nullptr,
};

// Version 3: a job is split into tasks, one per audited model, which
// workers claim under leases (a worker that dies only loses its lease). Jobs
// still active get their tasks from their spec, so an upgrade in the middle
// of a queue loses nothing; jobs left RUNNING by the old server are queued
// again, as its crash recovery would have done. API keys get the role
// "worker" (fca-worker processes): SQLite cannot alter a CHECK, so the
// table is rebuilt with its rows.
const char* const kVersion3[] = {
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
    // A running job whose cancel was requested gets CANCELLED tasks, so the
    // coordinator ends it CANCELLED; the other active jobs start over.
    R"sql(INSERT INTO tasks (job_id, idx, model, state)
      SELECT jobs.id, models.key, models.value,
             CASE jobs.cancel_requested WHEN 0 THEN 'QUEUED' ELSE 'CANCELLED' END
      FROM jobs, json_each(CASE WHEN json_valid(jobs.spec_json) AND
                                     json_type(jobs.spec_json, '$.models') = 'array'
                                THEN jobs.spec_json ELSE '{"models":[]}' END,
                           '$.models') AS models
      WHERE jobs.state IN ('QUEUED', 'RUNNING') AND models.type = 'text')sql",
    R"sql(UPDATE jobs SET state = 'QUEUED', started_at_us = 0
      WHERE state = 'RUNNING' AND cancel_requested = 0)sql",
    R"sql(CREATE TABLE api_keys_v3 (
      key_sha256 TEXT PRIMARY KEY,
      user TEXT NOT NULL,
      role TEXT NOT NULL CHECK (role IN ('user', 'admin', 'worker')),
      created_at_us INTEGER NOT NULL))sql",
    R"sql(INSERT INTO api_keys_v3 (key_sha256, user, role, created_at_us)
      SELECT key_sha256, user, role, created_at_us FROM api_keys)sql",
    "DROP TABLE api_keys",
    "ALTER TABLE api_keys_v3 RENAME TO api_keys",
    nullptr,
};

// Version 4: provenance (docs/fca.md "Reproducibility"). A job keeps what
// its spec was resolved to at submission (dataset hashes, server version), a
// task what its worker ran on (host, versions, device, dtype, threads,
// windows), both as JSON the core reads; a result row keeps its calibration
// hash besides its evaluation hash. Older rows get empty values: their
// provenance was never recorded, and nothing is made up for them.
const char* const kVersion4[] = {
    "ALTER TABLE jobs ADD COLUMN provenance_json TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN provenance_json TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE results ADD COLUMN calib_sha256 TEXT NOT NULL DEFAULT ''",
    nullptr,
};

// Version 5: the key lifecycle and the audit log (docs/operator-guide.md
// "API keys" and "Audit log"). A key gets an id (shown in listings instead
// of the key), a prefix of its text (empty for older keys: only their hash
// was kept), who created it, an expiry, a revocation time, its last use
// and client address (written at most once per minute: see
// Store::kApiKeyUseIntervalUs) and the key that replaced it when rotated.
// The table is rebuilt for the id; its rows keep their hash, user, role and
// creation time.
const char* const kVersion5[] = {
    R"sql(CREATE TABLE api_keys_v5 (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      key_sha256 TEXT NOT NULL UNIQUE,
      prefix TEXT NOT NULL DEFAULT '',
      user TEXT NOT NULL,
      role TEXT NOT NULL CHECK (role IN ('user', 'admin', 'worker')),
      created_by TEXT NOT NULL DEFAULT '',
      created_at_us INTEGER NOT NULL,
      expires_at_us INTEGER NOT NULL DEFAULT 0,
      revoked_at_us INTEGER NOT NULL DEFAULT 0,
      last_used_at_us INTEGER NOT NULL DEFAULT 0,
      last_peer TEXT NOT NULL DEFAULT '',
      replaced_by INTEGER NOT NULL DEFAULT 0))sql",
    R"sql(INSERT INTO api_keys_v5 (key_sha256, user, role, created_at_us)
      SELECT key_sha256, user, role, created_at_us FROM api_keys ORDER BY created_at_us)sql",
    "DROP TABLE api_keys",
    "ALTER TABLE api_keys_v5 RENAME TO api_keys",
    "CREATE INDEX api_keys_by_user ON api_keys(user)",
    // One row per state-changing call, refused authentication (rate
    // limited) and server start or stop. AUTOINCREMENT: ids are the paging
    // order and are never reused after a purge.
    R"sql(CREATE TABLE audit_log (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      at_us INTEGER NOT NULL,
      user TEXT NOT NULL,
      key_id INTEGER NOT NULL,
      peer TEXT NOT NULL,
      action TEXT NOT NULL,
      object_kind TEXT NOT NULL,
      object_id TEXT NOT NULL,
      outcome TEXT NOT NULL,
      detail TEXT NOT NULL))sql",
    "CREATE INDEX audit_log_by_time ON audit_log(at_us)",
    "CREATE INDEX audit_log_by_user ON audit_log(user)",
    "CREATE INDEX audit_log_by_action ON audit_log(action)",
    nullptr,
};

// Version 6: webhooks (issue 23). A project's webhooks, and per job end
// one delivery to each of them with its attempts: persisted, so a restarted
// server resumes the pending ones. A delivery outlives its job (it records
// what was sent) but not its webhook.
const char* const kVersion6[] = {
    R"sql(CREATE TABLE webhooks (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      project TEXT NOT NULL,
      url TEXT NOT NULL,
      secret TEXT NOT NULL,
      created_by TEXT NOT NULL,
      created_at_us INTEGER NOT NULL))sql",
    "CREATE INDEX webhooks_by_project ON webhooks(project)",
    R"sql(CREATE TABLE webhook_deliveries (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
      job_id INTEGER NOT NULL,
      job_state TEXT NOT NULL,
      payload TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED')),
      attempts INTEGER NOT NULL DEFAULT 0,
      next_attempt_us INTEGER NOT NULL,
      created_at_us INTEGER NOT NULL,
      UNIQUE (webhook_id, job_id)))sql",
    "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_attempt_us)",
    R"sql(CREATE TABLE webhook_attempts (
      delivery_id INTEGER NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
      attempt INTEGER NOT NULL,
      at_us INTEGER NOT NULL,
      http_status INTEGER NOT NULL,
      error TEXT NOT NULL,
      next_attempt_us INTEGER NOT NULL,
      PRIMARY KEY (delivery_id, attempt)))sql",
    nullptr,
};

// Version 7: projects (docs/user-guide.md "Projects"). Jobs and datasets
// belong to a project; a dataset's name is unique within its project, so the
// datasets table is rebuilt (SQLite cannot alter a UNIQUE constraint; its
// AUTOINCREMENT counter is carried over). Every user seen so far (an owner
// of a job, a dataset or an upload, or an API key's user) gets a personal
// project named like them, which they own, and everything they own goes
// there. The coefficient cache, per owner until now, is per project: its
// owners' names are their personal projects', so entries keep their hits.
const char* const kVersion7[] = {
    R"sql(CREATE TABLE projects (
      name TEXT PRIMARY KEY,
      personal INTEGER NOT NULL DEFAULT 0,
      created_by TEXT NOT NULL,
      created_at_us INTEGER NOT NULL))sql",
    R"sql(CREATE TABLE project_members (
      project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
      user TEXT NOT NULL,
      role TEXT NOT NULL CHECK (role IN ('reader', 'writer', 'owner')),
      added_at_us INTEGER NOT NULL,
      PRIMARY KEY (project, user)))sql",
    "CREATE INDEX project_members_by_user ON project_members(user)",
    R"sql(INSERT OR IGNORE INTO projects (name, personal, created_by, created_at_us)
      SELECT owner, 1, owner, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
      FROM (SELECT owner FROM jobs UNION SELECT owner FROM datasets
            UNION SELECT owner FROM uploads
            UNION SELECT user FROM api_keys WHERE role != 'worker'))sql",
    R"sql(INSERT INTO project_members (project, user, role, added_at_us)
      SELECT name, name, 'owner', created_at_us FROM projects)sql",
    "ALTER TABLE jobs ADD COLUMN project TEXT NOT NULL DEFAULT ''",
    "UPDATE jobs SET project = owner",
    "CREATE INDEX jobs_by_project_state ON jobs(project, state)",
    R"sql(CREATE TABLE datasets_v5 (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      name TEXT NOT NULL,
      kind TEXT NOT NULL CHECK (kind IN ('text', 'tokens')),
      owner TEXT NOT NULL,
      project TEXT NOT NULL,
      sha256 TEXT NOT NULL REFERENCES dataset_blobs(sha256),
      created_at_us INTEGER NOT NULL,
      UNIQUE (project, name)))sql",
    R"sql(INSERT INTO datasets_v5 (id, name, kind, owner, project, sha256, created_at_us)
      SELECT id, name, kind, owner, owner, sha256, created_at_us FROM datasets)sql",
    R"sql(INSERT INTO sqlite_sequence (name, seq)
      SELECT 'datasets_v5', seq FROM sqlite_sequence WHERE name = 'datasets' AND
          NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'datasets_v5'))sql",
    R"sql(UPDATE sqlite_sequence SET seq = MAX(seq, COALESCE(
          (SELECT seq FROM sqlite_sequence WHERE name = 'datasets'), 0))
      WHERE name = 'datasets_v5')sql",
    "DROP TABLE datasets",
    "ALTER TABLE datasets_v5 RENAME TO datasets",
    "CREATE INDEX datasets_by_sha256 ON datasets(sha256)",
    "CREATE INDEX datasets_by_owner ON datasets(owner)",
    "CREATE INDEX datasets_by_project_sha256 ON datasets(project, sha256)",
    "ALTER TABLE uploads ADD COLUMN project TEXT NOT NULL DEFAULT ''",
    "UPDATE uploads SET project = owner",
    "ALTER TABLE coeff_cache RENAME COLUMN owner TO project",
    nullptr,
};

// Version 8: retention (docs/operator-guide.md "Retention"). A dataset
// remembers when a submitted job last named it (an unused dataset expires
// that long after); a project may override the server's retention days
// (NULL: the server's default; 0: forever), and the rule goes with the
// project. Indexes let the purge find the oldest finished jobs and least
// recently used datasets without a scan, and a project's jobs and datasets
// be paged newest first without a sort. The file itself switched to
// incremental vacuum at open (store.cc, EnableIncrementalVacuum).
const char* const kVersion8[] = {
    "ALTER TABLE datasets ADD COLUMN last_used_us INTEGER NOT NULL DEFAULT 0",
    "UPDATE datasets SET last_used_us = created_at_us",
    "CREATE INDEX datasets_by_last_use ON datasets(last_used_us)",
    "CREATE INDEX datasets_by_project ON datasets(project)",
    "CREATE INDEX jobs_by_finished ON jobs(finished_at_us)",
    "CREATE INDEX jobs_by_project ON jobs(project)",
    R"sql(CREATE TABLE project_retention (
      project TEXT PRIMARY KEY REFERENCES projects(name) ON DELETE CASCADE,
      keep_jobs_days INTEGER,
      keep_unused_datasets_days INTEGER,
      updated_at_us INTEGER NOT NULL,
      updated_by TEXT NOT NULL))sql",
    nullptr,
};

// Version 9: job_models, the models a job's spec names (its `models` and
// its `dense_twin`, text values only), so ListJobs' model filter and its
// count are index lookups instead of parsing every job's spec (store_jobs.cc
// fills it at CreateJob the same way).
const char* const kVersion9[] = {
    R"sql(CREATE TABLE job_models (
      model TEXT NOT NULL,
      job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
      PRIMARY KEY (model, job_id)) WITHOUT ROWID)sql",
    "CREATE INDEX job_models_by_job ON job_models(job_id)",
    R"sql(INSERT INTO job_models (model, job_id)
      SELECT m.value, jobs.id FROM jobs, json_each(CASE WHEN json_valid(jobs.spec_json) AND
          json_type(jobs.spec_json, '$.models') = 'array' THEN jobs.spec_json
          ELSE '{"models":[]}' END, '$.models') AS m WHERE m.type = 'text'
      UNION
      SELECT json_extract(spec_json, '$.dense_twin'), id FROM jobs
      WHERE json_valid(spec_json) AND json_type(spec_json, '$.dense_twin') = 'text')sql",
    nullptr,
};

// Version 10: jobs.end_unobserved, 1 while a job's end still waits for its
// observer's writes (webhook deliveries) after the enqueue that ended it
// failed (Store::MarkEndUnobserved); the coordinator's sweep retries them.
const char* const kVersion10[] = {
    "ALTER TABLE jobs ADD COLUMN end_unobserved INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX jobs_end_unobserved ON jobs(id) WHERE end_unobserved = 1",
    nullptr,
};

// Version 11: servers before it left a deleted project's webhooks behind,
// and a project created later under that name inherited them (their URLs and
// secrets). Those orphans go, with their deliveries (ON DELETE CASCADE). A
// webhook its creator added to their own personal project before schema 7
// stays: that project is theirs again when it is made.
const char* const kVersion11[] = {
    R"sql(DELETE FROM webhooks WHERE project != created_by AND
      NOT EXISTS (SELECT 1 FROM projects p WHERE p.name = webhooks.project))sql",
    nullptr,
};

const Migration kMigrations[] = {
    {1, kVersion1}, {2, kVersion2},   {3, kVersion3},   {4, kVersion4},
    {5, kVersion5}, {6, kVersion6},   {7, kVersion7},   {8, kVersion8},
    {9, kVersion9}, {10, kVersion10}, {11, kVersion11},
};

absl::StatusOr<int> ReadUserVersion(const Database& db) {
  FCA_ASSIGN_OR_RETURN(const std::string text,
                       db.QueryText("PRAGMA user_version", "read schema version"));
  return std::atoi(text.c_str());
}

absl::Status Apply(Database& db, const Migration& migration) {
  return db.Transaction([&]() -> absl::Status {
    // Read under the write lock: another process may have migrated already.
    FCA_ASSIGN_OR_RETURN(const int current, ReadUserVersion(db));
    if (current >= migration.version) return absl::OkStatus();
    for (const char* const* sql = migration.statements; *sql != nullptr; ++sql) {
      FCA_RETURN_IF_ERROR(db.Execute(*sql, "migrate schema"));
    }
    // PRAGMA takes no bound parameters; the number is this file's constant.
    return db.Execute(absl::StrFormat("PRAGMA user_version = %d", migration.version),
                      "write schema version");
  });
}

}  // namespace

absl::Status MigrateSchema(Database& db) {
  FCA_ASSIGN_OR_RETURN(const int current, ReadUserVersion(db));
  if (current > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("storage: database schema version %d is newer than this server "
                        "supports (%d); upgrade the server",
                        current, kSchemaVersion));
  }
  for (const Migration& migration : kMigrations) {
    if (migration.version <= current) continue;
    FCA_RETURN_IF_ERROR(Apply(db, migration));
  }
  // Re-check: a newer server may have migrated the file concurrently.
  FCA_ASSIGN_OR_RETURN(const int final_version, ReadUserVersion(db));
  if (final_version != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "storage: database schema version %d, expected %d", final_version, kSchemaVersion));
  }
  return absl::OkStatus();
}

}  // namespace fca::storage
