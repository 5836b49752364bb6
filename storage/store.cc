// Store: opening, transactions, models, API keys and shared helpers. The
// other tables live in store_datasets.cc, store_jobs.cc, store_results.cc
// and store_coefficients.cc.
#include "storage/store.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "storage/store_internal.h"

namespace fca::storage {

// ------------------------------------------------------------- job states

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "QUEUED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

absl::StatusOr<JobState> ParseJobState(std::string_view name) {
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                         JobState::kFailed, JobState::kCancelled}) {
    if (name == JobStateName(state)) return state;
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown job state '%s'", name));
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

// ---------------------------------------------------------------- helpers

namespace internal {

absl::Status InsertChunks(Statement& insert, const std::string& bytes, int64_t chunk_bytes,
                          int64_t* num_chunks) {
  const std::string_view all(bytes);
  int64_t index = 0;
  for (size_t offset = 0; offset < all.size();
       offset += static_cast<size_t>(chunk_bytes), ++index) {
    insert.BindInt(2, index);
    // No copy: `bytes` outlives the statement's use of the chunk.
    insert.BindBlobNoCopy(3, all.substr(offset, static_cast<size_t>(chunk_bytes)));
    FCA_RETURN_IF_ERROR(insert.Run());
    FCA_RETURN_IF_ERROR(insert.Reset());
  }
  *num_chunks = index;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadChunks(Statement& select, BlobReader& reader,
                                       int64_t expected_bytes, int64_t expected_chunks) {
  std::string out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(expected_bytes, 0)));
  int64_t chunks = 0;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, select.Step());
    if (!row) break;
    if (static_cast<int64_t>(out.size()) > expected_bytes) break;  // corrupt
    FCA_RETURN_IF_ERROR(reader.AppendTo(select.ColumnInt(0), &out).status());
    ++chunks;
  }
  if (chunks != expected_chunks || static_cast<int64_t>(out.size()) != expected_bytes) {
    return absl::DataLossError("storage: stored data is incomplete");
  }
  return out;
}

void WhereBuilder::Add(const char* fragment, int64_t value) {
  fragments_.emplace_back(fragment);
  values_.emplace_back(value);
}

void WhereBuilder::Add(const char* fragment, std::string value) {
  fragments_.emplace_back(fragment);
  values_.emplace_back(std::move(value));
}

template <typename T>
void WhereBuilder::AddInValues(const char* column, const std::vector<T>& values) {
  std::string fragment = std::string(column) + " IN (";
  for (size_t i = 0; i < values.size(); ++i) {
    fragment += i == 0 ? "?" : ", ?";
    values_.emplace_back(values[i]);
  }
  fragment += ")";
  fragments_.push_back(std::move(fragment));
}

void WhereBuilder::AddIn(const char* column, const std::vector<std::string>& values) {
  AddInValues(column, values);
}

void WhereBuilder::AddIn(const char* column, const std::vector<int64_t>& values) {
  AddInValues(column, values);
}

std::string WhereBuilder::Sql() const {
  std::string sql;
  for (size_t i = 0; i < fragments_.size(); ++i) {
    sql += i == 0 ? " WHERE " : " AND ";
    sql += fragments_[i];
  }
  return sql;
}

void WhereBuilder::BindAll(Statement& stmt) const {
  for (size_t i = 0; i < values_.size(); ++i) {
    const int index = static_cast<int>(i) + 1;
    if (const int64_t* v = std::get_if<int64_t>(&values_[i])) {
      stmt.BindInt(index, *v);
    } else {
      stmt.BindText(index, std::get<std::string>(values_[i]));
    }
  }
}

absl::StatusOr<std::vector<int64_t>> ReadIds(Statement& select) {
  std::vector<int64_t> ids;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, select.Step());
    if (!row) return ids;
    ids.push_back(select.ColumnInt(0));
  }
}

std::string MakePageToken(char kind, int64_t last_id) {
  return absl::StrFormat("%c%d", kind, last_id);
}

