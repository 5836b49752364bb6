// Store: jobs, their state machine, and their event streams.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr char kSelectJob[] =
    "SELECT id, owner, spec_json, error, state, created_at_us, started_at_us, "
    "finished_at_us, attempts, cancel_requested, provenance_json, project FROM jobs";
constexpr char kJobTokenKind = 'j';

absl::StatusOr<JobRecord> ReadJob(const Statement& stmt) {
  JobRecord job;
  job.id = stmt.ColumnInt(0);
  job.owner = stmt.ColumnText(1);
  job.spec_json = stmt.ColumnText(2);
  job.error = stmt.ColumnText(3);
  absl::StatusOr<JobState> state = ParseJobState(stmt.ColumnText(4));
  if (!state.ok()) return absl::DataLossError("storage: bad job state stored");
  job.state = *state;
  job.created_at_us = stmt.ColumnInt(5);
  job.started_at_us = stmt.ColumnInt(6);
  job.finished_at_us = stmt.ColumnInt(7);
  job.attempts = static_cast<int>(stmt.ColumnInt(8));
  job.cancel_requested = stmt.ColumnInt(9) != 0;
  job.provenance_json = stmt.ColumnText(10);
  job.project = stmt.ColumnText(11);
  return job;
}

absl::Status NotFound(int64_t id) {
  return absl::NotFoundError(absl::StrFormat("job %d not found", id));
}

// The spec as JSON SQLite can read: a row whose spec is not JSON (never
// written by the server, but the store takes any text) matches no spec
// filter instead of failing the whole listing.
#define FCA_SPEC "(CASE WHEN json_valid(spec_json) THEN spec_json ELSE '{}' END)"
// A job's models (job_models, schema 9): those its spec names in `models`
// and `dense_twin`, as text. EXISTS, not IN: with a project, owner or state
// filter SQLite then walks those jobs and looks each up in job_models'
// primary key, instead of building the model's whole job set per page.
constexpr char kSpecModelIs[] =
    "EXISTS (SELECT 1 FROM job_models WHERE job_models.model = ? AND "
    "job_models.job_id = jobs.id)";
constexpr char kIndexJobModels[] =
    R"sql(INSERT INTO job_models (model, job_id)
      SELECT m.value, ?1 FROM json_each(CASE WHEN json_valid(?2) AND
          json_type(?2, '$.models') = 'array' THEN ?2 ELSE '{"models":[]}' END, '$.models') AS m
      WHERE m.type = 'text'
      UNION
      SELECT json_extract(?2, '$.dense_twin'), ?1
      WHERE json_valid(?2) AND json_type(?2, '$.dense_twin') = 'text')sql";
constexpr char kSpecDatasetIs[] = "? IN (json_extract(" FCA_SPEC
                                  ", '$.eval_dataset'), "
                                  "json_extract(" FCA_SPEC ", '$.calib_dataset'))";
constexpr char kSpecLabelIs[] = "json_extract(" FCA_SPEC ", '$.label') = ?";
#undef FCA_SPEC

// The WHERE of ListJobs and CountJobs: one place, so a count always
// counts what the pages show.
internal::WhereBuilder JobWhere(const JobFilter& filter) {
  internal::WhereBuilder where;
  if (filter.owner.has_value()) where.Add("owner = ?", *filter.owner);
  if (filter.project.has_value()) where.Add("project = ?", *filter.project);
  if (filter.state.has_value()) {
    where.Add("state = ?", std::string(JobStateName(*filter.state)));
  }
  if (filter.created_after_us.has_value()) {
    where.Add("created_at_us >= ?", *filter.created_after_us);
  }
  if (filter.created_before_us.has_value()) {
    where.Add("created_at_us < ?", *filter.created_before_us);
  }
  if (filter.model.has_value()) where.Add(kSpecModelIs, *filter.model);
  if (filter.dataset.has_value()) where.Add(kSpecDatasetIs, *filter.dataset);
  if (filter.label.has_value()) where.Add(kSpecLabelIs, *filter.label);
  return where;
}

// True when `filter` names a model and nothing else (every other field of
// JobFilter, as JobWhere reads them, is unset).
bool FiltersByModelOnly(const JobFilter& f) {
  return f.model.has_value() && !f.owner.has_value() && !f.project.has_value() &&
         !f.state.has_value() && !f.dataset.has_value() && !f.label.has_value() &&
         !f.created_after_us.has_value() && !f.created_before_us.has_value();
}

