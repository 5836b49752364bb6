// Long file: the Store's whole interface, in sections naming the store_*.cc defining each.
// fca::storage::Store: the server's one SQLite database.
//
// Holds models, datasets (content-addressed, chunked), jobs and their event
// streams, results, the coefficient cache (bounded in bytes, least recently
// used evicted first), hashed API keys and the audit log.
//
// Thread-safety: every public method may be called from any thread. A Store
// owns one connection for writes and serializes calls on it; a Transaction()
// holds the store for its whole duration, so other writers wait until it
// ends. A file database has a second, read-only connection for the reads
// on the request path (see Read): they never wait behind a write, not even
// one that waits for another process's write lock. Several Stores (or
// processes) may open the same file: writers then take turns via SQLite's
// lock, waiting up to busy_timeout_ms.
//
// Errors (every method returns absl::Status / absl::StatusOr):
//   INVALID_ARGUMENT    a bad argument (empty name, unknown kind, bad token)
//   NOT_FOUND           no record with that id / name
//   ALREADY_EXISTS      a name already taken with different content
//   FAILED_PRECONDITION the record is not in a state that allows the call,
//                       or the database was written by a newer server
//   UNAVAILABLE         the database stayed locked past busy_timeout_ms: retry;
//                       or (a write) the file was deleted or replaced under
//                       the store: the message names it (see CheckFile)
//   RESOURCE_EXHAUSTED  disk full, or a cache entry larger than the budget
//   DATA_LOSS           the file is corrupt or stored bytes are incomplete
//   INTERNAL            any other SQLite failure
// Messages are short and safe to show a client (no SQL, no paths); SQLite's
// own diagnostics go to stderr.
//
// Durability: a file database runs in WAL mode with synchronous=NORMAL. A
// committed transaction survives a crash of the process; after a power loss
// the last few commits may be lost, but the file is never corrupt and a
// transaction is never half applied.
#ifndef FCA_STORAGE_STORE_H_
#define FCA_STORAGE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/database_file.h"
#include "storage/records.h"
#include "storage/recursive_mutex.h"
#include "storage/webhook_records.h"

namespace fca::storage {

class Database;

struct StoreOptions {
  // A file path (created if missing, with its -wal and -shm companions) or
  // ":memory:" for a private in-memory database (tests).
  std::string path;
  // How long a call waits for another connection's write lock before it
  // fails with UNAVAILABLE.
  int busy_timeout_ms = 5000;
  // Byte budget of the coefficient cache (meta + blob of every entry).
  int64_t coeff_cache_budget_bytes = int64_t{1} << 30;
  // Size of the chunks datasets and coefficient blobs are split into.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Clock for every stored time; unset means the wall clock.
  std::function<int64_t()> now_us;
  // Holds an exclusive flock() on the database file itself while the store
  // is open (on its inode, so every name of the file, hard links included,
  // takes the same lock), so a second server on the same
  // database fails to start (FAILED_PRECONDITION) instead of running the
  // same jobs twice. Off by default: tools and tests open one file several
  // times on purpose.
  bool exclusive = false;
  // A file database is watched: a write (and CheckFile()) is refused with
  // UNAVAILABLE once the file or its -wal was deleted or replaced under the
  // store. Besides before each write, it is checked this often by a thread
  // of the store (0: no thread).
  int file_check_interval_ms = 0;
  // Bytes kept allocated in "<canonical path>.reserve" (0: none). When a
  // delete finds the disk full, the reserve is given back for it, the
  // freed pages are returned to the file system, and the reserve is taken
  // again (at once, or by the watch thread once there is room).
  int64_t disk_reserve_bytes = 0;
  // Fault injection for tests: called at the start of every write, and of
  // the reads named here, with the operation's name ("create_job",
  // "claim_job", "finish_job", "requeue_jobs", "renew_lease",
  // "append_event", "insert_results", "put_coefficients",
  // "get_coefficients", "upload", "delete", "lookup_api_key", "add_api_key",
  // "note_api_key_use", "revoke_api_key", "rotate_api_key",
  // "append_audit_log", "purge_audit_log", "add_webhook", "remove_webhook",
  // "enqueue_webhook", "record_webhook_attempt", "mark_end_unobserved",
  // "membership": creating a project and changing its members); a non-OK
  // status is returned by that call as if SQLite had failed, and nothing is
  // written.
  std::function<absl::Status(std::string_view op)> fault_injector;
};

// How a task's lease is claimed (Store::ClaimTask).
struct ClaimRequest {
  std::string worker;    // who holds the lease; non-empty
  int64_t lease_us = 0;  // the lease runs out this long after the claim
  // 0: the oldest claimable task (QUEUED, placed by no executor, of a job
  // whose cancel was not requested), by job then index. Otherwise exactly
  // this task, when it is QUEUED and its job's cancel was not requested,
  // whoever placed it.
  int64_t task_id = 0;
  // Tasks this worker is not offered (it refused them and its back-off
  // runs: jobs::Refusals), either way.
  std::vector<int64_t> skip_task_ids;
};

// Tasks whose lease was lost (Store::ExpireLeases).
struct ExpiredTasks {
  std::vector<TaskRecord> requeued;
  std::vector<TaskRecord> failed;     // out of attempts: now FAILED with the reason
  std::vector<TaskRecord> cancelled;  // of jobs being stopped: now CANCELLED
};

// One class defined across store.cc and store_*.cc: each section heading
// below names the file that defines its methods. The members above the first
// heading are store.cc's; a private helper lives with the section it serves
// (store.cc for those that serve several).
class Store {
 public:
  // Largest and default page sizes of ListJobs and QueryResults; a larger
  // page_size is served as kMaxPageSize, 0 means kDefaultPageSize.
  static constexpr int kDefaultPageSize = 100;
  static constexpr int kMaxPageSize = 1000;
  // ListJobEvents serves at most this many events per call.
  static constexpr int kMaxEventsPerCall = 10000;
  // API keys shorter than this are refused (see AddApiKey).
  static constexpr size_t kMinApiKeyBytes = 16;

