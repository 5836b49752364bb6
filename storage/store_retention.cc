// Store: what retention purges (expired jobs, unused datasets, old cache
// entries) and the projects' retention rules.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr int64_t kMicrosPerDay = int64_t{86400} * 1000 * 1000;

// The days in force for a row joined with its project's rule `r`: the
// rule's, else the default bound to ?1.
std::string KeepDays(const char* column) { return absl::StrFormat("COALESCE(r.%s, ?1)", column); }

// Expired: days in force > 0 and `time_column` older than now (?2) minus
// them.
std::string ExpiredWhere(const char* column, const char* time_column) {
  const std::string days = KeepDays(column);
  return absl::StrCat(days, " > 0 AND ", time_column, " < ?2 - ", days, " * ", kMicrosPerDay);
}

// Rows of `table` (alias `alias`) with their project's rule `r`. With a
// default of forever only projects with a rule can expire anything: their
// rows are read by project (CROSS JOIN keeps project_retention the outer
// loop), not every row of the table.
std::string WithRule(bool default_forever, const char* table, const char* alias) {
  return default_forever
             ? absl::StrFormat(
                   " FROM project_retention r CROSS JOIN %s %s ON %s.project = r.project", table,
                   alias, alias)
             : absl::StrFormat(
                   " FROM %s %s LEFT JOIN project_retention r ON r.project = %s.project", table,
                   alias, alias);
}

// Finished jobs past their keep: ?3 the limit, or (one_id) the job.
std::string ExpiredJobsSql(bool default_forever, bool one_id) {
  return absl::StrCat("SELECT j.id", WithRule(default_forever, "jobs", "j"),
                      " WHERE j.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND "
                      "j.finished_at_us > 0 AND ",
                      ExpiredWhere("keep_jobs_days", "j.finished_at_us"),
                      one_id ? " AND j.id = ?3" : " ORDER BY j.finished_at_us LIMIT ?3");
}

// Datasets past their keep: ?3 the limit and ?4, ?5 the (last use, id) to
// start after, or (one_id) ?3 the dataset.
std::string ExpiredDatasetsSql(bool default_forever, bool one_id) {
  return absl::StrCat(
      "SELECT d.id, d.last_used_us", WithRule(default_forever, "datasets", "d"), " WHERE ",
      ExpiredWhere("keep_unused_datasets_days", "d.last_used_us"),
      one_id ? " AND d.id = ?3"
             : " AND (d.last_used_us, d.id) > (?4, ?5) ORDER BY d.last_used_us, d.id LIMIT ?3");
}

// Binds ?1 the default days, ?2 now and ?3 `third` (a limit or an id).
void BindExpiry(Statement& stmt, int default_days, int64_t now, int64_t third) {
  stmt.BindInt(1, default_days);
  stmt.BindInt(2, now);
  stmt.BindInt(3, third);
}

std::optional<int> OptionalInt(const Statement& stmt, int col) {
  if (stmt.ColumnIsNull(col)) return std::nullopt;
  return static_cast<int>(stmt.ColumnInt(col));
}

}  // namespace

absl::Status Store::TouchDataset(int64_t id) {
  FCA_RETURN_IF_ERROR(Inject("touch_dataset"));
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement touch,
      db_->Prepare("UPDATE datasets SET last_used_us = MAX(last_used_us, ?2) WHERE id = ?1",
                   "mark dataset used"));
  touch.BindInt(1, id);
  touch.BindInt(2, Now());
  FCA_RETURN_IF_ERROR(touch.Run());
  if (db_->changes() == 0) return absl::NotFoundError("dataset not found");
  return absl::OkStatus();
}

absl::StatusOr<RetentionRule> Store::GetRetentionRule(const std::string& project) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare("SELECT keep_jobs_days, keep_unused_datasets_days FROM "
                                    "project_retention WHERE project = ?1",
                                    "read retention"));
  stmt.BindText(1, project);
  RetentionRule rule;
  rule.project = project;
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (row) {
    rule.keep_jobs_days = OptionalInt(stmt, 0);
    rule.keep_unused_datasets_days = OptionalInt(stmt, 1);
  }
  return rule;
}

