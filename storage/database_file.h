// The database file as the file system sees it, for storage/ only: its
// canonical path (what the exclusive lock is named after), whether it is
// still the file the store opened, and a reserve of disk space beside it.
//
// Thread-safety: FileWatch and DiskReserve may be used from any thread.
#ifndef FCA_STORAGE_DATABASE_FILE_H_
#define FCA_STORAGE_DATABASE_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace fca::storage {

// realpath(path): every name of one file through symlinks and relative
// paths gives the same text. For a file not created yet, the canonical
// folder and the file's name; `path` itself when neither resolves.
std::string CanonicalPath(const std::string& path);

// Notices a database file (or its write-ahead log) deleted or replaced
// under a running store: SQLite keeps reading and writing the unlinked
// file, whose contents are lost when the process ends.
class FileWatch {
 public:
  // Remembers the device and inode `path` names now (and its -wal's once
  // it exists).
  explicit FileWatch(std::string path);

  // OK while `path` (and its -wal) still names the file seen first.
  // Otherwise UNAVAILABLE naming the path and what happened (deleted,
  // replaced), from then on: the loss is logged as an ERROR once, at the
  // first check that sees it.
  [[nodiscard]] absl::Status Check() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
  };
  // "" while `file` is still `*seen` (recording it when unset), else what
  // happened to it.
  static std::string Compare(const std::string& file, std::optional<Identity>* seen);

  const std::string path_;
  absl::Mutex mu_;
  std::optional<Identity> db_ ABSL_GUARDED_BY(mu_);
  std::optional<Identity> wal_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
};

// A file of `bytes` allocated blocks beside the database, given back to
// the file system when the disk is full so that a delete can run, then
// taken again.
// Bytes an unprivileged writer may still use on the file system holding
// `path` (statvfs f_bavail); nullopt when it cannot be told.
std::optional<int64_t> FreeBytesBeside(const std::string& path);

class DiskReserve {
 public:
  DiskReserve(std::string path, int64_t bytes) : path_(std::move(path)), bytes_(bytes) {}

  // Makes the file `bytes` long with its blocks allocated (nothing to do
  // when it is). False, with a WARNING the first time in a row, when the
  // disk has no room for it.
  bool Fill() ABSL_LOCKS_EXCLUDED(mu_);
  // Gives the file's blocks back (truncates it to 0); true when it held any.
  // The WARNING says the disk is full and what the room is `for`.
  bool Release(std::string_view for_what) ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const int64_t bytes_;
  absl::Mutex mu_;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;    // Fill failed and said so
  bool released_ ABSL_GUARDED_BY(mu_) = false;  // Release gave it back
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_DATABASE_FILE_H_
