// Store: datasets, content-addressed and chunked.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr char kSelectDataset[] =
    "SELECT d.id, d.name, d.kind, d.sha256, d.owner, b.size_bytes, "
    "d.created_at_us FROM datasets d JOIN dataset_blobs b "
    "ON b.sha256 = d.sha256";

DatasetRecord ReadDataset(const Statement& stmt) {
  DatasetRecord dataset;
  dataset.id = stmt.ColumnInt(0);
  dataset.name = stmt.ColumnText(1);
  dataset.kind = stmt.ColumnText(2);
  dataset.sha256 = stmt.ColumnText(3);
  dataset.owner = stmt.ColumnText(4);
  dataset.size_bytes = stmt.ColumnInt(5);
  dataset.created_at_us = stmt.ColumnInt(6);
  return dataset;
}

// The one row `stmt` selects, or NOT_FOUND.
absl::StatusOr<DatasetRecord> ReadOneDataset(Statement& stmt) {
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return absl::NotFoundError("dataset not found");
  return ReadDataset(stmt);
}

}  // namespace

absl::StatusOr<DatasetRecord> Store::GetDatasetLocked(int64_t id) {
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectDataset) + " WHERE d.id = ?1", "get dataset"));
  stmt.BindInt(1, id);
  return ReadOneDataset(stmt);
}

absl::StatusOr<DatasetRecord> Store::PutDataset(const std::string& name, const std::string& kind,
                                                const std::string& owner,
                                                const std::string& bytes) {
  if (name.empty()) return absl::InvalidArgumentError("dataset name is empty");
  if (owner.empty()) return absl::InvalidArgumentError("dataset owner is empty");
  if (kind != "text" && kind != "tokens") {
    return absl::InvalidArgumentError("dataset kind must be 'text' or 'tokens'");
  }
  // Hash before taking the lock: it is the slow part for large uploads.
  const std::string sha256 = Sha256Hex(bytes);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DatasetRecord stored;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
    absl::StatusOr<DatasetRecord> existing = FindDataset(name, owner);
    if (existing.ok()) {
      if (existing->sha256 == sha256 && existing->kind == kind) {
        stored = *std::move(existing);
        return absl::OkStatus();
      }
      return absl::AlreadyExistsError(
          absl::StrFormat("dataset '%s' already exists with different content", name));
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();

    FCA_ASSIGN_OR_RETURN(
        Statement has_blob,
        db_->Prepare("SELECT 1 FROM dataset_blobs WHERE sha256 = ?1", "find dataset content"));
    has_blob.BindText(1, sha256);
    FCA_ASSIGN_OR_RETURN(const bool blob_exists, has_blob.Step());
    if (!blob_exists) {
      const int64_t size = static_cast<int64_t>(bytes.size());
      const int64_t num_chunks = (size + options_.chunk_bytes - 1) / options_.chunk_bytes;
      FCA_ASSIGN_OR_RETURN(Statement insert_blob,
                           db_->Prepare("INSERT INTO dataset_blobs (sha256, size_bytes, "
                                        "num_chunks) VALUES (?1, ?2, ?3)",
                                        "store dataset content"));
      insert_blob.BindText(1, sha256);
      insert_blob.BindInt(2, size);
      insert_blob.BindInt(3, num_chunks);
      FCA_RETURN_IF_ERROR(insert_blob.Run());
      FCA_ASSIGN_OR_RETURN(Statement insert_chunk,
                           db_->Prepare("INSERT INTO dataset_chunks (sha256, idx, data) "
                                        "VALUES (?1, ?2, ?3)",
                                        "store dataset chunk"));
      insert_chunk.BindText(1, sha256);
      int64_t written = 0;
      FCA_RETURN_IF_ERROR(
          internal::InsertChunks(insert_chunk, bytes, options_.chunk_bytes, &written));
      if (written != num_chunks) {
        return absl::InternalError("storage: dataset chunk count mismatch");
      }
    }
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare("INSERT INTO datasets (name, kind, owner, sha256, "
                                      "created_at_us) VALUES (?1, ?2, ?3, ?4, ?5)",
                                      "store dataset"));
    insert.BindText(1, name);
    insert.BindText(2, kind);
    insert.BindText(3, owner);
    insert.BindText(4, sha256);
    insert.BindInt(5, Now());
    FCA_RETURN_IF_ERROR(insert.Run());
    FCA_ASSIGN_OR_RETURN(stored, GetDatasetLocked(db_->last_insert_rowid()));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<DatasetRecord> Store::GetDataset(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return GetDatasetLocked(id);
}

absl::StatusOr<DatasetRecord> Store::FindDataset(const std::string& name,
                                                 const std::string& owner) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt, db_->Prepare(std::string(kSelectDataset) +
                                                        " WHERE d.owner = ?1 AND d.name = ?2",
                                                    "find dataset"));
  stmt.BindText(1, owner);
  stmt.BindText(2, name);
  return ReadOneDataset(stmt);
}

absl::StatusOr<std::vector<DatasetRecord>> Store::ListDatasets(
    const std::optional<std::string>& owner) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectDataset) + " WHERE ?1 IS NULL OR d.owner = ?1 ORDER BY d.id",
                   "list datasets"));
  if (owner.has_value()) {
    stmt.BindText(1, *owner);
  } else {
    stmt.BindNull(1);
  }
  std::vector<DatasetRecord> datasets;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    datasets.push_back(ReadDataset(stmt));
  }
  return datasets;
}

absl::StatusOr<std::string> Store::ReadDatasetBytes(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // Two statements without a transaction: dataset content is immutable and
  // never deleted, so nothing can change between them.
  FCA_ASSIGN_OR_RETURN(Statement meta,
                       db_->Prepare("SELECT b.sha256, b.size_bytes, b.num_chunks "
                                    "FROM datasets d JOIN dataset_blobs b ON b.sha256 = d.sha256 "
                                    "WHERE d.id = ?1",
                                    "read dataset"));
  meta.BindInt(1, id);
  FCA_ASSIGN_OR_RETURN(const bool row, meta.Step());
  if (!row) return absl::NotFoundError("dataset not found");
  FCA_ASSIGN_OR_RETURN(Statement chunks,
                       db_->Prepare("SELECT rowid FROM dataset_chunks WHERE sha256 = ?1 "
                                    "ORDER BY idx",
                                    "read dataset chunks"));
  chunks.BindText(1, meta.ColumnText(0));
  BlobReader reader = db_->NewBlobReader("dataset_chunks", "data", "read dataset chunks");
  return internal::ReadChunks(chunks, reader, meta.ColumnInt(1), meta.ColumnInt(2));
}

}  // namespace fca::storage
