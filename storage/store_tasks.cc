// Store: the tasks of jobs, their leases, and the end of a job once its
// tasks have ended.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

// The queries the server repeats (the coordinator's sweep every 200 ms, a
// claim per idle worker, GetQueue) look for the few open jobs and tasks
// among all the finished ones, by state. Once PRAGMA optimize has
// ANALYZEd, the planner sees ~4 states and estimates a quarter of the table
// per state, so it prefers reading every row in id order to searching the
// index and sorting: a 45 ms full scan per sweep, holding the store, at 100k
// jobs. INDEXED BY keeps the search (and fails to prepare, loudly, should
// the index ever go); store_task_settle_test checks no scan comes back.
#define FCA_OPEN_JOBS "INDEXED BY jobs_by_state"
#define FCA_OPEN_TASKS "INDEXED BY tasks_by_state"

constexpr char kSelectTask[] =
    "SELECT id, job_id, idx, model, state, attempts, lease_seq, worker, lease_expires_us, "
    "error, executor_ref, started_at_us, finished_at_us, provenance_json FROM tasks";

absl::StatusOr<TaskRecord> ReadTask(const Statement& stmt) {
  TaskRecord t;
  t.id = stmt.ColumnInt(0);
  t.job_id = stmt.ColumnInt(1);
  t.index = static_cast<int>(stmt.ColumnInt(2));
  t.model = stmt.ColumnText(3);
  absl::StatusOr<JobState> state = ParseJobState(stmt.ColumnText(4));
  if (!state.ok()) return absl::DataLossError("storage: bad task state stored");
  t.state = *state;
  t.attempts = static_cast<int>(stmt.ColumnInt(5));
  t.lease_seq = stmt.ColumnInt(6);
  t.worker = stmt.ColumnText(7);
  t.lease_expires_us = stmt.ColumnInt(8);
  t.error = stmt.ColumnText(9);
  t.executor_ref = stmt.ColumnText(10);
  t.started_at_us = stmt.ColumnInt(11);
  t.finished_at_us = stmt.ColumnInt(12);
  t.provenance_json = stmt.ColumnText(13);
  return t;
}

absl::StatusOr<std::vector<TaskRecord>> ReadTasks(Statement& stmt) {
  std::vector<TaskRecord> tasks;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    FCA_ASSIGN_OR_RETURN(TaskRecord t, ReadTask(stmt));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

absl::Status LeaseLost(const TaskRecord& t, int64_t lease_seq) {
  if (t.state == JobState::kRunning && t.lease_seq != lease_seq) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "task %d: this lease is stale (the task was claimed again by %s)", t.id, t.worker));
  }
  return absl::FailedPreconditionError(
      absl::StrFormat("task %d: the lease is gone (the task is %s)", t.id, JobStateName(t.state)));
}

}  // namespace

absl::StatusOr<TaskRecord> Store::GetTaskLocked(int64_t id) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare(std::string(kSelectTask) + " WHERE id = ?1", "get task"));
  stmt.BindInt(1, id);
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return absl::NotFoundError(absl::StrFormat("task %d not found", id));
  return ReadTask(stmt);
}

absl::StatusOr<TaskRecord> Store::GetTask(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  return GetTaskLocked(id);
}

absl::StatusOr<std::vector<TaskRecord>> Store::ListTasks(int64_t job_id) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(const bool exists, JobExistsLocked(job_id));
  if (!exists) return absl::NotFoundError(absl::StrFormat("job %d not found", job_id));
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectTask) + " WHERE job_id = ?1 ORDER BY idx", "list tasks"));
  stmt.BindInt(1, job_id);
  return ReadTasks(stmt);
}

absl::StatusOr<std::vector<TaskRecord>> Store::ListTasksInState(JobState state, int limit) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectTask) + " WHERE state = ?1 ORDER BY job_id, idx LIMIT ?2",
                   "list tasks"));
  stmt.BindText(1, JobStateName(state));
  stmt.BindInt(2, limit);
  return ReadTasks(stmt);
}

