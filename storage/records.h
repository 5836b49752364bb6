// Plain records stored and returned by fca::storage::Store.
//
// Times are unix microseconds, set by the store from its clock; a time that
// has not happened yet (a job that has not started) is 0.
#ifndef FCA_STORAGE_RECORDS_H_
#define FCA_STORAGE_RECORDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::storage {

// A model the server hosts, keyed by name (its folder in the repository).
struct ModelRecord {
  std::string name;
  std::string family;          // "dense" | "featuregate" | "muddpythia" | ...
  std::string weights_sha256;  // identity of the weights
  std::string config_json;
  int64_t num_parameters = 0;
  // When these weights were first registered under this name (set by the
  // store; kept across re-registrations with the same weights_sha256).
  int64_t registered_at_us = 0;
};

// A named dataset. Its bytes are content-addressed by `sha256` and shared
// with every other dataset of identical content.
struct DatasetRecord {
  int64_t id = 0;
  std::string name;
  std::string kind;  // "text" | "tokens"
  std::string sha256;
  std::string owner;    // who uploaded it
  std::string project;  // its namespace: names are unique per project
  int64_t size_bytes = 0;
  int64_t created_at_us = 0;
};

struct DatasetPage {
  std::vector<DatasetRecord> datasets;
  std::string next_page_token;  // empty on the last page
};

// How long finished jobs and unused datasets are kept, in days; 0 =
// forever. The server's defaults come from its flags.
struct RetentionDays {
  int keep_jobs_days = 0;
  int keep_unused_datasets_days = 0;
};

// When a dataset was last uploaded or named by a submitted job.
struct DatasetUse {
  int64_t id = 0;
  int64_t last_used_us = 0;
};

// A project's own retention (table project_retention); unset fields take
// the server's default.
struct RetentionRule {
  std::string project;
  std::optional<int> keep_jobs_days;
  std::optional<int> keep_unused_datasets_days;
};

// The life of a job: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED,
// and QUEUED -> CANCELLED. A job is RUNNING from its first task's claim until
// Store::SettleJob ends it (its tasks have all ended).
enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };

// "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED".
const char* JobStateName(JobState state);
// Inverse of JobStateName (exact, upper case); INVALID_ARGUMENT otherwise.
[[nodiscard]] absl::StatusOr<JobState> ParseJobState(std::string_view name);
// SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(JobState state);

struct JobRecord {
  int64_t id = 0;
  std::string owner;    // who submitted it
  std::string project;  // where it runs and who sees it
  std::string spec_json;
  std::string error;  // empty unless FAILED (or a reason given at finish)
  JobState state = JobState::kQueued;
  int64_t created_at_us = 0;
  int64_t started_at_us = 0;   // latest claim; 0 while QUEUED
  int64_t finished_at_us = 0;  // 0 until terminal
  int attempts = 0;            // claims so far (restarts after a crash count)
  bool cancel_requested = false;
  // What the spec was resolved to at submission (opaque to the store: the
  // core's JSON); "" for jobs stored before it was kept.
  std::string provenance_json;
};

// One unit of a job's work: the audit of one model (the job's `index`-th),
// run by one worker at a time under a lease. States as for jobs: QUEUED ->
// RUNNING (claimed) -> SUCCEEDED | FAILED | CANCELLED, and back to QUEUED
// when its lease expires or its worker gives it back.
struct TaskRecord {
  int64_t id = 0;
  int64_t job_id = 0;
  int index = 0;  // the model's position in the job's spec
  std::string model;
  JobState state = JobState::kQueued;
  int attempts = 0;  // claims that did not end in a refusal or a drain
  // Increases with every claim and never goes back, so a worker holding an
  // older lease of the task is told it lost it.
  int64_t lease_seq = 0;
  std::string worker;            // holder of the lease ("" when none)
  int64_t lease_expires_us = 0;  // 0 when not RUNNING
  std::string error;             // why it FAILED, or the last lost attempt
  // Where an executor placed it ("slurm:<id>"), "" when no executor did:
  // in-process and remote workers claim only tasks no executor holds.
  std::string executor_ref;
  int64_t started_at_us = 0;
  int64_t finished_at_us = 0;
  // What its worker ran on, recorded when it ended (opaque to the store:
  // the core's JSON); "" until then.
  std::string provenance_json;
};

// A QUEUED or RUNNING task of a QUEUED or RUNNING job, with what the
// queue's view (GetQueue) needs of its job.
struct ActiveTask {
  int64_t job_id = 0;
  std::string job_project;
  std::string job_owner;
  JobState job_state = JobState::kQueued;
  // A cancel was requested: its waiting tasks are never claimed.
  bool cancel_requested = false;
  std::string model;
  JobState state = JobState::kQueued;
  std::string worker;  // the lease holder of a RUNNING task
};

// A claimed task with its job.
struct TaskClaim {
  TaskRecord task;
  JobRecord job;
};

// Every set field must match; unset matches everything. The spec filters
// read the stored spec JSON (AuditSpec field names), so they cost a JSON
// parse per job the other filters leave; listings without them do not.
// A new field also goes into store_jobs.cc's JobWhere and FiltersByModelOnly.
struct JobFilter {
  std::optional<std::string> owner;
  std::optional<std::string> project;
  std::optional<JobState> state;
  // The spec audits this model or names it as its dense twin.
  std::optional<std::string> model;
  // The spec's eval_dataset or calib_dataset, as submitted (a name or
  // "sha256:<hex>").
  std::optional<std::string> dataset;
  std::optional<std::string> label;          // the spec's label, exactly
  std::optional<int64_t> created_after_us;   // inclusive
  std::optional<int64_t> created_before_us;  // exclusive
};

