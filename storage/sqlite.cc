#include "storage/sqlite.h"

#include <glog/logging.h>
#include <sqlite3.h>

#include <cctype>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace fca::storage {

// ---------------------------------------------------------------- Statement

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      what_(other.what_),
      bind_error_(other.bind_error_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    Finalize();
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    what_ = other.what_;
    bind_error_ = other.bind_error_;
  }
  return *this;
}

Statement::~Statement() { Finalize(); }

void Statement::Finalize() {
  if (stmt_ == nullptr) return;
  db_->full_scan_steps_ += sqlite3_stmt_status(stmt_, SQLITE_STMTSTATUS_FULLSCAN_STEP, 0);
  sqlite3_finalize(stmt_);
  stmt_ = nullptr;
}

void Statement::NoteBindResult(int rc) {
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

void Statement::BindInt(int index, int64_t value) {
  NoteBindResult(sqlite3_bind_int64(stmt_, index, value));
}

void Statement::BindDouble(int index, double value) {
  NoteBindResult(sqlite3_bind_double(stmt_, index, value));
}

void Statement::BindNull(int index) { NoteBindResult(sqlite3_bind_null(stmt_, index)); }

void Statement::BindText(int index, std::string_view value) {
  NoteBindResult(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}

void Statement::BindBlob(int index, std::string_view value) {
  // A zero-length blob must not be bound from a null pointer (that is NULL).
  static const char kEmpty = 0;
  const char* data = value.empty() ? &kEmpty : value.data();
  NoteBindResult(sqlite3_bind_blob64(stmt_, index, data, value.size(), SQLITE_TRANSIENT));
}

void Statement::BindBlobNoCopy(int index, std::string_view value) {
  static const char kEmpty = 0;
  const char* data = value.empty() ? &kEmpty : value.data();
  NoteBindResult(sqlite3_bind_blob64(stmt_, index, data, value.size(), SQLITE_STATIC));
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_error_ != 0) return db_->Error(bind_error_, what_);
  // A write that starts outside a transaction (BEGIN IMMEDIATE included)
  // asks the write check first.
  const bool outer_write =
      db_->depth_ == 0 && sqlite3_stmt_busy(stmt_) == 0 && sqlite3_stmt_readonly(stmt_) == 0;
  if (outer_write && db_->write_check_) FCA_RETURN_IF_ERROR(db_->write_check_());
  const int rc = sqlite3_step(stmt_);
  if (outer_write && db_->write_outcome_) {
    const int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
      db_->write_outcome_(/*blocked=*/true);
    } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
      db_->write_outcome_(/*blocked=*/false);
    }
  }
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, what_);
}