absl::StatusOr<std::vector<ActiveTask>> Store::ListActiveTasks() {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare("SELECT t.job_id, j.project, j.owner, j.state, j.cancel_requested, t.model, "
                   "t.state, t.worker FROM tasks t " FCA_OPEN_TASKS
                   " JOIN jobs j ON j.id = t.job_id "
                   "WHERE t.state IN ('QUEUED', 'RUNNING') AND j.state IN ('QUEUED', 'RUNNING') "
                   "ORDER BY t.job_id, t.idx",
                   "list active tasks"));
  std::vector<ActiveTask> tasks;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return tasks;
    ActiveTask task;
    task.job_id = stmt.ColumnInt(0);
    task.job_project = stmt.ColumnText(1);
    task.job_owner = stmt.ColumnText(2);
    const absl::StatusOr<JobState> job_state = ParseJobState(stmt.ColumnText(3));
    const absl::StatusOr<JobState> state = ParseJobState(stmt.ColumnText(6));
    if (!job_state.ok() || !state.ok()) return absl::DataLossError("storage: bad state stored");
    task.job_state = *job_state;
    task.cancel_requested = stmt.ColumnInt(4) != 0;
    task.model = stmt.ColumnText(5);
    task.state = *state;
    task.worker = stmt.ColumnText(7);
    tasks.push_back(std::move(task));
  }
}

absl::StatusOr<std::optional<int64_t>> Store::NextClaimableLocked(const ClaimRequest& request) {
  // The join keeps tasks of cancelled jobs out even in the instant between
  // a cancel request and their cancellation. A named task is found by its
  // id; the next one by the index of states.
  std::string sql =
      absl::StrCat("SELECT tasks.id FROM tasks ", request.task_id != 0 ? "" : FCA_OPEN_TASKS,
                   " JOIN jobs ON jobs.id = tasks.job_id "
                   "WHERE tasks.state = 'QUEUED' AND jobs.cancel_requested = 0 AND "
                   "jobs.state IN ('QUEUED', 'RUNNING')");
  if (!request.skip_task_ids.empty()) {
    // Ids are numbers: written into the statement, no parameter per id.
    sql += " AND tasks.id NOT IN (" + absl::StrJoin(request.skip_task_ids, ",") + ")";
  }
  sql += request.task_id != 0 ? " AND tasks.id = ?1"
                              : " AND tasks.executor_ref = '' ORDER BY tasks.job_id, tasks.idx";
  sql += " LIMIT 1";
  FCA_ASSIGN_OR_RETURN(Statement next, db_->Prepare(sql, "claim task"));
  if (request.task_id != 0) next.BindInt(1, request.task_id);
  FCA_ASSIGN_OR_RETURN(const bool row, next.Step());
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(next.ColumnInt(0));
}

absl::StatusOr<std::optional<TaskClaim>> Store::ClaimTask(const ClaimRequest& request) {
  if (request.worker.empty()) return absl::InvalidArgumentError("a claim names no worker");
  if (request.lease_us <= 0) return absl::InvalidArgumentError("a lease must be positive");
  FCA_RETURN_IF_ERROR(Inject("claim_job"));
  RecursiveMutexLock lock(&mu_);
  std::optional<TaskClaim> claimed;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const std::optional<int64_t> id, NextClaimableLocked(request));
    if (!id) return absl::OkStatus();
    const int64_t now = Now();
    FCA_ASSIGN_OR_RETURN(
        Statement task, db_->Prepare("UPDATE tasks SET state = 'RUNNING', attempts = attempts + 1, "
                                     "lease_seq = lease_seq + 1, worker = ?1, "
                                     "lease_expires_us = ?2, started_at_us = ?3 WHERE id = ?4",
                                     "claim task"));
    task.BindText(1, request.worker);
    task.BindInt(2, now + request.lease_us);
    task.BindInt(3, now);
    task.BindInt(4, *id);
    FCA_RETURN_IF_ERROR(task.Run());
    FCA_ASSIGN_OR_RETURN(TaskRecord t, GetTaskLocked(*id));
    FCA_ASSIGN_OR_RETURN(Statement job,
                         db_->Prepare("UPDATE jobs SET attempts = MAX(attempts, ?1), "
                                      "started_at_us = CASE state WHEN 'QUEUED' THEN ?2 "
                                      "ELSE started_at_us END, state = 'RUNNING' WHERE id = ?3",
                                      "claim task"));
    job.BindInt(1, t.attempts);
    job.BindInt(2, now);
    job.BindInt(3, t.job_id);
    FCA_RETURN_IF_ERROR(job.Run());
    FCA_ASSIGN_OR_RETURN(JobRecord j, GetJobLocked(t.job_id));
    claimed = TaskClaim{std::move(t), std::move(j)};
    return absl::OkStatus();
  }));
  return claimed;
}

