// Thin RAII wrappers over the SQLite C API, for use inside storage/ only.
//
// Every statement is prepared from SQL text written in this folder; values
// always travel as bound parameters, never inside the text. Errors come back
// as absl::Status with short, sanitized messages (no SQL, no paths); the
// SQLite details are written to stderr for the server log.
//
// Thread-safety: none. A Database and its Statements must be used by one
// thread at a time; Store serializes all use of its Database with a mutex.
#ifndef FCA_STORAGE_SQLITE_H_
#define FCA_STORAGE_SQLITE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Opaque SQLite handles; <sqlite3.h> is included by storage/*.cc only.
struct sqlite3;
struct sqlite3_blob;
struct sqlite3_stmt;

namespace fca::storage {

class Database;

// One prepared statement. Finalized on destruction; must not outlive the
// Database that prepared it.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Binders take 1-based parameter indexes, like SQLite. A binding error is
  // remembered and reported by the next Step()/Run(), so call sites stay flat.
  void BindInt(int index, int64_t value);
  // NaN is stored as NULL by SQLite; ColumnDouble() reads NULL back as NaN.
  void BindDouble(int index, double value);
  void BindNull(int index);
  void BindText(int index, std::string_view value);  // copied
  void BindBlob(int index, std::string_view value);  // copied
  // Binds without copying: `value` must stay alive and unchanged until the
  // statement is reset, rebound or destroyed.
  void BindBlobNoCopy(int index, std::string_view value);

  // Advances the statement: true when a row is available, false when done.
  [[nodiscard]] absl::StatusOr<bool> Step();
  // Steps until done, ignoring any rows.
  [[nodiscard]] absl::Status Run();
  // Makes the statement ready to step again; bindings are kept.
  [[nodiscard]] absl::Status Reset();

  // Column readers for the current row (0-based columns).
  int64_t ColumnInt(int col) const;
  double ColumnDouble(int col) const;  // NULL -> quiet NaN
  bool ColumnIsNull(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;
  // Appends the blob in `col` to *out; returns its size in bytes.
  int64_t AppendColumnBlob(int col, std::string* out) const;

 private:
  friend class Database;
  Statement(const Database* db, sqlite3_stmt* stmt, const char* what)
      : db_(db), stmt_(stmt), what_(what) {}
  void NoteBindResult(int rc);
  // Finalizes the statement, adding its scan steps to the database's.
  void Finalize();

  const Database* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  const char* what_ = "";  // static label for error messages
  int bind_error_ = 0;     // first failed sqlite3_bind_* result code
};

// Reads whole blob values of one column straight into the caller's buffer
// (sqlite3_blob), without the intermediate copy a column read makes: the
// fast path for multi-megabyte chunks. Closed on destruction; must not
// outlive the Database.
class BlobReader {
 public:
  BlobReader(BlobReader&& other) noexcept;
  BlobReader& operator=(BlobReader&& other) = delete;
  BlobReader(const BlobReader&) = delete;
  BlobReader& operator=(const BlobReader&) = delete;
  ~BlobReader();

  // Appends the value in row `rowid` to *out; returns its size in bytes.
  [[nodiscard]] absl::StatusOr<int64_t> AppendTo(int64_t rowid, std::string* out);

 private:
  friend class Database;
  BlobReader(const Database* db, const char* table, const char* column, const char* what)
      : db_(db), table_(table), column_(column), what_(what) {}