absl::Status Statement::Run() {
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

absl::Status Statement::Reset() {
  // sqlite3_reset repeats the last step's error, which Step() already
  // reported; the statement is usable again either way.
  sqlite3_reset(stmt_);
  return absl::OkStatus();
}

int64_t Statement::ColumnInt(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::ColumnDouble(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return sqlite3_column_double(stmt_, col);
}

bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

std::string Statement::ColumnText(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  const int size = sqlite3_column_bytes(stmt_, col);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(size));
}

std::string Statement::ColumnBlob(int col) const {
  std::string out;
  AppendColumnBlob(col, &out);
  return out;
}

int64_t Statement::AppendColumnBlob(int col, std::string* out) const {
  const void* data = sqlite3_column_blob(stmt_, col);
  const int size = sqlite3_column_bytes(stmt_, col);
  if (data != nullptr && size > 0) {
    out->append(static_cast<const char*>(data), static_cast<size_t>(size));
  }
  return size;
}

// --------------------------------------------------------------- BlobReader

BlobReader::BlobReader(BlobReader&& other) noexcept
    : db_(other.db_),
      table_(other.table_),
      column_(other.column_),
      what_(other.what_),
      blob_(std::exchange(other.blob_, nullptr)) {}

BlobReader::~BlobReader() {
  if (blob_ != nullptr) sqlite3_blob_close(blob_);
}

absl::StatusOr<int64_t> BlobReader::AppendTo(int64_t rowid, std::string* out) {
  int rc;
  if (blob_ == nullptr) {
    rc = sqlite3_blob_open(db_->db_, "main", table_, column_, rowid,
                           /*flags=read-only*/ 0, &blob_);
  } else {
    rc = sqlite3_blob_reopen(blob_, rowid);
  }
  if (rc != SQLITE_OK) return db_->Error(rc, what_);
  const int size = sqlite3_blob_bytes(blob_);
  const size_t old_size = out->size();
  out->resize(old_size + static_cast<size_t>(size));
  rc = sqlite3_blob_read(blob_, out->data() + old_size, size, 0);
  if (rc != SQLITE_OK) {
    out->resize(old_size);
    return db_->Error(rc, what_);
  }
  return size;
}

// ----------------------------------------------------------------- Database

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                         int busy_timeout_ms, bool read_only) {
  sqlite3* raw = nullptr;
  // NOMUTEX: Store serializes every use of the connection itself.
  const int flags =
      (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
      SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // The handle is allocated even when opening fails and must be closed.
  std::unique_ptr<Database> db(new Database(raw, busy_timeout_ms));
  if (rc != SQLITE_OK) return db->Error(rc, "open database");
  sqlite3_extended_result_codes(raw, 1);
  const int busy_rc = sqlite3_busy_timeout(raw, busy_timeout_ms);
  if (busy_rc != SQLITE_OK) return db->Error(busy_rc, "set busy timeout");
  return db;
}

Database::~Database() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::StatusOr<Statement> Database::Prepare(std::string_view sql, const char* what) const {
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, &tail);
  if (rc != SQLITE_OK) {
    if (stmt != nullptr) sqlite3_finalize(stmt);
    return Error(rc, what);
  }
  Statement statement(this, stmt, what);
  for (const char* p = tail; p != nullptr && p < sql.data() + sql.size(); ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) {
      LOG(ERROR) << "storage: " << what << ": more than one SQL statement";
      return absl::InternalError(absl::StrFormat("storage: %s failed", what));
    }
  }
  if (stmt == nullptr) {  // empty text
    return absl::InternalError(absl::StrFormat("storage: %s failed", what));
  }
  return statement;
}

absl::Status Database::Execute(std::string_view sql, const char* what) const {
  FCA_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql, what));
  return stmt.Run();
}

absl::StatusOr<std::string> Database::QueryText(std::string_view sql, const char* what) const {
  FCA_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql, what));
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return std::string();
  std::string text = stmt.ColumnText(0);
  FCA_RETURN_IF_ERROR(stmt.Run());
  return text;
}

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int64_t Database::changes() const { return sqlite3_changes64(db_); }

absl::Status Database::Rollback(bool outermost) {
  // SQLite rolls a transaction back by itself after some errors (disk full,
  // I/O error); then there is nothing left to undo.
  if (sqlite3_get_autocommit(db_) != 0) return absl::OkStatus();
  if (outermost) return Execute("ROLLBACK", "roll back transaction");
  FCA_RETURN_IF_ERROR(Execute("ROLLBACK TO fca_nested", "roll back savepoint"));
  return Execute("RELEASE fca_nested", "release savepoint");
}

absl::Status Database::Transaction(const std::function<absl::Status()>& fn) {
  const bool outermost = depth_ == 0;
  if (outermost) {
    FCA_RETURN_IF_ERROR(Execute("BEGIN IMMEDIATE", "begin transaction"));
  } else {
    FCA_RETURN_IF_ERROR(Execute("SAVEPOINT fca_nested", "open savepoint"));
  }
  ++depth_;
  absl::Status status;
  try {
    status = fn();
  } catch (...) {
    --depth_;
    // The exception tells the caller that nothing was kept; a rollback that
    // fails as well can only be logged.
    LogIfError("storage: rollback after an exception", Rollback(outermost));
    throw;
  }
  --depth_;
  if (!status.ok()) {
    LogIfError(absl::StrCat("storage: rollback after: ", status.ToString()), Rollback(outermost));
    return status;
  }
  if (sqlite3_get_autocommit(db_) != 0) {
    // An error inside `fn` made SQLite abandon the transaction, and `fn`
    // chose to ignore it: nothing of it was kept.
    return absl::AbortedError("storage: transaction was rolled back");
  }
  absl::Status commit = outermost ? Execute("COMMIT", "commit transaction")
                                  : Execute("RELEASE fca_nested", "release savepoint");
  if (!commit.ok()) {
    // The caller gets the commit's error; a rollback that fails as well
    // can only be logged.
    LogIfError("storage: rollback after a failed commit", Rollback(outermost));
    return commit;
  }
  return absl::OkStatus();
}