absl::StatusOr<TaskClaim> Store::CheckLeaseLocked(int64_t task_id, int64_t lease_seq) {
  FCA_ASSIGN_OR_RETURN(TaskRecord t, GetTaskLocked(task_id));
  if (t.state != JobState::kRunning || t.lease_seq != lease_seq) return LeaseLost(t, lease_seq);
  FCA_ASSIGN_OR_RETURN(JobRecord j, GetJobLocked(t.job_id));
  return TaskClaim{std::move(t), std::move(j)};
}

absl::StatusOr<TaskClaim> Store::CheckLease(int64_t task_id, int64_t lease_seq) {
  RecursiveMutexLock lock(&mu_);
  return CheckLeaseLocked(task_id, lease_seq);
}

absl::StatusOr<TaskClaim> Store::RenewLease(int64_t task_id, int64_t lease_seq, int64_t lease_us) {
  if (lease_us <= 0) return absl::InvalidArgumentError("a lease must be positive");
  FCA_RETURN_IF_ERROR(Inject("renew_lease"));
  RecursiveMutexLock lock(&mu_);
  TaskClaim claim;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_RETURN_IF_ERROR(CheckLeaseLocked(task_id, lease_seq).status());
    FCA_ASSIGN_OR_RETURN(
        Statement renew,
        db_->Prepare("UPDATE tasks SET lease_expires_us = ?1 WHERE id = ?2", "renew lease"));
    renew.BindInt(1, Now() + lease_us);
    renew.BindInt(2, task_id);
    FCA_RETURN_IF_ERROR(renew.Run());
    FCA_ASSIGN_OR_RETURN(claim, CheckLeaseLocked(task_id, lease_seq));
    return absl::OkStatus();
  }));
  return claim;
}

absl::StatusOr<TaskRecord> Store::FinishTask(int64_t task_id, int64_t lease_seq, JobState state,
                                             const std::string& error,
                                             const std::string& provenance_json) {
  if (!IsTerminal(state)) {
    return absl::InvalidArgumentError("a task can only finish as SUCCEEDED, FAILED or CANCELLED");
  }
  FCA_RETURN_IF_ERROR(Inject("finish_job"));
  RecursiveMutexLock lock(&mu_);
  TaskRecord task;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_RETURN_IF_ERROR(CheckLeaseLocked(task_id, lease_seq).status());
    FCA_ASSIGN_OR_RETURN(Statement update,
                         db_->Prepare("UPDATE tasks SET state = ?1, error = ?2, "
                                      "finished_at_us = ?3, lease_expires_us = 0, "
                                      "provenance_json = CASE ?5 WHEN '' THEN provenance_json "
                                      "ELSE ?5 END WHERE id = ?4",
                                      "finish task"));
    update.BindText(1, JobStateName(state));
    update.BindText(2, error);
    update.BindInt(3, Now());
    update.BindInt(4, task_id);
    update.BindText(5, provenance_json);
    FCA_RETURN_IF_ERROR(update.Run());
    FCA_ASSIGN_OR_RETURN(task, GetTaskLocked(task_id));
    return absl::OkStatus();
  }));
  return task;
}

