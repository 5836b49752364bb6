// Online backup of a live store database: a consistent copy of the file,
// made while the server runs, through SQLite's online backup API.
//
// The copy reads one snapshot of the database through a connection of its
// own, inside one read transaction. In WAL mode (how every file store runs)
// a reader neither waits for writers nor makes them wait, so jobs, uploads
// and queries go on while the copy is made; what they commit after the
// snapshot is not in the copy. The WAL file grows meanwhile (a checkpoint
// cannot pass a reader's snapshot) and is checkpointed after the copy ends.
//
// The copy is written to "<dest>.partial", checked with PRAGMA
// integrity_check, made durable (fsync) and only then renamed to `dest`: a
// file at `dest` is always a whole, checked backup.
#ifndef FCA_STORAGE_BACKUP_H_
#define FCA_STORAGE_BACKUP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace fca::storage {

struct BackupOptions {
  // Pages copied per step of the backup API; between steps the copy reports
  // progress and may be stopped. Every step reads the same snapshot.
  int pages_per_step = 4096;
  // How long the copy's connection waits for a lock (only a checkpoint that
  // truncates the WAL or a schema change can hold one against a reader).
  int busy_timeout_ms = 5000;
  // Called after each step with the pages copied so far and the total;
  // returning false stops the copy (CANCELLED, nothing left at `dest`).
  std::function<bool(int64_t done, int64_t total)> progress;
};

struct BackupSummary {
  int64_t pages = 0;
  int64_t bytes = 0;         // size of the copy
  double copy_seconds = 0;   // reading the snapshot and writing the copy
  double check_seconds = 0;  // integrity_check of the copy
};

// Copies the database at `source` (a file path; a running store may have it
// open) to `dest`. INVALID_ARGUMENT for ":memory:" or an empty path;
// ALREADY_EXISTS when `dest` exists (a backup never overwrites one);
// DATA_LOSS when the copy fails its integrity check (nothing is left at
// `dest`); FAILED_PRECONDITION when `dest`'s folder cannot be written;
// RESOURCE_EXHAUSTED when the disk fills.
[[nodiscard]] absl::StatusOr<BackupSummary> BackupDatabase(const std::string& source,
                                                           const std::string& dest,
                                                           const BackupOptions& options = {});

}  // namespace fca::storage

#endif  // FCA_STORAGE_BACKUP_H_