struct JobPage {
  std::vector<JobRecord> jobs;
  std::string next_page_token;  // empty on the last page
};

struct JobEvent {
  int64_t seq = 0;  // 1, 2, 3, ... per job
  std::string payload;
  int64_t created_at_us = 0;
};

// One number of an audit: model x intervention x metric within a job.
struct ResultRow {
  int64_t job_id = 0;
  std::string model;
  std::string weights_sha256;
  std::string dataset_sha256;  // the evaluation dataset
  std::string calib_sha256;    // the calibration dataset ("" in old rows)
  std::string intervention;
  std::string metric;
  double value = 0;  // meaningful when `defined`; NaN round-trips as NaN
  bool defined = true;
  std::optional<double> ci_low;
  std::optional<double> ci_high;
  int64_t n = 0;  // sample count behind the value
  int64_t created_at_us = 0;
};

// Every set field must match; time bounds select
// created_after_us <= created_at_us < created_before_us.
struct ResultFilter {
  std::optional<int64_t> job_id;
  std::optional<std::string> model;
  std::optional<std::string> dataset_sha256;
  std::optional<std::string> intervention;
  std::optional<std::string> metric;
  std::optional<int64_t> created_after_us;
  std::optional<int64_t> created_before_us;
  // Further accepted values of job_id, model, intervention and metric: a
  // column with any accepted value (the optional above and these together)
  // must equal one of them.
  std::vector<int64_t> job_ids;
  std::vector<std::string> models, interventions, metrics;
};

struct ResultPage {
  std::vector<ResultRow> rows;
  std::string next_page_token;  // empty on the last page
};

// Identity of recorded coefficients: the same weights over the same window
// in the same dtype on the same device produce the same coefficients (within
// the replay-fidelity tolerance across batch layouts). Entries belong to the
// project whose audit recorded them: another project's audit neither hits
// nor exports them.
struct CoefficientKey {
  std::string project;
  std::string weights_sha256;
  std::string window_hash;
  std::string dtype;
  std::string device;  // "cpu", "cuda:0", ...
};

struct CoefficientEntry {
  std::string meta;  // caller's description (shapes, site names), opaque here
  std::string blob;
};

// Whether a stored API key is accepted now.
enum class ApiKeyState { kActive, kRevoked, kExpired };

// What authentication needs of a presented key (Store::LookupApiKey).
// A project (docs/user-guide.md "Projects"): jobs and datasets belong to
// one; its members have a role, "reader" < "writer" < "owner".
struct ProjectRecord {
  std::string name;
  bool personal = false;  // a user's own, named like the user
  std::string created_by;
  int64_t created_at_us = 0;
};

struct ProjectMember {
  std::string user;
  std::string role;  // "reader" | "writer" | "owner"
  int64_t added_at_us = 0;
};

// What DeleteProject removed.
struct ProjectDeletion {
  int64_t jobs = 0;
  int64_t datasets = 0;
  int64_t webhooks = 0;  // with their deliveries and attempts
};

struct ApiKeyInfo {
  std::string user;
  std::string role;  // "user" | "admin" | "worker"
  int64_t id = 0;
  ApiKeyState state = ApiKeyState::kActive;
  // Its last use was recorded kApiKeyUseIntervalUs ago or more (or never):
  // the caller should record this one (Store::NoteApiKeyUse).
  bool use_due = false;
};

// An API key as stored: never the key itself, only its SHA-256 and prefix.
struct ApiKeyRecord {
  int64_t id = 0;
  std::string prefix;  // the key's first characters; "" for keys made before schema 5
  std::string user;
  std::string role;
  std::string created_by;  // the creating user, or "fca-server --create_api_key"
  int64_t created_at_us = 0;
  int64_t expires_at_us = 0;                 // 0: never
  int64_t revoked_at_us = 0;                 // 0: not revoked
  int64_t last_used_at_us = 0;               // 0: never; recorded at most once per interval
  std::string last_peer;                     // the client address of that use
  int64_t replaced_by = 0;                   // rotated: the id of the key that replaced it
  ApiKeyState state = ApiKeyState::kActive;  // as of the read
};

// A key to store (Store::CreateApiKey).
struct NewApiKey {
  std::string user;
  std::string role;
  std::string plaintext;      // kept only as its SHA-256 and prefix
  int64_t expires_in_us = 0;  // from now; 0: never
  std::string created_by;
};

// One row of the audit log (Store::AppendAuditLog).
struct AuditLogRow {
  int64_t id = 0;
  int64_t at_us = 0;        // 0 on append: now
  std::string user;         // "" for a refused authentication
  int64_t key_id = 0;       // 0: no stored key (auth off, a key file's key, refused)
  std::string peer;         // the client address; "" for the server's own actions
  std::string action;       // server/core/audit_log.h names them
  std::string object_kind;  // "job", "dataset", "api_key", "backup", "server", ...
  std::string object_id;    // the id or name; "" when none
  std::string outcome;      // "OK" or the status code's name
  std::string detail;
};

struct AuditLogFilter {
  int64_t since_us = 0;  // inclusive; 0: from the start
  int64_t until_us = 0;  // exclusive; 0: to now
  std::optional<std::string> user;
  std::optional<std::string> action;
};

struct AuditLogPage {
  std::vector<AuditLogRow> rows;  // newest first
  std::string next_page_token;    // empty on the last page
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_RECORDS_H_