absl::StatusOr<TaskRecord> Store::ReleaseTask(int64_t task_id, int64_t lease_seq,
                                              bool refund_attempt, const std::string& reason,
                                              int max_attempts) {
  FCA_RETURN_IF_ERROR(Inject("requeue_jobs"));
  RecursiveMutexLock lock(&mu_);
  TaskRecord task;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const TaskClaim claim, CheckLeaseLocked(task_id, lease_seq));
    const bool exhausted =
        !refund_attempt && max_attempts > 0 && claim.task.attempts >= max_attempts;
    // A task of a job being stopped has nothing left to do: no one would
    // claim it again.
    const char* state = claim.job.cancel_requested ? "CANCELLED" : exhausted ? "FAILED" : "QUEUED";
    FCA_ASSIGN_OR_RETURN(Statement update,
                         db_->Prepare("UPDATE tasks SET state = ?1, worker = '', "
                                      "lease_expires_us = 0, executor_ref = '', error = ?2, "
                                      "attempts = MAX(attempts - ?3, 0), finished_at_us = ?4 "
                                      "WHERE id = ?5",
                                      "release task"));
    update.BindText(1, state);
    update.BindText(2, reason);
    update.BindInt(3, refund_attempt ? 1 : 0);
    update.BindInt(4, std::string(state) != "QUEUED" ? Now() : 0);
    update.BindInt(5, task_id);
    FCA_RETURN_IF_ERROR(update.Run());
    FCA_ASSIGN_OR_RETURN(task, GetTaskLocked(task_id));
    return absl::OkStatus();
  }));
  return task;
}

absl::StatusOr<ExpiredTasks> Store::ExpireLeases(int max_attempts, const std::string& lost_worker,
                                                 const std::string& reason) {
  FCA_RETURN_IF_ERROR(Inject("requeue_jobs"));
  RecursiveMutexLock lock(&mu_);
  ExpiredTasks out;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    out = ExpiredTasks();
    std::string sql = std::string(kSelectTask) +
                      " " FCA_OPEN_TASKS " WHERE state = 'RUNNING' AND (lease_expires_us < ?1";
    // substr(): a prefix match without LIKE's wildcards.
    sql += lost_worker.empty() ? ")" : " OR substr(worker, 1, length(?2)) = ?2)";
    FCA_ASSIGN_OR_RETURN(Statement find, db_->Prepare(sql + " ORDER BY id", "expire leases"));
    find.BindInt(1, Now());
    if (!lost_worker.empty()) find.BindText(2, lost_worker);
    FCA_ASSIGN_OR_RETURN(std::vector<TaskRecord> lost, ReadTasks(find));
    FCA_ASSIGN_OR_RETURN(Statement update,
                         db_->Prepare("UPDATE tasks SET state = ?1, worker = '', "
                                      "lease_expires_us = 0, executor_ref = '', error = ?2, "
                                      "finished_at_us = ?3 WHERE id = ?4",
                                      "expire leases"));
    for (TaskRecord& t : lost) {
      FCA_ASSIGN_OR_RETURN(const JobRecord job, GetJobLocked(t.job_id));
      const bool exhausted = max_attempts > 0 && t.attempts >= max_attempts;
      // A task of a job being stopped has nothing left to do: no one would
      // claim it again.
      if (job.cancel_requested) {
        t.state = JobState::kCancelled;
        t.error = "";
        update.BindText(1, JobStateName(t.state));
        update.BindText(2, "");
        update.BindInt(3, Now());
        update.BindInt(4, t.id);
        FCA_RETURN_IF_ERROR(update.Run());
        FCA_RETURN_IF_ERROR(update.Reset());
        out.cancelled.push_back(t);
        continue;
      }
      t.state = exhausted ? JobState::kFailed : JobState::kQueued;
      t.error = exhausted ? absl::StrFormat(
                                "ABORTED: %s (worker %s); the task was lost %d "
                                "times and is not retried again",
                                reason, t.worker, t.attempts)
                          : absl::StrFormat("%s (worker %s)", reason, t.worker);
      update.BindText(1, JobStateName(t.state));
      update.BindText(2, t.error);
      update.BindInt(3, exhausted ? Now() : 0);
      update.BindInt(4, t.id);
      FCA_RETURN_IF_ERROR(update.Run());
      FCA_RETURN_IF_ERROR(update.Reset());
      (exhausted ? out.failed : out.requeued).push_back(t);
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status Store::SetExecutorRef(int64_t task_id, const std::string& ref) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement update,
      db_->Prepare("UPDATE tasks SET executor_ref = ?1 WHERE id = ?2", "place task"));
  update.BindText(1, ref);
  update.BindInt(2, task_id);
  FCA_RETURN_IF_ERROR(update.Run());
  if (db_->changes() == 0)
    return absl::NotFoundError(absl::StrFormat("task %d not found", task_id));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Store::CancelQueuedTasksLocked(int64_t job_id) {
  FCA_ASSIGN_OR_RETURN(Statement update,
                       db_->Prepare("UPDATE tasks SET state = 'CANCELLED', finished_at_us = ?1 "
                                    "WHERE job_id = ?2 AND state = 'QUEUED'",
                                    "cancel tasks"));
  update.BindInt(1, Now());
  update.BindInt(2, job_id);
  FCA_RETURN_IF_ERROR(update.Run());
  return db_->changes();
}

absl::StatusOr<int64_t> Store::CancelQueuedTasks(int64_t job_id) {
  RecursiveMutexLock lock(&mu_);
  return CancelQueuedTasksLocked(job_id);
}

absl::Status Store::CancelTasksLocked(int64_t job_id) {
  FCA_ASSIGN_OR_RETURN(Statement update,
                       db_->Prepare("UPDATE tasks SET state = 'CANCELLED', finished_at_us = ?1, "
                                    "lease_expires_us = 0 WHERE job_id = ?2 AND "
                                    "state IN ('QUEUED', 'RUNNING')",
                                    "cancel tasks"));
  update.BindInt(1, Now());
  update.BindInt(2, job_id);
  return update.Run();
}

absl::StatusOr<std::vector<int64_t>> Store::UnsettledJobs() {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement find,
      db_->Prepare("SELECT id FROM jobs " FCA_OPEN_JOBS " WHERE state IN ('QUEUED', 'RUNNING') "
                   "AND NOT EXISTS (SELECT 1 FROM tasks WHERE "
                   "tasks.job_id = jobs.id AND "
                   "tasks.state IN ('QUEUED', 'RUNNING')) ORDER BY id",
                   "find unsettled jobs"));
  return internal::ReadIds(find);
}