  // Opens or creates the database and migrates it to the current schema.
  // INVALID_ARGUMENT for bad options; FAILED_PRECONDITION when the file was
  // written by a newer schema version; DATA_LOSS when it is not a database.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);
  // The database's path as opened (":memory:" for an in-memory store).
  const std::string& path() const { return options_.path; }
  // Runs Optimize() (best effort; failures go to stderr) and closes. Must
  // not run while another thread still uses the store.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Runs `fn` atomically: commits when it returns OK, rolls back everything
  // it wrote otherwise and returns its status. `fn` may call any method of
  // this store (they join the transaction); a nested Transaction() whose fn
  // fails undoes only its own part and returns the error to the enclosing
  // fn. Every method that writes several rows uses this itself. `fn` runs on
  // the calling thread with the store held: it must not wait for another
  // thread that uses this store. UNAVAILABLE when the write lock is busy.
  [[nodiscard]] absl::Status Transaction(const std::function<absl::Status()>& fn)
      ABSL_LOCKS_EXCLUDED(mu_);

  // OK while the database file is the one opened (always for ":memory:");
  // UNAVAILABLE naming the file and whether it was deleted or replaced.
  [[nodiscard]] absl::Status CheckFile();

  // "ok" when PRAGMA integrity_check and foreign_key_check find nothing
  // wrong; otherwise the problems they report, one per line.
  [[nodiscard]] absl::StatusOr<std::string> IntegrityCheck() ABSL_LOCKS_EXCLUDED(mu_);

  // Refreshes the query planner's statistics (PRAGMA optimize): ANALYZEs
  // the tables this connection has queried whose statistics are missing or
  // which grew 25x since (about 70 ms per 100k result rows, holding the
  // store); otherwise nearly free. Without statistics, QueryResults with
  // several filters can pick a slow index. Call it now and then (e.g. after
  // a job finishes); the store also runs it when closed.
  [[nodiscard]] absl::Status Optimize() ABSL_LOCKS_EXCLUDED(mu_);
  // Rows stepped through by full table or index scans since the store
  // opened (Database::full_scan_steps). The queries the server repeats on
  // a timer (the coordinator's sweep) search indexes and add nothing, so a
  // test can tell when a planner statistics change turns one into a scan.
  int64_t FullScanSteps() ABSL_LOCKS_EXCLUDED(mu_);

  // For how long writes have been refused because another connection (an
  // operator's sqlite3 shell, a copy tool) holds the database's write lock
  // past busy_timeout_ms: 0 when the last write, or the watch thread's
  // probe of the lock (every file_check_interval_ms), got it.
  int64_t WritesBlockedForUs() const;
  // Past this, the server's /readyz answers 503: the store cannot take
  // writes (twice the default busy timeout, so one slow write is not it).
  static constexpr int64_t kWriteStallLimitUs = int64_t{10} * 1000 * 1000;

