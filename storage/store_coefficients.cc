// Store: the coefficient cache, chunked and bounded in bytes with
// least-recently-used eviction.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

absl::Status ValidateKey(const CoefficientKey& key) {
  if (key.project.empty() || key.weights_sha256.empty() || key.window_hash.empty() ||
      key.dtype.empty() || key.device.empty()) {
    return absl::InvalidArgumentError(
        "coefficient key needs project, weights_sha256, window_hash, dtype and device");
  }
  return absl::OkStatus();
}

void BindKey(Statement& stmt, const CoefficientKey& key) {
  stmt.BindText(1, key.weights_sha256);
  stmt.BindText(2, key.window_hash);
  stmt.BindText(3, key.dtype);
  stmt.BindText(4, key.project);
  stmt.BindText(5, key.device);
}

// Parameters ?1..?5 as BindKey binds them.
constexpr char kKeyMatch[] =
    " WHERE weights_sha256 = ?1 AND window_hash = ?2 AND dtype = ?3 AND project = ?4 AND "
    "device = ?5";

constexpr char kNextUseSeq[] = "(SELECT COALESCE(MAX(last_used_seq), 0) + 1 FROM coeff_cache)";

}  // namespace

absl::Status Store::EvictForLocked(int64_t incoming_bytes) {
  FCA_ASSIGN_OR_RETURN(Statement total_stmt, db_->Prepare("SELECT COALESCE(SUM(size_bytes), 0) "
                                                          "FROM coeff_cache",
                                                          "measure coefficient cache"));
  FCA_RETURN_IF_ERROR(total_stmt.Step().status());
  int64_t total = total_stmt.ColumnInt(0);
  const int64_t budget = options_.coeff_cache_budget_bytes;
  if (total + incoming_bytes <= budget) return absl::OkStatus();

  // Collect victims first, then delete: no writes while the scan is open.
  std::vector<int64_t> victims;
  {
    FCA_ASSIGN_OR_RETURN(Statement lru, db_->Prepare("SELECT id, size_bytes FROM coeff_cache "
                                                     "ORDER BY last_used_seq",
                                                     "evict coefficients"));
    while (total + incoming_bytes > budget) {
      FCA_ASSIGN_OR_RETURN(const bool row, lru.Step());
      if (!row) break;
      victims.push_back(lru.ColumnInt(0));
      total -= lru.ColumnInt(1);
    }
  }
  FCA_ASSIGN_OR_RETURN(Statement remove,
                       db_->Prepare("DELETE FROM coeff_cache WHERE id = ?1", "evict coefficients"));
  for (int64_t id : victims) {
    remove.BindInt(1, id);
    FCA_RETURN_IF_ERROR(remove.Run());  // chunks go by ON DELETE CASCADE
    FCA_RETURN_IF_ERROR(remove.Reset());
  }
  return absl::OkStatus();
}

absl::Status Store::PutCoefficients(const CoefficientKey& key, const std::string& meta,
                                    const std::string& blob) {
  FCA_RETURN_IF_ERROR(ValidateKey(key));
  FCA_RETURN_IF_ERROR(Inject("put_coefficients"));
  const int64_t size = static_cast<int64_t>(meta.size() + blob.size());
  if (size > options_.coeff_cache_budget_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("coefficient entry of %d bytes exceeds the cache budget of %d bytes", size,
                        options_.coeff_cache_budget_bytes));
  }
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(
        Statement remove,
        db_->Prepare(std::string("DELETE FROM coeff_cache") + kKeyMatch, "replace coefficients"));
    BindKey(remove, key);
    FCA_RETURN_IF_ERROR(remove.Run());
    FCA_RETURN_IF_ERROR(EvictForLocked(size));

    const int64_t blob_bytes = static_cast<int64_t>(blob.size());
    const int64_t num_chunks = (blob_bytes + options_.chunk_bytes - 1) / options_.chunk_bytes;
    const int64_t now = Now();
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare(std::string("INSERT INTO coeff_cache (weights_sha256, "
                                                  "window_hash, dtype, project, device, meta, "
                                                  "blob_bytes, size_bytes, num_chunks, "
                                                  "created_at_us, last_used_us, last_used_seq) "
                                                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                                  "?10, ?10, ") +
                                          kNextUseSeq + ")",
                                      "store coefficients"));
    BindKey(insert, key);
    insert.BindBlob(6, meta);
    insert.BindInt(7, blob_bytes);
    insert.BindInt(8, size);
    insert.BindInt(9, num_chunks);
    insert.BindInt(10, now);
    FCA_RETURN_IF_ERROR(insert.Run());
    const int64_t entry_id = db_->last_insert_rowid();

    FCA_ASSIGN_OR_RETURN(Statement insert_chunk,
                         db_->Prepare("INSERT INTO coeff_chunks (entry_id, idx, data) "
                                      "VALUES (?1, ?2, ?3)",
                                      "store coefficient chunk"));
    insert_chunk.BindInt(1, entry_id);
    int64_t written = 0;
    FCA_RETURN_IF_ERROR(internal::InsertChunks(insert_chunk, blob, options_.chunk_bytes, &written));
    if (written != num_chunks) {
      return absl::InternalError("storage: coefficient chunk count mismatch");
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<CoefficientEntry>> Store::GetCoefficients(const CoefficientKey& key) {
  FCA_RETURN_IF_ERROR(ValidateKey(key));
  FCA_RETURN_IF_ERROR(Inject("get_coefficients"));
  RecursiveMutexLock lock(&mu_);
  std::optional<CoefficientEntry> entry;
  // A write transaction: reading marks the entry most recently used.
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement find,
                         db_->Prepare(std::string("SELECT id, meta, blob_bytes, num_chunks "
                                                  "FROM coeff_cache") +
                                          kKeyMatch,
                                      "read coefficients"));
    BindKey(find, key);
    FCA_ASSIGN_OR_RETURN(const bool row, find.Step());
    if (!row) return absl::OkStatus();
    const int64_t id = find.ColumnInt(0);
    CoefficientEntry found;
    found.meta = find.ColumnBlob(1);
    FCA_ASSIGN_OR_RETURN(Statement chunks,
                         db_->Prepare("SELECT rowid FROM coeff_chunks WHERE entry_id = ?1 "
                                      "ORDER BY idx",
                                      "read coefficient chunks"));
    chunks.BindInt(1, id);
    BlobReader reader = db_->NewBlobReader("coeff_chunks", "data", "read coefficient chunks");
    FCA_ASSIGN_OR_RETURN(
        found.blob, internal::ReadChunks(chunks, reader, find.ColumnInt(2), find.ColumnInt(3)));
    FCA_ASSIGN_OR_RETURN(Statement touch,
                         db_->Prepare(std::string("UPDATE coeff_cache SET last_used_us = ?1, "
                                                  "last_used_seq = ") +
                                          kNextUseSeq + " WHERE id = ?2",
                                      "mark coefficients used"));
    touch.BindInt(1, Now());
    touch.BindInt(2, id);
    FCA_RETURN_IF_ERROR(touch.Run());
    entry = std::move(found);
    return absl::OkStatus();
  }));
  return entry;
}

absl::StatusOr<int64_t> Store::CoefficientCacheBytes() {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt, db_->Prepare("SELECT COALESCE(SUM(size_bytes), 0) "
                                                    "FROM coeff_cache",
                                                    "measure coefficient cache"));
  FCA_RETURN_IF_ERROR(stmt.Step().status());
  return stmt.ColumnInt(0);
}

}  // namespace fca::storage