absl::StatusOr<std::optional<int64_t>> ParsePageToken(char kind, const std::string& token) {
  if (token.empty()) return std::optional<int64_t>();
  const absl::Status bad = absl::InvalidArgumentError("invalid page_token");
  // At most 18 digits: always fits int64, and row ids never get longer.
  if (token.size() < 2 || token.size() > 19 || token[0] != kind) return bad;
  int64_t id = 0;
  for (size_t i = 1; i < token.size(); ++i) {
    const char c = token[i];
    if (c < '0' || c > '9') return bad;
    id = id * 10 + (c - '0');
  }
  if (token.size() > 2 && token[1] == '0') return bad;  // not one we made
  return std::optional<int64_t>(id);
}

absl::StatusOr<int> EffectivePageSize(int page_size) {
  if (page_size < 0) {
    return absl::InvalidArgumentError("page_size must not be negative");
  }
  if (page_size == 0) return Store::kDefaultPageSize;
  return std::min(page_size, Store::kMaxPageSize);
}

}  // namespace internal

// ------------------------------------------------------------ open, close

Store::Store(const StoreOptions& options, std::unique_ptr<Database> db)
    : options_(options), db_(std::move(db)) {
  db_->set_write_outcome([this](bool blocked) { NoteWriteOutcome(blocked); });
}

Store::~Store() {
  {
    absl::MutexLock lock(&key_use_mu_);
    key_use_stop_ = true;
    key_use_due_.Signal();
  }
  if (key_use_writer_.joinable()) key_use_writer_.join();  // writes what is queued
  StopWatching();
  // Statistics for the next start's planner; the store closes either way.
  LogIfError("storage: optimize at close", Optimize());
  reader_.reset();  // the main connection closes last: it checkpoints the log
  db_.reset();      // close the database before giving up the lock
  if (lock_fd_ >= 0) close(lock_fd_);
}

namespace {

// flock() on the database file itself: the lock belongs to its inode, so
// every name of the file (a symlink, a relative path, a hard link) takes the
// same one. Linux keeps flock() locks apart from SQLite's POSIX (fcntl)
// locks on the same file, and releases it when the process dies however it
// dies. The descriptor stays open until the database is closed: closing
// any descriptor of the file would drop SQLite's POSIX locks with it.
absl::StatusOr<int> LockExclusively(const std::string& db_path) {
  const std::string& path = db_path;
  // 0644: the mode SQLite itself creates a database with.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("storage: cannot create %s: %s", path, std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "storage: another fca-server is using %s (it holds a lock on the file, under "
          "whichever name it opened it); one database serves one server",
          db_path));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("storage: cannot lock %s: %s", path, std::strerror(error)));
  }
  return fd;
}

// Deleted jobs and datasets give their pages back to the file system only
// with auto_vacuum = INCREMENTAL, which a file takes when it is created or
// rewritten by VACUUM (once, here, for files made by older servers).
absl::Status EnableIncrementalVacuum(Database& db) {
  FCA_ASSIGN_OR_RETURN(const std::string mode, db.QueryText("PRAGMA auto_vacuum", "vacuum mode"));
  if (mode == "2") return absl::OkStatus();
  FCA_ASSIGN_OR_RETURN(const std::string version,
                       db.QueryText("PRAGMA user_version", "read schema version"));
  FCA_RETURN_IF_ERROR(db.Execute("PRAGMA auto_vacuum = INCREMENTAL", "set vacuum mode"));
  if (version == "0") return absl::OkStatus();  // a new file: takes effect now
  LOG(INFO) << "storage: rewriting the database once for incremental vacuum";
  return db.Execute("VACUUM", "vacuum");
}

}  // namespace

absl::Status Store::Inject(std::string_view op) const {
  if (!options_.fault_injector) return absl::OkStatus();
  return options_.fault_injector(op);
}

absl::Status Store::ReclaimSpace() {
  RecursiveMutexLock lock(&mu_);
  return ReclaimSpaceLocked();
}

absl::Status Store::ReclaimSpaceLocked() {
  return db_->Execute("PRAGMA incremental_vacuum", "reclaim space");
}

absl::Status Store::CheckpointLocked() {
  FCA_ASSIGN_OR_RETURN(const std::string busy,
                       db_->QueryText("PRAGMA wal_checkpoint(TRUNCATE)", "checkpoint"));
  if (busy == "1") return absl::UnavailableError("storage: checkpoint: database is busy, retry");
  return absl::OkStatus();
}