absl::Status Database::ProbeWriteLock() {
  sqlite3_busy_timeout(db_, 0);
  absl::Status begun = Execute("BEGIN IMMEDIATE", "probe the write lock");
  sqlite3_busy_timeout(db_, busy_timeout_ms_);
  FCA_RETURN_IF_ERROR(begun);
  return Execute("ROLLBACK", "probe the write lock");
}

absl::StatusOr<std::string> Database::IntegrityReport() const {
  std::string report;
  {
    FCA_ASSIGN_OR_RETURN(Statement stmt, Prepare("PRAGMA integrity_check", "check integrity"));
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      const std::string line = stmt.ColumnText(0);
      if (line == "ok") continue;
      report += line + "\n";
    }
  }
  FCA_ASSIGN_OR_RETURN(Statement fk, Prepare("PRAGMA foreign_key_check", "check foreign keys"));
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, fk.Step());
    if (!row) break;
    report += absl::StrFormat("foreign key violation: %s row %d -> %s\n", fk.ColumnText(0),
                              fk.ColumnInt(1), fk.ColumnText(2));
  }
  if (report.empty()) return std::string("ok");
  report.pop_back();
  return report;
}

absl::Status Database::CopyTo(
    Database* dest, int pages_per_step,
    const std::function<bool(int64_t done, int64_t total)>& after_step) const {
  sqlite3_backup* backup = sqlite3_backup_init(dest->db_, "main", db_, "main");
  if (backup == nullptr) return dest->Error(sqlite3_errcode(dest->db_), "start backup");
  int rc = SQLITE_OK;
  bool stopped = false;
  do {
    rc = sqlite3_backup_step(backup, pages_per_step);
    const int64_t total = sqlite3_backup_pagecount(backup);
    stopped = (rc == SQLITE_OK || rc == SQLITE_DONE) && after_step &&
              !after_step(total - sqlite3_backup_remaining(backup), total);
    // BUSY/LOCKED end the copy too: the connection's busy handler already
    // waited its timeout, as for any other call.
  } while (rc == SQLITE_OK && !stopped);
  // finish releases the backup's locks and returns the first error, if any.
  const int finish_rc = sqlite3_backup_finish(backup);
  if (stopped && rc != SQLITE_DONE) return absl::CancelledError("storage: backup stopped");
  if (rc != SQLITE_DONE) return Error(rc, "copy database");
  if (finish_rc != SQLITE_OK) return dest->Error(finish_rc, "finish backup");
  return absl::OkStatus();
}

absl::Status Database::Error(int rc, const char* what) const {
  const int primary = rc & 0xff;
  // A lock another connection holds past the busy timeout (BUSY, LOCKED,
  // and PROTOCOL: WAL mode's locking race lost for seconds on end, "very,
  // very rarely", sqlite.org/rescode.html#protocol) is the moment's, not a
  // fault: UNAVAILABLE, which callers retry, and no error in the log.
  const bool busy =
      primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_PROTOCOL;
  if (!busy) {
    // The detail stays in the log: statuses carry short, sanitized messages.
    LOG(ERROR) << "storage: " << what << ": sqlite error " << rc << " (" << sqlite3_errstr(rc)
               << "): " << (db_ != nullptr ? sqlite3_errmsg(db_) : "no connection");
  }
  switch (primary) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
      return absl::UnavailableError(absl::StrFormat("storage: %s: database is busy, retry", what));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrFormat("storage: %s: disk or database is full", what));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(
          absl::StrFormat("storage: %s: database file is corrupt or not a database", what));
    case SQLITE_CANTOPEN:
      return absl::FailedPreconditionError(
          absl::StrFormat("storage: %s: cannot open the database file", what));
    case SQLITE_READONLY:
      return absl::FailedPreconditionError(
          absl::StrFormat("storage: %s: database is read-only", what));
    case SQLITE_CONSTRAINT:
      switch (rc) {
        case SQLITE_CONSTRAINT_UNIQUE:
        case SQLITE_CONSTRAINT_PRIMARYKEY:
          return absl::AlreadyExistsError(absl::StrFormat("storage: %s: already exists", what));
        case SQLITE_CONSTRAINT_FOREIGNKEY:
          return absl::FailedPreconditionError(
              absl::StrFormat("storage: %s: refers to a missing record", what));
        default:
          return absl::InvalidArgumentError(absl::StrFormat("storage: %s: value rejected", what));
      }
    default:
      return absl::InternalError(absl::StrFormat("storage: %s failed", what));
  }
}

}  // namespace fca::storage