// jobs.end_unobserved of job `job_id` (Store::MarkEndUnobserved).
absl::Status SetEndUnobserved(Database& db, int64_t job_id, bool unobserved) {
  FCA_ASSIGN_OR_RETURN(Statement mark,
                       db.Prepare("UPDATE jobs SET end_unobserved = ?2 WHERE id = ?1",
                                  "mark a job's end (un)observed"));
  mark.BindInt(1, job_id);
  mark.BindInt(2, unobserved ? 1 : 0);
  FCA_RETURN_IF_ERROR(mark.Run());
  return db.changes() == 0 ? NotFound(job_id) : absl::OkStatus();
}

absl::StatusOr<JobRecord> GetJobIn(const Database& db, int64_t id) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db.Prepare(std::string(kSelectJob) + " WHERE id = ?1", "get job"));
  stmt.BindInt(1, id);
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return NotFound(id);
  return ReadJob(stmt);
}

absl::StatusOr<bool> JobExistsIn(const Database& db, int64_t id) {
  FCA_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT 1 FROM jobs WHERE id = ?1", "find job"));
  stmt.BindInt(1, id);
  return stmt.Step();
}

}  // namespace

absl::StatusOr<JobRecord> Store::GetJobLocked(int64_t id) { return GetJobIn(*db_, id); }

absl::StatusOr<bool> Store::JobExistsLocked(int64_t id) { return JobExistsIn(*db_, id); }

absl::StatusOr<JobRecord> Store::CreateJob(const std::string& owner, const std::string& spec_json,
                                           const std::vector<std::string>& task_models,
                                           const std::string& provenance_json,
                                           const std::string& project) {
  if (owner.empty()) return absl::InvalidArgumentError("job owner is empty");
  FCA_RETURN_IF_ERROR(Inject("create_job"));
  RecursiveMutexLock lock(&mu_);
  JobRecord job;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare("INSERT INTO jobs (owner, spec_json, state, "
                                      "created_at_us, provenance_json, project) "
                                      "VALUES (?1, ?2, 'QUEUED', ?3, ?4, ?5)",
                                      "create job"));
    insert.BindText(1, owner);
    insert.BindText(5, project.empty() ? owner : project);
    insert.BindText(2, spec_json);
    insert.BindInt(3, Now());
    insert.BindText(4, provenance_json);
    FCA_RETURN_IF_ERROR(insert.Run());
    const int64_t id = db_->last_insert_rowid();
    FCA_ASSIGN_OR_RETURN(Statement models, db_->Prepare(kIndexJobModels, "create job"));
    models.BindInt(1, id);
    models.BindText(2, spec_json);
    FCA_RETURN_IF_ERROR(models.Run());
    FCA_ASSIGN_OR_RETURN(Statement task,
                         db_->Prepare("INSERT INTO tasks (job_id, idx, model, state) "
                                      "VALUES (?1, ?2, ?3, 'QUEUED')",
                                      "create job"));
    for (size_t i = 0; i < task_models.size(); ++i) {
      task.BindInt(1, id);
      task.BindInt(2, static_cast<int64_t>(i));
      task.BindText(3, task_models[i]);
      FCA_RETURN_IF_ERROR(task.Run());
      FCA_RETURN_IF_ERROR(task.Reset());
    }
    FCA_ASSIGN_OR_RETURN(job, GetJobLocked(id));
    return absl::OkStatus();
  }));
  return job;
}

absl::StatusOr<JobRecord> Store::GetJob(int64_t id) {
  return Read([&](Database& db) { return GetJobIn(db, id); });
}

absl::StatusOr<JobPage> Store::ListJobs(const JobFilter& filter, int page_size,
                                        const std::string& page_token) {
  FCA_ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page_size));
  FCA_ASSIGN_OR_RETURN(const std::optional<int64_t> after,
                       internal::ParsePageToken(kJobTokenKind, page_token));
  internal::WhereBuilder where = JobWhere(filter);
  if (after.has_value()) where.Add("id < ?", *after);  // newest first
  return Read([&](Database& db) -> absl::StatusOr<JobPage> {
    FCA_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(std::string(kSelectJob) + where.Sql() +
                                                        " ORDER BY id DESC LIMIT ?",
                                                    "list jobs"));
    where.BindAll(stmt);
    stmt.BindInt(where.num_values() + 1, size + 1);  // +1: is there more?
    JobPage page;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      if (static_cast<int>(page.jobs.size()) == size) {
        // One row past the page: there is a next page.
        page.next_page_token = internal::MakePageToken(kJobTokenKind, page.jobs.back().id);
        break;
      }
      FCA_ASSIGN_OR_RETURN(JobRecord job, ReadJob(stmt));
      page.jobs.push_back(std::move(job));
    }
    return page;
  });
}