absl::Status Store::ReclaimInStepsLocked() {
  // 64 pages (1 MiB) a step: moving a page writes it and its neighbours
  // through the write-ahead log, which the checkpoint then empties.
  int64_t before = -1;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const std::string text,
                         db_->QueryText("PRAGMA freelist_count", "count free pages"));
    const int64_t free_pages = std::strtoll(text.c_str(), nullptr, 10);
    if (free_pages == 0 || free_pages == before) return absl::OkStatus();
    before = free_pages;
    FCA_RETURN_IF_ERROR(db_->Execute("PRAGMA incremental_vacuum(64)", "reclaim space"));
    FCA_RETURN_IF_ERROR(CheckpointLocked());
  }
}

absl::Status Store::DeleteLocked(const std::function<absl::Status()>& remove) {
  absl::Status removed = db_->Transaction(remove);
  absl::Status reclaimed = removed.ok() ? ReclaimSpaceLocked() : absl::OkStatus();
  const bool full = absl::IsResourceExhausted(removed) || absl::IsResourceExhausted(reclaimed);
  if (!full || reserve_ == nullptr || !reserve_->Release("for a delete")) {
    return removed.ok() ? reclaimed : removed;
  }
  // The write-ahead log may hold pages the file has no room for yet: with
  // the reserve's room they go into the file and the log is emptied.
  LogIfError("storage: checkpoint on a full disk", CheckpointLocked());
  if (!removed.ok()) removed = db_->Transaction(remove);
  if (removed.ok()) reclaimed = ReclaimInStepsLocked();
  reserve_->Fill();
  return removed.ok() ? reclaimed : removed;
}

absl::Status Store::CheckFile() {
  return file_watch_ != nullptr ? file_watch_->Check() : absl::OkStatus();
}

void Store::StartWatching() {
  if (options_.file_check_interval_ms <= 0 || file_watch_ == nullptr) return;
  watcher_ = std::thread([this] {
    while (true) {
      {
        absl::MutexLock lock(&watch_mu_);
        if (watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_),
                                       absl::Milliseconds(options_.file_check_interval_ms))) {
          return;
        }
      }
      // The reserve is taken again once deletes made room (logged there).
      if (file_watch_->Check().ok() && reserve_ != nullptr) reserve_->Fill();
      ProbeWriteLock();
    }
  });
}