absl::Status Store::SetRetentionRule(const RetentionRule& rule, const std::string& who) {
  if (rule.project.empty()) return absl::InvalidArgumentError("project is empty");
  for (const std::optional<int>& days : {rule.keep_jobs_days, rule.keep_unused_datasets_days}) {
    if (days.has_value() && *days < 0) {
      return absl::InvalidArgumentError("retention days must not be negative");
    }
  }
  FCA_RETURN_IF_ERROR(Inject("set_retention"));
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement exists,
                         db_->Prepare("SELECT 1 FROM projects WHERE name = ?1", "find project"));
    exists.BindText(1, rule.project);
    FCA_ASSIGN_OR_RETURN(const bool found, exists.Step());
    if (!found) {
      return absl::NotFoundError(absl::StrFormat("project '%s' does not exist", rule.project));
    }
    if (!rule.keep_jobs_days.has_value() && !rule.keep_unused_datasets_days.has_value()) {
      FCA_ASSIGN_OR_RETURN(
          Statement remove,
          db_->Prepare("DELETE FROM project_retention WHERE project = ?1", "write retention"));
      remove.BindText(1, rule.project);
      return remove.Run();
    }
    FCA_ASSIGN_OR_RETURN(
        Statement upsert,
        db_->Prepare("INSERT INTO project_retention (project, keep_jobs_days, "
                     "keep_unused_datasets_days, updated_at_us, updated_by) VALUES (?1, ?2, ?3, "
                     "?4, ?5) ON CONFLICT (project) DO UPDATE SET keep_jobs_days = ?2, "
                     "keep_unused_datasets_days = ?3, updated_at_us = ?4, updated_by = ?5",
                     "write retention"));
    upsert.BindText(1, rule.project);
    for (const auto& [index, days] :
         {std::pair{2, rule.keep_jobs_days}, std::pair{3, rule.keep_unused_datasets_days}}) {
      if (days.has_value()) {
        upsert.BindInt(index, *days);
      } else {
        upsert.BindNull(index);
      }
    }
    upsert.BindInt(4, Now());
    upsert.BindText(5, who);
    return upsert.Run();
  });
}

absl::StatusOr<std::vector<int64_t>> Store::ExpiredJobs(const RetentionDays& defaults, int limit) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(ExpiredJobsSql(defaults.keep_jobs_days == 0, false), "find expired jobs"));
  BindExpiry(stmt, defaults.keep_jobs_days, Now(), limit);
  return internal::ReadIds(stmt);
}

absl::StatusOr<std::vector<DatasetUse>> Store::ExpiredDatasets(const RetentionDays& defaults,
                                                               int limit, const DatasetUse& after) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(ExpiredDatasetsSql(defaults.keep_unused_datasets_days == 0, false),
                   "find expired datasets"));
  BindExpiry(stmt, defaults.keep_unused_datasets_days, Now(), limit);
  stmt.BindInt(4, after.last_used_us);
  stmt.BindInt(5, after.id);
  std::vector<DatasetUse> uses;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return uses;
    uses.push_back({stmt.ColumnInt(0), stmt.ColumnInt(1)});
  }
}

absl::StatusOr<bool> Store::PurgeExpiredJob(int64_t id, const RetentionDays& defaults) {
  FCA_RETURN_IF_ERROR(Inject("purge_job"));
  RecursiveMutexLock lock(&mu_);
  bool deleted = false;
  FCA_RETURN_IF_ERROR(DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(
        Statement expired,
        db_->Prepare(ExpiredJobsSql(defaults.keep_jobs_days == 0, true), "find expired jobs"));
    BindExpiry(expired, defaults.keep_jobs_days, Now(), id);
    FCA_ASSIGN_OR_RETURN(const bool still, expired.Step());
    if (!still) return absl::OkStatus();
    // Events and results go by ON DELETE CASCADE.
    FCA_ASSIGN_OR_RETURN(Statement remove,
                         db_->Prepare("DELETE FROM jobs WHERE id = ?1", "purge job"));
    remove.BindInt(1, id);
    FCA_RETURN_IF_ERROR(remove.Run());
    deleted = true;
    return absl::OkStatus();
  }));
  return deleted;
}

absl::StatusOr<bool> Store::PurgeExpiredDataset(int64_t id, const RetentionDays& defaults) {
  FCA_RETURN_IF_ERROR(Inject("purge_dataset"));
  RecursiveMutexLock lock(&mu_);
  bool deleted = false;
  FCA_RETURN_IF_ERROR(DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(
        Statement expired,
        db_->Prepare(ExpiredDatasetsSql(defaults.keep_unused_datasets_days == 0, true),
                     "find expired datasets"));
    BindExpiry(expired, defaults.keep_unused_datasets_days, Now(), id);
    FCA_ASSIGN_OR_RETURN(const bool still, expired.Step());
    if (!still) return absl::OkStatus();
    FCA_ASSIGN_OR_RETURN(const DatasetRecord dataset, GetDatasetLocked(id));
    FCA_RETURN_IF_ERROR(internal::DeleteDatasetRow(*db_, dataset).status());
    deleted = true;
    return absl::OkStatus();
  }));
  return deleted;
}

absl::StatusOr<int64_t> Store::EvictCoefficientsUnusedSince(int64_t cutoff_us, int limit) {
  FCA_RETURN_IF_ERROR(Inject("evict_coefficients"));
  RecursiveMutexLock lock(&mu_);
  int64_t evicted = 0;
  FCA_RETURN_IF_ERROR(DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // Chunks go by ON DELETE CASCADE. Oldest use first, as the size limit
    // evicts.
    FCA_ASSIGN_OR_RETURN(
        Statement remove,
        db_->Prepare("DELETE FROM coeff_cache WHERE id IN (SELECT id FROM coeff_cache WHERE "
                     "last_used_us < ?1 ORDER BY last_used_seq LIMIT ?2)",
                     "evict old coefficients"));
    remove.BindInt(1, cutoff_us);
    remove.BindInt(2, limit);
    FCA_RETURN_IF_ERROR(remove.Run());
    evicted = db_->changes();
    return absl::OkStatus();
  }));
  return evicted;
}

}  // namespace fca::storage
