// Schema migrations, keyed by PRAGMA user_version.
#ifndef FCA_STORAGE_SCHEMA_H_
#define FCA_STORAGE_SCHEMA_H_

#include "absl/status/status.h"
#include "storage/sqlite.h"

namespace fca::storage {

// The schema version this code writes. A database at a lower version is
// migrated forward; one at a higher version was written by newer code.
inline constexpr int kSchemaVersion = 11;

// Brings `db` to kSchemaVersion, one migration per transaction, so a crash
// leaves the database at some whole version. Safe against another process
// migrating the same file at the same time (the version is read under the
// write lock). FAILED_PRECONDITION when the database is newer than this code.
[[nodiscard]] absl::Status MigrateSchema(Database& db);

}  // namespace fca::storage

#endif  // FCA_STORAGE_SCHEMA_H_