void Store::StopWatching() {
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

absl::Status Store::Optimize() {
  RecursiveMutexLock lock(&mu_);
  return db_->Execute("PRAGMA optimize", "optimize");
}

int64_t Store::FullScanSteps() {
  int64_t steps = 0;
  if (reader_ != nullptr) {
    absl::MutexLock lock(&read_mu_);
    steps += reader_->full_scan_steps();
  }
  RecursiveMutexLock lock(&mu_);
  return steps + db_->full_scan_steps();
}

int64_t Store::WritesBlockedForUs() const {
  const int64_t since = writes_blocked_since_us_.load();
  return since == 0 ? 0 : std::max<int64_t>(Now() - since, 0);
}

void Store::NoteWriteOutcome(bool blocked) {
  if (!blocked) {
    writes_blocked_since_us_.store(0);
    return;
  }
  int64_t none = 0;
  writes_blocked_since_us_.compare_exchange_strong(none, Now());
}

void Store::ProbeWriteLock() {
  RecursiveMutexLock lock(&mu_);
  // The outcome is what counts (NoteWriteOutcome), not the status.
  if (!db_->in_transaction()) db_->ProbeWriteLock().IgnoreError();
}

namespace {

// Room a start needs: SQLite cannot even read a database in WAL mode
// without room for its -shm index ("disk I/O error"), and a migration
// writes.
constexpr int64_t kRoomToStartBytes = int64_t{4} << 20;

bool DiskFullBeside(const std::string& path) {
  const std::optional<int64_t> free_bytes = FreeBytesBeside(path);
  return free_bytes.has_value() && *free_bytes < kRoomToStartBytes;
}

// A restart on a full disk: the reserve the last run kept is given back
// first (Open fills it again once the store is open, or the watch thread
// does once there is room).
void GiveBackReserveIfDiskFull(const StoreOptions& options) {
  if (!DiskFullBeside(options.path)) return;
  DiskReserve(CanonicalPath(options.path) + ".reserve", options.disk_reserve_bytes)
      .Release("to open the database");
}

// `failed` (a failed open), saying so when the disk is full: SQLite's own
// word for it at open is an I/O error.
absl::Status SayIfDiskFull(const std::string& path, const absl::Status& failed) {
  if (!DiskFullBeside(path)) return failed;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: the disk holding the database is full (less than %d MiB free); free some room and "
      "start again",
      failed.message(), kRoomToStartBytes >> 20));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("storage: database path is empty");
  }
  if (options.file_check_interval_ms < 0 || options.disk_reserve_bytes < 0) {
    return absl::InvalidArgumentError(
        "storage: file_check_interval_ms and disk_reserve_bytes must not be negative");
  }
  if (options.busy_timeout_ms < 0) {
    return absl::InvalidArgumentError("storage: busy_timeout_ms is negative");
  }
  if (options.coeff_cache_budget_bytes < 0) {
    return absl::InvalidArgumentError("storage: coeff_cache_budget_bytes is negative");
  }
  // SQLite refuses values near 1 GB; chunks far below that stream well.
  constexpr int64_t kMaxChunkBytes = int64_t{256} << 20;
  if (options.chunk_bytes < 1 || options.chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError("storage: chunk_bytes must be in [1, 256 MiB]");
  }
  int lock_fd = -1;
  if (options.exclusive && options.path != ":memory:") {
    FCA_ASSIGN_OR_RETURN(lock_fd, LockExclusively(options.path));
  }
  const bool file = options.path != ":memory:";
  if (file && options.disk_reserve_bytes > 0) GiveBackReserveIfDiskFull(options);
  absl::StatusOr<std::unique_ptr<Store>> store = OpenLocked(options);
  if (!store.ok()) {
    if (lock_fd >= 0) close(lock_fd);
    return file ? SayIfDiskFull(options.path, store.status()) : store.status();
  }
  Store& opened = **store;
  opened.lock_fd_ = lock_fd;
  if (options.path != ":memory:") {
    const std::string canonical = CanonicalPath(options.path);
    opened.file_watch_ = std::make_unique<FileWatch>(canonical);
    FCA_ASSIGN_OR_RETURN(opened.reader_,
                         Database::Open(options.path, options.busy_timeout_ms, /*read_only=*/true));
    RecursiveMutexLock lock(&opened.mu_);
    opened.db_->set_write_check([watch = opened.file_watch_.get()] { return watch->Check(); });
    if (options.disk_reserve_bytes > 0) {
      opened.reserve_ =
          std::make_unique<DiskReserve>(canonical + ".reserve", options.disk_reserve_bytes);
      opened.reserve_->Fill();
    }
  }
  opened.StartWatching();
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenLocked(const StoreOptions& options) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Database> db,
                       Database::Open(options.path, options.busy_timeout_ms));
  // 16 KiB pages: multi-megabyte chunks take a quarter of the page
  // overhead of the 4 KiB default (blob writes measured ~1.4x and reads
  // ~1.7x faster) and result queries are no slower. Only takes effect when
  // the file is created.
  FCA_RETURN_IF_ERROR(db->Execute("PRAGMA page_size = 16384", "set page size"));
  FCA_RETURN_IF_ERROR(EnableIncrementalVacuum(*db));
  if (options.path != ":memory:") {
    FCA_ASSIGN_OR_RETURN(const std::string mode,
                         db->QueryText("PRAGMA journal_mode = WAL", "enable write-ahead log"));
    if (mode != "wal") {
      return absl::FailedPreconditionError(
          "storage: the database file does not support write-ahead logging");
    }
    // Bounds the -wal file left behind after checkpoints.
    FCA_RETURN_IF_ERROR(db->Execute("PRAGMA journal_size_limit = 67108864", "limit journal size"));
  }
  FCA_RETURN_IF_ERROR(db->Execute("PRAGMA synchronous = NORMAL", "set synchronous mode"));
  FCA_RETURN_IF_ERROR(db->Execute("PRAGMA foreign_keys = ON", "enable foreign keys"));
  FCA_ASSIGN_OR_RETURN(const std::string fk,
                       db->QueryText("PRAGMA foreign_keys", "check foreign keys"));
  if (fk != "1") {
    return absl::InternalError("storage: foreign keys are not supported");
  }
  FCA_RETURN_IF_ERROR(MigrateSchema(*db));
  return std::unique_ptr<Store>(new Store(options, std::move(db)));
}