absl::StatusOr<std::optional<Store::Settled>> Store::SettleJob(int64_t job_id,
                                                               const EndEvent& end_event) {
  FCA_RETURN_IF_ERROR(Inject("finish_job"));
  RecursiveMutexLock lock(&mu_);
  std::optional<Settled> settled;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    settled.reset();
    FCA_ASSIGN_OR_RETURN(JobRecord job, GetJobLocked(job_id));
    if (IsTerminal(job.state)) return absl::OkStatus();
    FCA_ASSIGN_OR_RETURN(
        Statement stmt,
        db_->Prepare(std::string(kSelectTask) + " WHERE job_id = ?1 ORDER BY idx", "settle job"));
    stmt.BindInt(1, job_id);
    FCA_ASSIGN_OR_RETURN(const std::vector<TaskRecord> tasks, ReadTasks(stmt));
    JobState state = JobState::kSucceeded;
    std::string error;
    for (const TaskRecord& t : tasks) {
      if (!IsTerminal(t.state)) return absl::OkStatus();
      if (t.state == JobState::kFailed && state != JobState::kFailed) {
        state = JobState::kFailed;
        error = t.error;
      }
      if (t.state == JobState::kCancelled && state == JobState::kSucceeded) {
        state = JobState::kCancelled;
      }
    }
    if (tasks.empty()) {
      state = JobState::kFailed;
      error = "INTERNAL: the job has nothing to run";
    }
    FCA_ASSIGN_OR_RETURN(Statement update, db_->Prepare("UPDATE jobs SET state = ?1, error = ?2, "
                                                        "finished_at_us = ?3 WHERE id = ?4",
                                                        "settle job"));
    update.BindText(1, JobStateName(state));
    update.BindText(2, error);
    update.BindInt(3, Now());
    update.BindInt(4, job_id);
    FCA_RETURN_IF_ERROR(update.Run());
    Settled out;
    FCA_ASSIGN_OR_RETURN(out.job, GetJobLocked(job_id));
    const std::string payload = end_event ? end_event(state, error) : "";
    if (!payload.empty()) {
      FCA_ASSIGN_OR_RETURN(out.event_seq, AppendJobEventLocked(job_id, payload));
    }
    settled = std::move(out);
    return absl::OkStatus();
  }));
  return settled;
}

#undef FCA_OPEN_JOBS
#undef FCA_OPEN_TASKS

}  // namespace fca::storage