  // --------------------------------------------------------- Models (store.cc)
  // Inserts or replaces the model named `model.name`; registered_at_us is
  // set by the store (and kept when weights_sha256 is unchanged). Returns
  // the stored record.
  [[nodiscard]] absl::StatusOr<ModelRecord> UpsertModel(const ModelRecord& model)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<ModelRecord> GetModel(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  // All models, by name.
  [[nodiscard]] absl::StatusOr<std::vector<ModelRecord>> ListModels() ABSL_LOCKS_EXCLUDED(mu_);

  // ---------------------------------------------- Datasets (store_datasets.cc)
  // Stores `bytes` under (project, name), uploaded by `owner`; an empty
  // project is the owner's personal one (named like the owner). The bytes
  // are kept once per SHA-256, in chunks of chunk_bytes, and shared by every
  // dataset with that content. If (project, name) exists with the same
  // content and kind, returns the existing record; with different content
  // or kind, ALREADY_EXISTS. `kind` is "text" or "tokens"; name and owner
  // must be non-empty.
  [[nodiscard]] absl::StatusOr<DatasetRecord> PutDataset(
      const std::string& name, const std::string& kind, const std::string& owner,
      const std::string& bytes, const std::string& project = "") ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::StatusOr<DatasetRecord> GetDataset(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The dataset named `name` in `project`; NOT_FOUND when none.
  [[nodiscard]] absl::StatusOr<DatasetRecord> FindDataset(const std::string& name,
                                                          const std::string& project)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The oldest dataset of `project` with this content; NOT_FOUND when none.
  // Indexed: does not read the project's other datasets.
  [[nodiscard]] absl::StatusOr<DatasetRecord> FindDatasetByContent(const std::string& sha256,
                                                                   const std::string& project)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The datasets of `project`, or of every project when unset; by id.
  [[nodiscard]] absl::StatusOr<std::vector<DatasetRecord>> ListDatasets(
      const std::optional<std::string>& project) ABSL_LOCKS_EXCLUDED(mu_);
  // The same, newest first, one page (keyset on the id: page sizes and bad
  // tokens as ListJobs'). Datasets stored after the first page are not
  // shown on later pages, and none is shown twice.
  [[nodiscard]] absl::StatusOr<DatasetPage> ListDatasets(const std::optional<std::string>& project,
                                                         int page_size,
                                                         const std::string& page_token)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The dataset's bytes; DATA_LOSS when stored chunks are missing.
  [[nodiscard]] absl::StatusOr<std::string> ReadDatasetBytes(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // At most the first `max_bytes` of the dataset (whole chunks are read, the
  // rest is cut off): a job that uses a few windows reads only those.
  [[nodiscard]] absl::StatusOr<std::string> ReadDatasetPrefix(int64_t id, int64_t max_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the dataset (NOT_FOUND when absent). Its bytes are deleted too
  // unless another dataset has the same content. Returns the bytes freed.
  [[nodiscard]] absl::StatusOr<int64_t> DeleteDataset(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes `owner` keeps in the store: the content of each of their datasets
  // (once per distinct content) plus their uploads in progress. For quotas.
  [[nodiscard]] absl::StatusOr<int64_t> UserBytes(const std::string& owner)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------- Uploads (store_datasets.cc)
  // A dataset upload arrives chunk by chunk and is staged in the database,
  // so the server holds one chunk at a time, not the whole upload.
  // BeginUpload returns the upload's id; owner must be non-empty. The
  // dataset goes to `project` (empty: the owner's personal project).
  [[nodiscard]] absl::StatusOr<int64_t> BeginUpload(const std::string& owner,
                                                    const std::string& project = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Appends one chunk (NOT_FOUND for an unknown upload).
  [[nodiscard]] absl::Status AppendUpload(int64_t upload_id, const std::string& chunk)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Turns the staged bytes into dataset (project, name): as PutDataset, with
  // `sha256` the caller's hash of the bytes in order (checked against the
  // staged size only). The staged chunks are gone afterwards, whatever the
  // outcome, except after UNAVAILABLE (retry) or a rollback.
  [[nodiscard]] absl::StatusOr<DatasetRecord> FinishUpload(int64_t upload_id,
                                                           const std::string& name,
                                                           const std::string& kind,
                                                           const std::string& sha256)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops an unfinished upload; unknown ids are ignored.
  [[nodiscard]] absl::Status AbortUpload(int64_t upload_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every unfinished upload (at server start: their streams are gone).
  [[nodiscard]] absl::StatusOr<int64_t> DropUnfinishedUploads() ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------------ Jobs (store_jobs.cc)
  // A new QUEUED job with one QUEUED task per entry of `task_models` (the
  // audited models, in order), all in one transaction. owner must be
  // non-empty. A job without tasks ends when SettleJob finds it.
  // `provenance_json` is kept as given (JobRecord::provenance_json). The job
  // belongs to `project` (empty: the owner's personal project).
  [[nodiscard]] absl::StatusOr<JobRecord> CreateJob(
      const std::string& owner, const std::string& spec_json,
      const std::vector<std::string>& task_models = {}, const std::string& provenance_json = "",
      const std::string& project = "") ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::StatusOr<JobRecord> GetJob(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs matching `filter`, newest first. Pass the returned
  // next_page_token back to continue; jobs created after the first page are
  // not shown on later pages, and none is shown twice.
  [[nodiscard]] absl::StatusOr<JobPage> ListJobs(const JobFilter& filter, int page_size,
                                                 const std::string& page_token)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs of `owner` (everyone when unset) in any of `states` (any state
  // when empty). For per-user queue limits.
  [[nodiscard]] absl::StatusOr<int64_t> CountJobs(const std::optional<std::string>& owner,
                                                  const std::vector<JobState>& states)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs matching `filter` over all of ListJobs' pages (the same WHERE).
  [[nodiscard]] absl::StatusOr<int64_t> CountJobs(const JobFilter& filter) ABSL_LOCKS_EXCLUDED(mu_);
  // QUEUED -> CANCELLED at once (with its tasks); RUNNING -> cancel_requested
  // = true and its QUEUED tasks CANCELLED (running tasks see the request at
  // their next lease renewal; SettleJob ends the job once they have ended;
  // repeating is harmless); terminal -> FAILED_PRECONDITION. Returns the
  // job after the change.
  [[nodiscard]] absl::StatusOr<JobRecord> RequestCancel(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // RUNNING -> `state` (SUCCEEDED, FAILED or CANCELLED, else
  // INVALID_ARGUMENT) with `error`, whatever its tasks are doing (they are
  // CANCELLED if not ended). FAILED_PRECONDITION unless RUNNING.
  [[nodiscard]] absl::StatusOr<JobRecord> FinishJob(int64_t id, JobState state,
                                                    const std::string& error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes a finished job with its events and results (freeing their
  // pages, even on a full disk: see disk_reserve_bytes); FAILED_PRECONDITION
  // while it is QUEUED or RUNNING (cancel it first), NOT_FOUND when absent.
  [[nodiscard]] absl::Status DeleteJob(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // A job's end whose observer (the coordinator's: webhook deliveries)
  // failed is marked in the transaction that ends it, and unmarked in the
  // one that observes it later (server/jobs/coordinator.h ObserveEnd), so no
  // end goes unobserved and none is observed twice. NOT_FOUND when absent.
  [[nodiscard]] absl::Status MarkEndUnobserved(int64_t job_id) ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::Status MarkEndObserved(int64_t job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The marked jobs with ids above `after_id`, oldest first, at most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> UnobservedEnds(int limit, int64_t after_id = 0)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ---------------------------------------------------- Tasks (store_tasks.cc)
  // A job's tasks are claimed by workers under leases. The lease of a task
  // is (task id, lease_seq); every call that acts for a worker names it, and
  // a lease that is no longer the task's current one (it expired and the
  // task was claimed again, or the task ended) is FAILED_PRECONDITION.
  //
  // The tasks of a job, by index; NOT_FOUND for an unknown job.
  [[nodiscard]] absl::StatusOr<std::vector<TaskRecord>> ListTasks(int64_t job_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::StatusOr<TaskRecord> GetTask(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks in `state` across jobs, oldest first, at most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<TaskRecord>> ListTasksInState(JobState state, int limit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every QUEUED or RUNNING task of a QUEUED or RUNNING job, in the order
  // workers claim them (by job, then index).
  [[nodiscard]] absl::StatusOr<std::vector<ActiveTask>> ListActiveTasks() ABSL_LOCKS_EXCLUDED(mu_);
  // Atomically moves a task (see ClaimRequest) QUEUED -> RUNNING under a new
  // lease (lease_seq + 1, attempts + 1, expiry now + lease_us) and its job
  // QUEUED -> RUNNING; nullopt when there is none to claim. Safe with
  // several coordinators, even in several processes.
  [[nodiscard]] absl::StatusOr<std::optional<TaskClaim>> ClaimTask(const ClaimRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Extends the lease to now + lease_us and returns the task with its job
  // (whose cancel_requested tells the worker to stop).
  [[nodiscard]] absl::StatusOr<TaskClaim> RenewLease(int64_t task_id, int64_t lease_seq,
                                                     int64_t lease_us) ABSL_LOCKS_EXCLUDED(mu_);
  // The task and its job when (task_id, lease_seq) is its current lease;
  // FAILED_PRECONDITION otherwise, NOT_FOUND for an unknown task.
  [[nodiscard]] absl::StatusOr<TaskClaim> CheckLease(int64_t task_id, int64_t lease_seq)
      ABSL_LOCKS_EXCLUDED(mu_);
  // RUNNING under the lease -> `state` (terminal, else INVALID_ARGUMENT)
  // with `error`, and `provenance_json` as the task's provenance when it is
  // not empty (TaskRecord::provenance_json), in the same transaction.
  [[nodiscard]] absl::StatusOr<TaskRecord> FinishTask(int64_t task_id, int64_t lease_seq,
                                                      JobState state, const std::string& error,
                                                      const std::string& provenance_json = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // RUNNING under the lease -> QUEUED, with `reason` kept as its error: a
  // worker refused the task (its weights differ) or is draining. With
  // refund_attempt the claim does not count against the attempt cap;
  // without, a task claimed max_attempts times (> 0) becomes FAILED with
  // the reason instead, and a task of a job whose cancel was requested
  // CANCELLED. Returns the task after the change.
  [[nodiscard]] absl::StatusOr<TaskRecord> ReleaseTask(int64_t task_id, int64_t lease_seq,
                                                       bool refund_attempt,
                                                       const std::string& reason, int max_attempts)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every RUNNING task whose lease ran out by now, and (when `lost_worker`
  // is not empty) every RUNNING task of a worker whose name starts with
  // `lost_worker` (a restarted server's own threads), goes back to QUEUED,
  // or to FAILED when it was claimed `max_attempts` times (> 0): a task that
  // kills its workers is not retried forever. `reason` names the loss. A
  // task of a job whose cancel was requested becomes CANCELLED instead.
  [[nodiscard]] absl::StatusOr<ExpiredTasks> ExpireLeases(int max_attempts,
                                                          const std::string& lost_worker,
                                                          const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records where an executor placed a task ("" gives it back to any
  // worker). NOT_FOUND for an unknown task.
  [[nodiscard]] absl::Status SetExecutorRef(int64_t task_id, const std::string& ref)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the QUEUED tasks of a job (one of its tasks failed: the others
  // are not worth running). Returns how many.
  [[nodiscard]] absl::StatusOr<int64_t> CancelQueuedTasks(int64_t job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs QUEUED or RUNNING none of whose tasks is QUEUED or RUNNING: the
  // ones SettleJob would end.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> UnsettledJobs() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a job all of whose tasks have ended: SUCCEEDED when every task
  // succeeded, else FAILED with the first failed task's error, else
  // CANCELLED; with, in the same transaction, the event that
  // `end_event(state, error)` returns (none when it is unset or returns ""),
  // so a watcher never finds a finished job without its terminal event.
  // Returns the job and its event's seq (0: none); nullopt when a task is
  // still QUEUED or RUNNING or the job has ended already.
  using EndEvent = std::function<std::string(JobState state, const std::string& error)>;
  struct Settled {
    JobRecord job;
    int64_t event_seq = 0;
  };
  [[nodiscard]] absl::StatusOr<std::optional<Settled>> SettleJob(int64_t job_id,
                                                                 const EndEvent& end_event)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ Job events (store_jobs.cc)
  // Appends an event and returns its sequence number (1, 2, 3, ... per
  // job, without gaps). NOT_FOUND for an unknown job.
  [[nodiscard]] absl::StatusOr<int64_t> AppendJobEvent(int64_t job_id, const std::string& payload)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Events with seq > after_seq, in order, at most `limit` (1 or more;
  // larger than kMaxEventsPerCall is served as that). Resume a stream by
  // passing the last seq seen. NOT_FOUND for an unknown job.
  [[nodiscard]] absl::StatusOr<std::vector<JobEvent>> ListJobEvents(int64_t job_id,
                                                                    int64_t after_seq, int limit)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ Results (store_results.cc)
  // Inserts rows of job `job_id` (a row's job_id may be 0 or must equal it),
  // all or none. A row whose (job, model, intervention, metric) is already
  // stored is skipped, so a restarted job never writes a number twice.
  // Returns the number of rows inserted. NOT_FOUND for an unknown job.
  [[nodiscard]] absl::StatusOr<int64_t> InsertResults(int64_t job_id,
                                                      const std::vector<ResultRow>& rows)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Rows matching `filter`, oldest first (insertion order). page_size: 0 ->
  // kDefaultPageSize, > kMaxPageSize -> kMaxPageSize, < 0 ->
  // INVALID_ARGUMENT. Paging is stable: rows inserted meanwhile appear at the
  // end, no row is shown twice or skipped. A token that this method did not
  // produce is INVALID_ARGUMENT. Pass the same filter with every page.
  [[nodiscard]] absl::StatusOr<ResultPage> QueryResults(const ResultFilter& filter, int page_size,
                                                        const std::string& page_token)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --------------------------------- Coefficient cache (store_coefficients.cc)
  // Stores (or replaces) the entry for `key`, then evicts least recently
  // used entries until the cache holds at most coeff_cache_budget_bytes
  // (an entry counts meta.size() + blob.size()). An entry larger than the
  // whole budget is not stored: RESOURCE_EXHAUSTED, and nothing is evicted.
  // Key fields must be non-empty.
  [[nodiscard]] absl::Status PutCoefficients(const CoefficientKey& key, const std::string& meta,
                                             const std::string& blob) ABSL_LOCKS_EXCLUDED(mu_);
  // The entry for `key`, marking it most recently used (so it takes the
  // write lock); nullopt when absent. DATA_LOSS when chunks are missing.
  [[nodiscard]] absl::StatusOr<std::optional<CoefficientEntry>> GetCoefficients(
      const CoefficientKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Total bytes the cache counts against its budget.
  [[nodiscard]] absl::StatusOr<int64_t> CoefficientCacheBytes() ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------- Retention (store_retention.cc)
  // A job or dataset expires by its project's rule (project_retention),
  // `defaults` where the project sets none; 0 days keeps forever. The
  // purge finds what expired, then deletes one row per transaction
  // (PurgeExpiredJob, PurgeExpiredDataset), each re-checking that it is
  // still expired: a row used or deleted meanwhile is left alone.
  //
  // Marks the dataset used now (a job naming it was submitted), so it is
  // not purged as unused. NOT_FOUND when absent.
  [[nodiscard]] absl::Status TouchDataset(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The project's own rule (fields unset where it has none).
  [[nodiscard]] absl::StatusOr<RetentionRule> GetRetentionRule(const std::string& project)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stores the rule (by `who`); a rule with both fields unset is removed.
  // INVALID_ARGUMENT for an empty project or negative days; NOT_FOUND for
  // a project that does not exist.
  [[nodiscard]] absl::Status SetRetentionRule(const RetentionRule& rule, const std::string& who)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Finished jobs kept past their project's keep_jobs_days by now, the
  // longest finished first, at most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> ExpiredJobs(const RetentionDays& defaults,
                                                                 int limit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Datasets neither uploaded nor named by a submitted job for their
  // project's keep_unused_datasets_days, least recently used first (then
  // by id), after `after` in that order, at most `limit`. Whether a queued
  // or running job still names one is the caller's check.
  [[nodiscard]] absl::StatusOr<std::vector<DatasetUse>> ExpiredDatasets(
      const RetentionDays& defaults, int limit, const DatasetUse& after = {0, -1})
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes job `id` (its events and results) if it is finished and still
  // expired; false (nothing deleted) otherwise or when it is gone.
  [[nodiscard]] absl::StatusOr<bool> PurgeExpiredJob(int64_t id, const RetentionDays& defaults)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes dataset `id` (its bytes with their last dataset) if it is still
  // expired; false otherwise or when it is gone. Run it inside the caller's
  // Transaction after checking that no queued or running job names it.
  [[nodiscard]] absl::StatusOr<bool> PurgeExpiredDataset(int64_t id, const RetentionDays& defaults)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Evicts coefficient cache entries last used before `cutoff_us` (the
  // store's clock), at most `limit`, and returns how many.
  [[nodiscard]] absl::StatusOr<int64_t> EvictCoefficientsUnusedSince(int64_t cutoff_us, int limit)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ API keys (store_keys.cc)
  // Stores SHA-256(plaintext) for `user` with `role` ("user" | "admin" |
  // "worker": fca-worker processes, which call only the worker protocol).
  // Keys are high-entropy random tokens (GenerateApiKey), so a plain
  // SHA-256 cannot be reversed by guessing and needs no salt or slow KDF;
  // keys shorter than kMinApiKeyBytes are refused (INVALID_ARGUMENT).
  // ALREADY_EXISTS when the key is already registered.
  [[nodiscard]] absl::Status AddApiKey(const std::string& user, const std::string& role,
                                       const std::string& plaintext) ABSL_LOCKS_EXCLUDED(mu_);
  // AddApiKey with an expiry (NewApiKey::expires_in_us from now; negative:
  // INVALID_ARGUMENT) and its creator; keeps the key's first kApiKeyPrefixChars as its prefix.
  // Returns the stored record.
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> CreateApiKey(const NewApiKey& key)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Who owns `plaintext`, and whether the key is active now; nullopt when
  // it is no registered key.
  [[nodiscard]] absl::StatusOr<std::optional<ApiKeyInfo>> LookupApiKey(const std::string& plaintext)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records a use of key `id` from `peer` now. Callers record only the
  // uses LookupApiKey marks use_due, so a key busy with many calls costs
  // one write per kApiKeyUseIntervalUs, not one per call.
  [[nodiscard]] absl::Status NoteApiKeyUse(int64_t id, const std::string& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NoteApiKeyUse, off the caller's path: queued (one per key, the latest
  // use) for the store's key-use thread, which writes it, so an
  // authenticated call never waits for the write lock. Written by the
  // destructor at the latest; a failed write is logged and dropped.
  void RecordApiKeyUse(int64_t id, const std::string& peer) ABSL_LOCKS_EXCLUDED(key_use_mu_);
  // The keys of `user`, or everyone's when unset, by id.
  [[nodiscard]] absl::StatusOr<std::vector<ApiKeyRecord>> ListApiKeys(
      const std::optional<std::string>& user) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> GetApiKey(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Revokes key `id` now: it is refused from its next call on. Revoking a
  // revoked key changes nothing. NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> RevokeApiKey(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces active key `id` by `plaintext` (same user, role and expiry),
  // in one transaction: the old key stays valid for `grace_us` more (0:
  // refused at once; never longer than its own expiry) and names the new
  // one as replaced_by. Returns the new key's record. NOT_FOUND when
  // absent; FAILED_PRECONDITION when it is revoked, expired or rotated
  // already; INVALID_ARGUMENT for a negative grace.
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> RotateApiKey(int64_t id, const std::string& plaintext,
                                                          int64_t grace_us,
                                                          const std::string& created_by)
      ABSL_LOCKS_EXCLUDED(mu_);
  // API keys in the database (not counting a server's key file).
  [[nodiscard]] absl::StatusOr<int64_t> CountApiKeys() ABSL_LOCKS_EXCLUDED(mu_);
  // A new key: 32 bytes from /dev/urandom as 64 lower-case hex digits.
  [[nodiscard]] static absl::StatusOr<std::string> GenerateApiKey();
  // Characters of a key kept as its prefix, to tell keys apart in
  // listings (8 of 64 hex digits: the other 224 bits stay secret).
  static constexpr size_t kApiKeyPrefixChars = 8;
  // A key's last use is written at most this often (ApiKeyInfo::use_due).
  static constexpr int64_t kApiKeyUseIntervalUs = int64_t{60} * 1000 * 1000;

  // ---------------------------------------- Audit log (store_audit_log.cc)
  // Appends a row (at_us 0: now) and returns its id. Texts longer than
  // kMaxAuditTextBytes are cut there.
  [[nodiscard]] absl::StatusOr<int64_t> AppendAuditLog(const AuditLogRow& row)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Rows matching `filter`, newest first, paged as ListJobs (page_size 0:
  // kDefaultPageSize; above kMaxPageSize: that; negative or a foreign
  // token: INVALID_ARGUMENT).
  [[nodiscard]] absl::StatusOr<AuditLogPage> QueryAuditLog(const AuditLogFilter& filter,
                                                           int page_size,
                                                           const std::string& page_token)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes at most `max_rows` of the oldest rows written before
  // `before_us`, in one transaction; returns how many. Call again until it
  // returns fewer than max_rows: each call holds the write lock briefly.
  [[nodiscard]] absl::StatusOr<int64_t> PurgeAuditLog(int64_t before_us, int max_rows)
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxAuditTextBytes = 1024;

  // ------------------------------------------------ Webhooks (store_webhooks.cc)
  // Finished deliveries kept per webhook (the newest); older ones go when
  // a delivery ends.
  static constexpr int kKeptDeliveriesPerWebhook = 100;
  // Stores `webhook` (project, url, secret, created_by non-empty) and
  // returns it with its id and creation time.
  [[nodiscard]] absl::StatusOr<WebhookRecord> AddWebhook(const WebhookRecord& webhook)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<WebhookRecord> GetWebhook(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The webhooks of `project`, by id.
  [[nodiscard]] absl::StatusOr<std::vector<WebhookRecord>> ListWebhooks(const std::string& project)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the webhook with its deliveries; NOT_FOUND when absent.
  [[nodiscard]] absl::Status RemoveWebhook(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // One PENDING delivery of `payload`, due at `due_us`, to every webhook of
  // `project`, for job `job_id` that ended `job_state`; a webhook that has
  // one for the job already keeps it (a job ends once). Returns how many
  // were added.
  [[nodiscard]] absl::StatusOr<int64_t> EnqueueWebhookDeliveries(
      const std::string& project, int64_t job_id, const std::string& job_state,
      const std::string& payload, int64_t due_us) ABSL_LOCKS_EXCLUDED(mu_);
  // PENDING deliveries due at `now_us`, the oldest of each webhook only,
  // with their webhook's url, secret and project, the longest due first, at
  // most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<WebhookDelivery>> DueWebhookDeliveries(int64_t now_us,
                                                                                  int limit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records an attempt of a PENDING delivery: it becomes `state`, due again
  // at attempt.next_attempt_us when still PENDING. attempt.attempt is set by
  // the store. FAILED_PRECONDITION when the delivery is no longer PENDING;
  // NOT_FOUND when it is gone (its webhook was removed).
  [[nodiscard]] absl::Status RecordWebhookAttempt(int64_t delivery_id,
                                                  const WebhookAttempt& attempt,
                                                  DeliveryState state) ABSL_LOCKS_EXCLUDED(mu_);
  // The webhook's deliveries with their attempts, newest first, at most
  // `limit` (1 or more).
  [[nodiscard]] absl::StatusOr<std::vector<WebhookDelivery>> ListWebhookDeliveries(
      int64_t webhook_id, int limit) ABSL_LOCKS_EXCLUDED(mu_);

  // ---------------------------------------------- Projects (store_projects.cc)
  // Project names are the keys of jobs' and datasets' `project`. Roles are
  // "reader", "writer" and "owner" (the CHECK of project_members); the
  // store does not rank them (server/core/projects.h does).
  //
  // A shared project (personal: false) named `name`, created by
  // `created_by`, with `first_owner` as its owner. ALREADY_EXISTS when a
  // project of that name exists or an API key's user has that name.
  [[nodiscard]] absl::StatusOr<ProjectRecord> CreateProject(const std::string& name,
                                                            const std::string& created_by,
                                                            const std::string& first_owner)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Creates `user`'s personal project (owned by the user) unless a project
  // of that name exists. Returns whether it created it.
  [[nodiscard]] absl::StatusOr<bool> EnsurePersonalProject(const std::string& user)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<ProjectRecord> GetProject(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The projects `user` is a member of, or every project when unset; by name.
  [[nodiscard]] absl::StatusOr<std::vector<ProjectRecord>> ListProjects(
      const std::optional<std::string>& user) ABSL_LOCKS_EXCLUDED(mu_);
  // `user`'s role in `project`; nullopt when no member (or no project).
  [[nodiscard]] absl::StatusOr<std::optional<std::string>> MemberRole(const std::string& project,
                                                                      const std::string& user)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The members of `project`, by user name.
  [[nodiscard]] absl::StatusOr<std::vector<ProjectMember>> ListMembers(const std::string& project)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Adds `user` with `role`, or changes their role. NOT_FOUND for an
  // unknown project, INVALID_ARGUMENT for an unknown role,
  // FAILED_PRECONDITION (nothing changed) when the project would be left
  // without an owner.
  [[nodiscard]] absl::Status SetMember(const std::string& project, const std::string& user,
                                       const std::string& role) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when `user` is no member; FAILED_PRECONDITION (nothing
  // changed) for the project's last owner.
  [[nodiscard]] absl::Status RemoveMember(const std::string& project, const std::string& user)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the project with its members, jobs (events, tasks, results),
  // datasets (their bytes unless another dataset has them) and coefficient
  // cache entries, in one transaction, then frees the pages.
  // FAILED_PRECONDITION (nothing deleted) while one of its jobs is QUEUED or
  // RUNNING; NOT_FOUND when absent.
  [[nodiscard]] absl::StatusOr<ProjectDeletion> DeleteProject(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Returns the pages that deletions freed to the file system (the database
  // runs with auto_vacuum = INCREMENTAL). Called after every delete.
  [[nodiscard]] absl::Status ReclaimSpace() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit Store(const StoreOptions& options, std::unique_ptr<Database> db);
  // Open() after the exclusive lock, if any, is held.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Store>> OpenLocked(
      const StoreOptions& options);
  int64_t Now() const;

  // Runs `read(db)` on the read connection (a file database), so that it
  // never waits behind a write; on the main connection, under mu_, for
  // ":memory:" (private to its one connection), on a thread that holds mu_
  // already (inside a Transaction(), whose writes the read must see), and
  // once the file was deleted or replaced.
  template <typename Fn>
  ABSL_NO_THREAD_SAFETY_ANALYSIS auto Read(Fn&& read) -> decltype(read(std::declval<Database&>())) {
    if (reader_ == nullptr || mu_.HeldByThisThread()) {
      RecursiveMutexLock lock(&mu_);
      return read(*db_);
    }
    {
      absl::MutexLock lock(&read_mu_);
      auto result = read(*reader_);
      if (result.ok() || !absl::IsInternal(result.status()) || CheckFile().ok()) return result;
    }
    // The file was deleted or replaced (an I/O error on the read connection):
    // the main connection still reads the file it opened.
    RecursiveMutexLock lock(&mu_);
    return read(*db_);
  }
  // Keeps writes_blocked_since_us_ (Database::set_write_outcome).
  void NoteWriteOutcome(bool blocked);
  // The watch thread's probe of the write lock, for WritesBlockedForUs.
  void ProbeWriteLock() ABSL_LOCKS_EXCLUDED(mu_);
  // The key-use thread's loop (RecordApiKeyUse).
  void WriteKeyUses() ABSL_LOCKS_EXCLUDED(key_use_mu_);

  // The *Locked helpers require mu_ held (and run inside a transaction
  // where they write). The store's own code calls only these with mu_ held,
  // never a public method (ABSL_LOCKS_EXCLUDED: only a caller's Transaction
  // fn re-enters).
  [[nodiscard]] absl::StatusOr<ModelRecord> GetModelLocked(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<JobRecord> GetJobLocked(int64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<DatasetRecord> FindDatasetLocked(const std::string& name,
                                                                const std::string& project)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BeginUpload and AppendUpload without their own lock (PutDataset).
  [[nodiscard]] absl::StatusOr<int64_t> BeginUploadLocked(const std::string& owner,
                                                          const std::string& project)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status AppendUploadLocked(int64_t upload_id, const std::string& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<DatasetRecord> GetDatasetLocked(int64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<bool> JobExistsLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status EvictForLocked(int64_t incoming_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> CreateApiKeyLocked(const NewApiKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<ApiKeyRecord> GetApiKeyLocked(int64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // options_.fault_injector's verdict on `op` (OK without one).
  [[nodiscard]] absl::Status Inject(std::string_view op) const;
  [[nodiscard]] absl::StatusOr<DatasetRecord> FinishUploadLocked(int64_t upload_id,
                                                                 const std::string& name,
                                                                 const std::string& kind,
                                                                 const std::string& sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status DeleteUploadLocked(int64_t upload_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<TaskRecord> GetTaskLocked(int64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<std::vector<ProjectMember>> ListMembersLocked(
      const std::string& project) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when `project` has no owner left.
  [[nodiscard]] absl::Status CheckHasOwnerLocked(const std::string& project)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The task and its job when (task_id, lease_seq) is its current lease.
  [[nodiscard]] absl::StatusOr<TaskClaim> CheckLeaseLocked(int64_t task_id, int64_t lease_seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<std::optional<int64_t>> NextClaimableLocked(
      const ClaimRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every task of the job that has not ended -> CANCELLED.
  [[nodiscard]] absl::Status CancelTasksLocked(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<int64_t> CancelQueuedTasksLocked(int64_t job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AppendJobEvent inside the caller's transaction.
  [[nodiscard]] absl::StatusOr<int64_t> AppendJobEventLocked(int64_t job_id,
                                                             const std::string& payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<std::string> ReadDatasetLocked(int64_t id, int64_t max_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status ReclaimSpaceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `remove` (a delete) as a transaction and gives the freed pages
  // back. When the disk is full, first gives the reserve back (and
  // checkpoints the write-ahead log into the file, truncating it), runs
  // `remove` again if it had failed, frees the pages in small steps, and
  // takes the reserve again.
  [[nodiscard]] absl::Status DeleteLocked(const std::function<absl::Status()>& remove)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the free pages a few at a time, checkpointing and truncating the
  // write-ahead log after each step, so that little free disk suffices.
  [[nodiscard]] absl::Status ReclaimInStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status CheckpointLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The watch thread: CheckFile() and the reserve, every
  // file_check_interval_ms, until StopWatching().
  void StartWatching();
  void StopWatching() ABSL_LOCKS_EXCLUDED(watch_mu_);

  const StoreOptions options_;
  // Recursive: methods called from inside Transaction()'s fn, on the same
  // thread, re-enter. Guards the database and every statement run on it.
  RecursiveMutex mu_;
  std::unique_ptr<Database> db_ ABSL_PT_GUARDED_BY(mu_);
  // The read connection (file databases; set once at Open): one read at a time.
  absl::Mutex read_mu_;
  std::unique_ptr<Database> reader_ ABSL_PT_GUARDED_BY(read_mu_);
  // Now() of the first write refused for the lock since one went through; 0: none.
  std::atomic<int64_t> writes_blocked_since_us_{0};
  // RecordApiKeyUse's queue (key id -> peer of its latest use) and thread.
  absl::Mutex key_use_mu_;
  absl::CondVar key_use_due_;
  std::map<int64_t, std::string> key_uses_ ABSL_GUARDED_BY(key_use_mu_);
  bool key_use_stop_ ABSL_GUARDED_BY(key_use_mu_) = false;
  std::thread key_use_writer_;             // started by the first RecordApiKeyUse
  int lock_fd_ = -1;                       // options_.exclusive: the flock'ed database file
  std::unique_ptr<FileWatch> file_watch_;  // file databases
  std::unique_ptr<DiskReserve> reserve_;   // disk_reserve_bytes > 0
  absl::Mutex watch_mu_;
  bool watch_stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watcher_;
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_STORE_H_