int64_t Store::Now() const {
  if (options_.now_us) return options_.now_us();
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Store::Transaction(const std::function<absl::Status()>& fn) {
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction(fn);
}

absl::StatusOr<std::string> Store::IntegrityCheck() {
  RecursiveMutexLock lock(&mu_);
  return db_->IntegrityReport();
}

// ----------------------------------------------------------------- models

namespace {

constexpr char kSelectModel[] =
    "SELECT name, family, weights_sha256, config_json, num_parameters, "
    "registered_at_us FROM models";

ModelRecord ReadModel(const Statement& stmt) {
  ModelRecord model;
  model.name = stmt.ColumnText(0);
  model.family = stmt.ColumnText(1);
  model.weights_sha256 = stmt.ColumnText(2);
  model.config_json = stmt.ColumnText(3);
  model.num_parameters = stmt.ColumnInt(4);
  model.registered_at_us = stmt.ColumnInt(5);
  return model;
}

}  // namespace

absl::StatusOr<ModelRecord> Store::UpsertModel(const ModelRecord& model) {
  if (model.name.empty()) {
    return absl::InvalidArgumentError("model name is empty");
  }
  if (model.num_parameters < 0) {
    return absl::InvalidArgumentError("num_parameters is negative");
  }
  RecursiveMutexLock lock(&mu_);
  ModelRecord stored;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(
        Statement upsert,
        db_->Prepare("INSERT INTO models (name, family, weights_sha256, config_json, "
                     "num_parameters, registered_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                     "ON CONFLICT (name) DO UPDATE SET family = excluded.family, "
                     "weights_sha256 = excluded.weights_sha256, "
                     "config_json = excluded.config_json, "
                     "num_parameters = excluded.num_parameters, "
                     "registered_at_us = CASE WHEN models.weights_sha256 = "
                     "excluded.weights_sha256 THEN models.registered_at_us "
                     "ELSE excluded.registered_at_us END",
                     "register model"));
    upsert.BindText(1, model.name);
    upsert.BindText(2, model.family);
    upsert.BindText(3, model.weights_sha256);
    upsert.BindText(4, model.config_json);
    upsert.BindInt(5, model.num_parameters);
    upsert.BindInt(6, Now());
    FCA_RETURN_IF_ERROR(upsert.Run());
    FCA_ASSIGN_OR_RETURN(stored, GetModelLocked(model.name));
    return absl::OkStatus();
  }));
  return stored;
}

namespace {

absl::StatusOr<ModelRecord> GetModelIn(const Database& db, const std::string& name) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db.Prepare(std::string(kSelectModel) + " WHERE name = ?1", "get model"));
  stmt.BindText(1, name);
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrFormat("model '%s' not found", name));
  }
  return ReadModel(stmt);
}

}  // namespace

absl::StatusOr<ModelRecord> Store::GetModel(const std::string& name) {
  return Read([&](Database& db) { return GetModelIn(db, name); });
}

absl::StatusOr<ModelRecord> Store::GetModelLocked(const std::string& name) {
  return GetModelIn(*db_, name);
}

absl::StatusOr<std::vector<ModelRecord>> Store::ListModels() {
  return Read([&](Database& db) -> absl::StatusOr<std::vector<ModelRecord>> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare(std::string(kSelectModel) + " ORDER BY name", "list models"));
    std::vector<ModelRecord> models;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      models.push_back(ReadModel(stmt));
    }
    return models;
  });
}

}  // namespace fca::storage
