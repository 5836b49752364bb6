#include "storage/backup.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/stopwatch.h"
#include "storage/sqlite.h"

namespace fca::storage {
namespace {

using Clock = std::chrono::steady_clock;

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// fsync of a file or folder by path: the copy and its name in the folder
// must reach the disk before the backup is reported done.
[[nodiscard]] absl::Status SyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("backup: cannot open '%s': %s", path, std::strerror(errno)));
  }
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::InternalError(absl::StrFormat("backup: fsync '%s': %s", path, std::strerror(err)));
  }
  return absl::OkStatus();
}

// Removes the partial copy and the journal files SQLite may leave beside
// it: a failed backup leaves nothing behind, a finished one only `dest`.
class PartialCopy {
 public:
  explicit PartialCopy(std::string path) : path_(std::move(path)) {}
  ~PartialCopy() {
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) {
      std::remove((path_ + suffix).c_str());
    }
  }
  PartialCopy(const PartialCopy&) = delete;
  PartialCopy& operator=(const PartialCopy&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies `source` into the file `partial` from one snapshot: the source
// connection opens a read transaction first and holds it until the last
// page is copied, so no commit elsewhere can make SQLite restart the copy.
[[nodiscard]] absl::StatusOr<int64_t> CopySnapshot(const std::string& source,
                                                   const std::string& partial,
                                                   const BackupOptions& options) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Database> from,
                       Database::Open(source, options.busy_timeout_ms));
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Database> to,
                       Database::Open(partial, options.busy_timeout_ms));
  FCA_RETURN_IF_ERROR(from->Execute("BEGIN", "start backup snapshot"));
  // BEGIN is deferred: the first read takes the snapshot.
  FCA_RETURN_IF_ERROR(
      from->QueryText("SELECT count(*) FROM sqlite_schema", "start backup snapshot").status());
  int64_t pages = 0;
  absl::Status copied =
      from->CopyTo(to.get(), options.pages_per_step, [&](int64_t done, int64_t total) {
        pages = total;
        return !options.progress || options.progress(done, total);
      });
  (void)from->Execute("COMMIT", "end backup snapshot");
  FCA_RETURN_IF_ERROR(copied);
  // The copy carries the source's WAL flag; a single file is what an
  // operator moves around, so the copy is left in rollback mode.
  FCA_RETURN_IF_ERROR(to->QueryText("PRAGMA journal_mode = DELETE", "finish backup").status());
  return pages;
}

[[nodiscard]] absl::Status CheckCopy(const std::string& partial, int busy_timeout_ms) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Database> copy, Database::Open(partial, busy_timeout_ms));
  FCA_ASSIGN_OR_RETURN(const std::string report, copy->IntegrityReport());
  if (report != "ok") {
    LOG(ERROR) << "backup: the copy failed its integrity check: " << report;
    return absl::DataLossError("backup: the copy failed its integrity check (see the server log)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BackupSummary> BackupDatabase(const std::string& source, const std::string& dest,
                                             const BackupOptions& options) {
  if (source.empty() || source == ":memory:") {
    return absl::InvalidArgumentError("backup: the database is not a file (--db is not set)");
  }
  if (access(source.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrFormat("backup: no database at '%s'", source));
  }
  if (dest.empty()) return absl::InvalidArgumentError("backup: no destination file given");
  if (access(dest.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("backup: '%s' exists; a backup never overwrites a file", dest));
  }
  if (options.pages_per_step < 1) {
    return absl::InvalidArgumentError("backup: pages_per_step must be at least 1");
  }
  PartialCopy partial(dest + ".partial");
  std::remove(partial.path().c_str());  // left by a crashed backup
  BackupSummary summary;
  const Clock::time_point start = Clock::now();
  FCA_ASSIGN_OR_RETURN(summary.pages, CopySnapshot(source, partial.path(), options));
  summary.copy_seconds = SecondsSince(start);
  const Clock::time_point check_start = Clock::now();
  FCA_RETURN_IF_ERROR(CheckCopy(partial.path(), options.busy_timeout_ms));
  summary.check_seconds = SecondsSince(check_start);
  FCA_RETURN_IF_ERROR(SyncPath(partial.path(), O_RDONLY));
  // link() fails when `dest` appeared meanwhile: never overwrite a file.
  if (link(partial.path().c_str(), dest.c_str()) != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrFormat("backup: '%s' exists; a backup never overwrites a file", dest));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("backup: cannot name the copy '%s': %s", dest, std::strerror(err)));
  }
  FCA_RETURN_IF_ERROR(SyncPath(FolderOf(dest), O_RDONLY | O_DIRECTORY));
  struct stat st {};
  if (stat(dest.c_str(), &st) == 0) summary.bytes = st.st_size;
  return summary;
}

}  // namespace fca::storage
