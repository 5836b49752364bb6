// The audit log: appending, querying (paged, newest first) and purging.
#include <string>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr char kAuditTokenKind = 'a';

constexpr char kSelectAudit[] =
    "SELECT id, at_us, user, key_id, peer, action, object_kind, object_id, outcome, detail "
    "FROM audit_log";

AuditLogRow ReadAuditRow(const Statement& stmt) {
  AuditLogRow row;
  row.id = stmt.ColumnInt(0);
  row.at_us = stmt.ColumnInt(1);
  row.user = stmt.ColumnText(2);
  row.key_id = stmt.ColumnInt(3);
  row.peer = stmt.ColumnText(4);
  row.action = stmt.ColumnText(5);
  row.object_kind = stmt.ColumnText(6);
  row.object_id = stmt.ColumnText(7);
  row.outcome = stmt.ColumnText(8);
  row.detail = stmt.ColumnText(9);
  return row;
}

// A caller's text (a dataset name, a refused key's reason) is cut, so one
// row stays small whatever a client sends.
std::string Cut(const std::string& text) { return text.substr(0, Store::kMaxAuditTextBytes); }

}  // namespace

absl::StatusOr<int64_t> Store::AppendAuditLog(const AuditLogRow& row) {
  if (row.action.empty()) return absl::InvalidArgumentError("audit log: the action is empty");
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("append_audit_log"));
  FCA_ASSIGN_OR_RETURN(
      Statement insert,
      db_->Prepare("INSERT INTO audit_log (at_us, user, key_id, peer, action, object_kind, "
                   "object_id, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                   "append to the audit log"));
  insert.BindInt(1, row.at_us != 0 ? row.at_us : Now());
  insert.BindText(2, Cut(row.user));
  insert.BindInt(3, row.key_id);
  insert.BindText(4, Cut(row.peer));
  insert.BindText(5, Cut(row.action));
  insert.BindText(6, Cut(row.object_kind));
  insert.BindText(7, Cut(row.object_id));
  insert.BindText(8, Cut(row.outcome));
  insert.BindText(9, Cut(row.detail));
  FCA_RETURN_IF_ERROR(insert.Run());
  return db_->last_insert_rowid();
}

absl::StatusOr<AuditLogPage> Store::QueryAuditLog(const AuditLogFilter& filter, int page_size,
                                                  const std::string& page_token) {
  FCA_ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page_size));
  FCA_ASSIGN_OR_RETURN(const std::optional<int64_t> after,
                       internal::ParsePageToken(kAuditTokenKind, page_token));
  internal::WhereBuilder where;
  if (filter.since_us != 0) where.Add("at_us >= ?", filter.since_us);
  if (filter.until_us != 0) where.Add("at_us < ?", filter.until_us);
  if (filter.user) where.Add("user = ?", *filter.user);
  if (filter.action) where.Add("action = ?", *filter.action);
  if (after.has_value()) where.Add("id < ?", *after);  // newest first
  return Read([&](Database& db) -> absl::StatusOr<AuditLogPage> {
    FCA_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(std::string(kSelectAudit) + where.Sql() +
                                                        " ORDER BY id DESC LIMIT ?",
                                                    "query the audit log"));
    where.BindAll(stmt);
    stmt.BindInt(where.num_values() + 1, size + 1);  // +1: is there more?
    AuditLogPage page;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      if (static_cast<int>(page.rows.size()) == size) {
        page.next_page_token = internal::MakePageToken(kAuditTokenKind, page.rows.back().id);
        break;
      }
      page.rows.push_back(ReadAuditRow(stmt));
    }
    return page;
  });
}

absl::StatusOr<int64_t> Store::PurgeAuditLog(int64_t before_us, int max_rows) {
  if (max_rows < 1) return absl::InvalidArgumentError("audit log purge: max_rows must be >= 1");
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("purge_audit_log"));
  // The oldest rows first, by id (the time index finds them): one short
  // write transaction per call.
  FCA_ASSIGN_OR_RETURN(
      Statement remove,
      db_->Prepare("DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE "
                   "at_us < ?1 ORDER BY at_us, id LIMIT ?2)",
                   "purge the audit log"));
  remove.BindInt(1, before_us);
  remove.BindInt(2, max_rows);
  FCA_RETURN_IF_ERROR(remove.Run());
  return db_->changes();
}

}  // namespace fca::storage