absl::StatusOr<int64_t> Store::CountJobs(const std::optional<std::string>& owner,
                                         const std::vector<JobState>& states) {
  internal::WhereBuilder where;
  if (owner.has_value()) where.Add("owner = ?", *owner);
  if (!states.empty()) {
    std::vector<std::string> names;
    names.reserve(states.size());
    for (JobState state : states) names.emplace_back(JobStateName(state));
    where.AddIn("state", names);
  }
  return Read([&](Database& db) -> absl::StatusOr<int64_t> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare("SELECT COUNT(*) FROM jobs" + where.Sql(), "count jobs"));
    where.BindAll(stmt);
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    return row ? stmt.ColumnInt(0) : 0;
  });
}

absl::StatusOr<int64_t> Store::CountJobs(const JobFilter& filter) {
  // A model alone (an admin's filter) is counted in job_models' primary
  // key, which holds exactly one row per (model, job).
  const bool model_only = FiltersByModelOnly(filter);
  internal::WhereBuilder where = JobWhere(filter);
  if (model_only) {
    where = {};
    where.Add("model = ?", *filter.model);
  }
  return Read([&](Database& db) -> absl::StatusOr<int64_t> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare(std::string(model_only ? "SELECT COUNT(*) FROM job_models"
                                                           : "SELECT COUNT(*) FROM jobs") +
                                        where.Sql(),
                                    "count jobs"));
    where.BindAll(stmt);
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    return row ? stmt.ColumnInt(0) : 0;
  });
}

absl::Status Store::MarkEndUnobserved(int64_t job_id) {
  FCA_RETURN_IF_ERROR(Inject("mark_end_unobserved"));
  RecursiveMutexLock lock(&mu_);
  return SetEndUnobserved(*db_, job_id, true);
}

absl::Status Store::MarkEndObserved(int64_t job_id) {
  RecursiveMutexLock lock(&mu_);
  return SetEndUnobserved(*db_, job_id, false);
}

absl::StatusOr<std::vector<int64_t>> Store::UnobservedEnds(int limit, int64_t after_id) {
  if (limit < 1) return absl::InvalidArgumentError("limit must be positive");
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement find,
                       db_->Prepare("SELECT id FROM jobs WHERE end_unobserved = 1 AND id > ?2 "
                                    "ORDER BY id LIMIT ?1",
                                    "find unobserved job ends"));
  find.BindInt(1, limit);
  find.BindInt(2, after_id);
  return internal::ReadIds(find);
}

absl::StatusOr<JobRecord> Store::FinishJob(int64_t id, JobState state, const std::string& error) {
  if (!IsTerminal(state)) {
    return absl::InvalidArgumentError("a job can only finish as SUCCEEDED, FAILED or CANCELLED");
  }
  FCA_RETURN_IF_ERROR(Inject("finish_job"));
  RecursiveMutexLock lock(&mu_);
  JobRecord job;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(job, GetJobLocked(id));
    if (job.state != JobState::kRunning) {
      return absl::FailedPreconditionError(
          absl::StrFormat("job %d is %s, not RUNNING", id, JobStateName(job.state)));
    }
    FCA_ASSIGN_OR_RETURN(Statement update, db_->Prepare("UPDATE jobs SET state = ?1, error = ?2, "
                                                        "finished_at_us = ?3 WHERE id = ?4",
                                                        "finish job"));
    update.BindText(1, JobStateName(state));
    update.BindText(2, error);
    update.BindInt(3, Now());
    update.BindInt(4, id);
    FCA_RETURN_IF_ERROR(update.Run());
    FCA_RETURN_IF_ERROR(CancelTasksLocked(id));
    FCA_ASSIGN_OR_RETURN(job, GetJobLocked(id));
    return absl::OkStatus();
  }));
  return job;
}