  const Database* db_;
  const char* table_;  // static names
  const char* column_;
  const char* what_;
  sqlite3_blob* blob_ = nullptr;  // opened on the first row, then reopened
};

// One SQLite connection.
class Database {
 public:
  // Opens (creating if needed) the database at `path`; ":memory:" is a
  // private in-memory database. Extended result codes are enabled and the
  // busy handler waits up to `busy_timeout_ms` for locks held elsewhere.
  // `read_only`: an existing file, opened for reading only (Store's read
  // connection).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                                      int busy_timeout_ms,
                                                                      bool read_only = false);
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Prepares exactly one statement (trailing text other than white space is
  // an INTERNAL error). `sql` must be SQL written in storage/, never built
  // from values; `what` is a static label naming the operation in errors.
  [[nodiscard]] absl::StatusOr<Statement> Prepare(std::string_view sql, const char* what) const;
  // Prepare() + Run(), for parameterless statements (pragmas, DDL).
  [[nodiscard]] absl::Status Execute(std::string_view sql, const char* what) const;
  // A reader of `table`.`column` (static names written in storage/).
  BlobReader NewBlobReader(const char* table, const char* column, const char* what) const {
    return BlobReader(this, table, column, what);
  }
  // Runs a statement returning one row with one column and returns it as
  // text (pragmas such as journal_mode).
  [[nodiscard]] absl::StatusOr<std::string> QueryText(std::string_view sql, const char* what) const;

  // Runs `fn` atomically. The outermost call issues BEGIN IMMEDIATE (the
  // write lock is taken up front, so a transaction never fails half way for
  // lack of it) and COMMITs when `fn` returns OK, or ROLLs BACK otherwise.
  // A nested call runs inside a SAVEPOINT of the enclosing transaction: when
  // its `fn` fails, only its own changes are undone and its status is
  // returned to the enclosing `fn`, which decides. If `fn` throws, the
  // transaction is rolled back and the exception propagates.
  // Returns UNAVAILABLE when the write lock stays busy past the timeout.
  [[nodiscard]] absl::Status Transaction(const std::function<absl::Status()>& fn);
  bool in_transaction() const { return depth_ > 0; }
  // Asked before every write that does not join a transaction already
  // (each outermost Transaction(), each write statement on its own): a
  // non-OK status is returned instead and nothing is written. The store
  // refuses writes to a database file that was deleted or replaced.
  void set_write_check(std::function<absl::Status()> check) { write_check_ = std::move(check); }
  // Told the outcome of every write that does not join a transaction
  // already (as set_write_check): `blocked` when another connection held
  // the write lock past the busy timeout, false when the write went through.
  // Other failures are not reported.
  void set_write_outcome(std::function<void(bool blocked)> outcome) {
    write_outcome_ = std::move(outcome);
  }
  // Takes the write lock and gives it back at once, without waiting for it:
  // UNAVAILABLE when another connection holds it (the write outcome is told
  // either way). Outside a transaction only.
  [[nodiscard]] absl::Status ProbeWriteLock();

  // "ok" when PRAGMA integrity_check and foreign_key_check find nothing
  // wrong; otherwise the problems they report, one per line.
  [[nodiscard]] absl::StatusOr<std::string> IntegrityReport() const;

  // Copies this connection's main database into `dest` (replacing all of
  // its content) through SQLite's online backup API, `pages_per_step` pages
  // a step. After each step `after_step(done, total)` is called; false stops
  // the copy (CANCELLED). The copy is of one snapshot only when this
  // connection holds a read transaction for the whole call (see
  // storage/backup.cc); otherwise a commit by another connection between
  // steps makes SQLite start the copy again.
  [[nodiscard]] absl::Status CopyTo(
      Database* dest, int pages_per_step,
      const std::function<bool(int64_t done, int64_t total)>& after_step) const;

  int64_t last_insert_rowid() const;
  // Rows changed by the most recent INSERT/UPDATE/DELETE.
  int64_t changes() const;
  // Steps of full table or index scans (SQLITE_STMTSTATUS_FULLSCAN_STEP)
  // over every statement finalized so far: how a test sees that a query
  // the server repeats searches an index instead of reading every row.
  int64_t full_scan_steps() const { return full_scan_steps_; }

  // Maps SQLite result code `rc` to a status (BUSY/LOCKED/PROTOCOL -> UNAVAILABLE,
  // FULL -> RESOURCE_EXHAUSTED, CORRUPT/NOTADB -> DATA_LOSS, CANTOPEN and
  // READONLY -> FAILED_PRECONDITION, constraint violations -> ALREADY_EXISTS /
  // FAILED_PRECONDITION / INVALID_ARGUMENT, anything else -> INTERNAL) whose
  // message names `what` only. Logs SQLite's own message, except for the
  // UNAVAILABLE ones.
  [[nodiscard]] absl::Status Error(int rc, const char* what) const;

 private:
  friend class BlobReader;
  friend class Statement;
  Database(sqlite3* db, int busy_timeout_ms) : db_(db), busy_timeout_ms_(busy_timeout_ms) {}
  [[nodiscard]] absl::Status Rollback(bool outermost);

  sqlite3* db_ = nullptr;
  const int busy_timeout_ms_;
  int depth_ = 0;  // nesting depth of Transaction()
  // Added to by statements as they are finalized (one thread at a time,
  // like every use of the connection).
  mutable int64_t full_scan_steps_ = 0;
  std::function<absl::Status()> write_check_;
  std::function<void(bool blocked)> write_outcome_;
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_SQLITE_H_
