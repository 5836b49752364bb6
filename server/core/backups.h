// Backups of the server's database into the operator's --backup_dir: on
// demand (the admin-only BackupDatabase RPC, `fca admin backup NAME`) and on
// a schedule (--backup_every_hours, --backup_keep). storage/backup.h makes
// each copy: one snapshot, checked, never overwriting a file.
#ifndef FCA_SERVER_CORE_BACKUPS_H_
#define FCA_SERVER_CORE_BACKUPS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "storage/backup.h"

namespace fca::core {

class BackupDirectory {
 public:
  // `db`: the live database file; `dir`: an existing folder for the copies.
  // FAILED_PRECONDITION when `dir` is not a folder.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BackupDirectory>> Open(
      std::string db, std::string dir, storage::BackupOptions copy = {});

  const std::string& dir() const { return dir_; }

  // The longest backup file name (issue 40's rule): well under NAME_MAX
  // (255), so the copy's temporary name (NAME.partial) always fits.
  static constexpr size_t kMaxNameBytes = 128;
  // INVALID_ARGUMENT unless `name` is a plain file name of at most
  // kMaxNameBytes: letters, digits, '.', '_' and '-', not starting with '.'
  // or '-' (no path, no hidden file, nothing a shell reads as an option).
  [[nodiscard]] static absl::Status CheckName(absl::string_view name);

  // Copies the database to dir/name. One copy runs at a time (a second
  // waits). `go_on`, asked between steps, stops the copy when it returns
  // false (CANCELLED, nothing left). storage::BackupDatabase's errors.
  [[nodiscard]] absl::StatusOr<v1::BackupDatabaseResponse> Write(
      const std::string& name, const std::function<bool()>& go_on = {});

  // Scheduled copies are named "fca-backup-<UTC time>.sqlite", the time as
  // 20261204T084635.123Z: names sort as times do.
  static std::string ScheduledName(absl::Time time);
  // The time in a scheduled copy's name; nullopt for any other name.
  static std::optional<absl::Time> ScheduledTime(absl::string_view name);
  // The scheduled copies in dir, oldest first (other files are not listed).
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> ListScheduled() const;
  // Removes the scheduled copies beyond the newest `keep`; returns their
  // names. Files that are not scheduled copies are never touched.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Prune(int keep) const;

 private:
  BackupDirectory(std::string db, std::string dir, storage::BackupOptions copy)
      : db_(std::move(db)), dir_(std::move(dir)), copy_(std::move(copy)) {}

  const std::string db_;
  const std::string dir_;
  const storage::BackupOptions copy_;
  absl::Mutex copying_;  // held for a whole copy
};

// When the next scheduled copy is due: `every` after the newest one in the
// folder (so restarts do not put it off), or at once when there is none or
// it is overdue.
absl::Time NextBackupDue(std::optional<absl::Time> newest, absl::Duration every, absl::Time now);

// A thread that writes a scheduled copy when one is due, then prunes the
// folder to the newest `keep`. Failures are logged and retried at the next
// due time. Stop() (or the destructor) cancels a copy in progress.
class BackupScheduler {
 public:
  BackupScheduler(BackupDirectory* dir, absl::Duration every, int keep);
  ~BackupScheduler() { Stop(); }
  BackupScheduler(const BackupScheduler&) = delete;
  BackupScheduler& operator=(const BackupScheduler&) = delete;

  void Stop();
  // Scheduled copies written so far by this scheduler.
  int written() const;

 private:
  void Run();
  bool Stopping() const;
  void BackUpOnce();

  BackupDirectory* const dir_;
  const absl::Duration every_;
  const int keep_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_BACKUPS_H_