absl::StatusOr<JobRecord> Store::RequestCancel(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  JobRecord job;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(job, GetJobLocked(id));
    if (IsTerminal(job.state)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("job %d is already %s", id, JobStateName(job.state)));
    }
    FCA_ASSIGN_OR_RETURN(
        Statement update,
        db_->Prepare("UPDATE jobs SET cancel_requested = 1, "
                     "state = CASE state WHEN 'QUEUED' THEN 'CANCELLED' ELSE state END, "
                     "finished_at_us = CASE state WHEN 'QUEUED' THEN ?1 "
                     "ELSE finished_at_us END WHERE id = ?2",
                     "cancel job"));
    update.BindInt(1, Now());
    update.BindInt(2, id);
    FCA_RETURN_IF_ERROR(update.Run());
    FCA_RETURN_IF_ERROR(CancelQueuedTasksLocked(id).status());
    FCA_ASSIGN_OR_RETURN(job, GetJobLocked(id));
    return absl::OkStatus();
  }));
  return job;
}

absl::Status Store::DeleteJob(int64_t id) {
  FCA_RETURN_IF_ERROR(Inject("delete"));
  RecursiveMutexLock lock(&mu_);
  return DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(JobRecord job, GetJobLocked(id));
    if (!IsTerminal(job.state)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %d is %s; cancel it before deleting it", id, JobStateName(job.state)));
    }
    // Events and results go by ON DELETE CASCADE.
    FCA_ASSIGN_OR_RETURN(Statement remove,
                         db_->Prepare("DELETE FROM jobs WHERE id = ?1", "delete job"));
    remove.BindInt(1, id);
    return remove.Run();
  });
}

// ------------------------------------------------------------- job events

absl::StatusOr<int64_t> Store::AppendJobEvent(int64_t job_id, const std::string& payload) {
  FCA_RETURN_IF_ERROR(Inject("append_event"));
  RecursiveMutexLock lock(&mu_);
  int64_t seq = 0;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(seq, AppendJobEventLocked(job_id, payload));
    return absl::OkStatus();
  }));
  return seq;
}

absl::StatusOr<int64_t> Store::AppendJobEventLocked(int64_t job_id, const std::string& payload) {
  FCA_ASSIGN_OR_RETURN(const bool exists, JobExistsLocked(job_id));
  if (!exists) return NotFound(job_id);
  FCA_ASSIGN_OR_RETURN(Statement last, db_->Prepare("SELECT COALESCE(MAX(seq), 0) FROM job_events "
                                                    "WHERE job_id = ?1",
                                                    "append job event"));
  last.BindInt(1, job_id);
  FCA_RETURN_IF_ERROR(last.Step().status());
  const int64_t seq = last.ColumnInt(0) + 1;
  FCA_ASSIGN_OR_RETURN(Statement insert,
                       db_->Prepare("INSERT INTO job_events (job_id, seq, payload, "
                                    "created_at_us) VALUES (?1, ?2, ?3, ?4)",
                                    "append job event"));
  insert.BindInt(1, job_id);
  insert.BindInt(2, seq);
  insert.BindBlob(3, payload);
  insert.BindInt(4, Now());
  FCA_RETURN_IF_ERROR(insert.Run());
  return seq;
}

absl::StatusOr<std::vector<JobEvent>> Store::ListJobEvents(int64_t job_id, int64_t after_seq,
                                                           int limit) {
  if (after_seq < 0) {
    return absl::InvalidArgumentError("after_seq must not be negative");
  }
  if (limit < 1) return absl::InvalidArgumentError("limit must be positive");
  limit = std::min(limit, kMaxEventsPerCall);
  return Read([&](Database& db) -> absl::StatusOr<std::vector<JobEvent>> {
    FCA_ASSIGN_OR_RETURN(const bool exists, JobExistsIn(db, job_id));
    if (!exists) return NotFound(job_id);
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare("SELECT seq, payload, created_at_us FROM job_events "
                                    "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                                    "list job events"));
    stmt.BindInt(1, job_id);
    stmt.BindInt(2, after_seq);
    stmt.BindInt(3, limit);
    std::vector<JobEvent> events;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      events.push_back(JobEvent{stmt.ColumnInt(0), stmt.ColumnBlob(1), stmt.ColumnInt(2)});
    }
    return events;
  });
}

}  // namespace fca::storage
