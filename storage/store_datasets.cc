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
    "d.created_at_us, d.project FROM datasets d JOIN dataset_blobs b "
    "ON b.sha256 = d.sha256";
constexpr char kDatasetTokenKind = 'd';

DatasetRecord ReadDataset(const Statement& stmt) {
  DatasetRecord dataset;
  dataset.id = stmt.ColumnInt(0);
  dataset.name = stmt.ColumnText(1);
  dataset.kind = stmt.ColumnText(2);
  dataset.sha256 = stmt.ColumnText(3);
  dataset.owner = stmt.ColumnText(4);
  dataset.size_bytes = stmt.ColumnInt(5);
  dataset.created_at_us = stmt.ColumnInt(6);
  dataset.project = stmt.ColumnText(7);
  return dataset;
}

// The one row `stmt` selects, or NOT_FOUND.
absl::StatusOr<DatasetRecord> ReadOneDataset(Statement& stmt) {
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return absl::NotFoundError("dataset not found");
  return ReadDataset(stmt);
}

absl::Status ValidateDataset(const std::string& name, const std::string& kind) {
  if (name.empty()) return absl::InvalidArgumentError("dataset name is empty");
  if (kind != "text" && kind != "tokens") {
    return absl::InvalidArgumentError("dataset kind must be 'text' or 'tokens'");
  }
  return absl::OkStatus();
}

// Makes the staged chunks of `upload_id` the content `sha256`: the chunks
// are copied within the database, never through memory as a whole.
absl::Status KeepUploadAsBlob(Database& db, int64_t upload_id, const std::string& sha256,
                              int64_t size, int64_t num_chunks) {
  FCA_ASSIGN_OR_RETURN(Statement insert_blob,
                       db.Prepare("INSERT INTO dataset_blobs (sha256, size_bytes, num_chunks) "
                                  "VALUES (?1, ?2, ?3)",
                                  "store dataset content"));
  insert_blob.BindText(1, sha256);
  insert_blob.BindInt(2, size);
  insert_blob.BindInt(3, num_chunks);
  FCA_RETURN_IF_ERROR(insert_blob.Run());
  FCA_ASSIGN_OR_RETURN(Statement copy,
                       db.Prepare("INSERT INTO dataset_chunks (sha256, idx, data) SELECT ?1, "
                                  "idx, data FROM upload_chunks WHERE upload_id = ?2",
                                  "store dataset chunks"));
  copy.BindText(1, sha256);
  copy.BindInt(2, upload_id);
  FCA_RETURN_IF_ERROR(copy.Run());
  if (db.changes() != num_chunks) {
    return absl::InternalError("storage: dataset chunk count mismatch");
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetRecord> GetDatasetIn(const Database& db, int64_t id) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db.Prepare(std::string(kSelectDataset) + " WHERE d.id = ?1", "get dataset"));
  stmt.BindInt(1, id);
  return ReadOneDataset(stmt);
}

}  // namespace

absl::StatusOr<DatasetRecord> Store::GetDatasetLocked(int64_t id) { return GetDatasetIn(*db_, id); }

absl::StatusOr<DatasetRecord> Store::PutDataset(const std::string& name, const std::string& kind,
                                                const std::string& owner, const std::string& bytes,
                                                const std::string& project) {
  FCA_RETURN_IF_ERROR(ValidateDataset(name, kind));
  if (owner.empty()) return absl::InvalidArgumentError("dataset owner is empty");
  // Hash before taking the lock: it is the slow part for large uploads.
  const std::string sha256 = Sha256Hex(bytes);
  RecursiveMutexLock lock(&mu_);
  DatasetRecord stored;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const int64_t upload, BeginUploadLocked(owner, project));
    const std::string_view all(bytes);
    for (size_t offset = 0; offset < all.size();
         offset += static_cast<size_t>(options_.chunk_bytes)) {
      FCA_RETURN_IF_ERROR(AppendUploadLocked(
          upload, std::string(all.substr(offset, static_cast<size_t>(options_.chunk_bytes)))));
    }
    FCA_ASSIGN_OR_RETURN(stored, FinishUploadLocked(upload, name, kind, sha256));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<int64_t> Store::BeginUpload(const std::string& owner, const std::string& project) {
  if (owner.empty()) return absl::InvalidArgumentError("upload owner is empty");
  RecursiveMutexLock lock(&mu_);
  return BeginUploadLocked(owner, project);
}

absl::StatusOr<int64_t> Store::BeginUploadLocked(const std::string& owner,
                                                 const std::string& project) {
  FCA_RETURN_IF_ERROR(Inject("upload"));
  FCA_ASSIGN_OR_RETURN(Statement insert,
                       db_->Prepare("INSERT INTO uploads (owner, project, created_at_us) "
                                    "VALUES (?1, ?2, ?3)",
                                    "begin upload"));
  insert.BindText(1, owner);
  insert.BindText(2, project.empty() ? owner : project);
  insert.BindInt(3, Now());
  FCA_RETURN_IF_ERROR(insert.Run());
  return db_->last_insert_rowid();
}

absl::Status Store::AppendUpload(int64_t upload_id, const std::string& chunk) {
  RecursiveMutexLock lock(&mu_);
  return AppendUploadLocked(upload_id, chunk);
}

absl::Status Store::AppendUploadLocked(int64_t upload_id, const std::string& chunk) {
  if (chunk.empty()) return absl::OkStatus();
  FCA_RETURN_IF_ERROR(Inject("upload"));
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement bump,
                         db_->Prepare("UPDATE uploads SET size_bytes = size_bytes + ?1, "
                                      "num_chunks = num_chunks + 1 WHERE id = ?2 "
                                      "RETURNING num_chunks - 1",
                                      "append upload"));
    bump.BindInt(1, static_cast<int64_t>(chunk.size()));
    bump.BindInt(2, upload_id);
    FCA_ASSIGN_OR_RETURN(const bool row, bump.Step());
    if (!row) return absl::NotFoundError("upload not found");
    const int64_t index = bump.ColumnInt(0);
    FCA_RETURN_IF_ERROR(bump.Run());
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare("INSERT INTO upload_chunks (upload_id, idx, data) "
                                      "VALUES (?1, ?2, ?3)",
                                      "append upload"));
    insert.BindInt(1, upload_id);
    insert.BindInt(2, index);
    insert.BindBlobNoCopy(3, chunk);
    return insert.Run();
  });
}

absl::StatusOr<DatasetRecord> Store::FinishUpload(int64_t upload_id, const std::string& name,
                                                  const std::string& kind,
                                                  const std::string& sha256) {
  FCA_RETURN_IF_ERROR(ValidateDataset(name, kind));
  FCA_RETURN_IF_ERROR(Inject("upload"));
  RecursiveMutexLock lock(&mu_);
  DatasetRecord stored;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(stored, FinishUploadLocked(upload_id, name, kind, sha256));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<DatasetRecord> Store::FinishUploadLocked(int64_t upload_id, const std::string& name,
                                                        const std::string& kind,
                                                        const std::string& sha256) {
  FCA_ASSIGN_OR_RETURN(Statement upload,
                       db_->Prepare("SELECT owner, size_bytes, num_chunks, project FROM uploads "
                                    "WHERE id = ?1",
                                    "finish upload"));
  upload.BindInt(1, upload_id);
  FCA_ASSIGN_OR_RETURN(const bool found, upload.Step());
  if (!found) return absl::NotFoundError("upload not found");
  const std::string owner = upload.ColumnText(0);
  const int64_t size = upload.ColumnInt(1), num_chunks = upload.ColumnInt(2);
  const std::string project = upload.ColumnText(3);
  FCA_RETURN_IF_ERROR(upload.Run());

  absl::StatusOr<DatasetRecord> existing = FindDatasetLocked(name, project);
  if (existing.ok()) {
    if (existing->sha256 != sha256 || existing->kind != kind) {
      return absl::AlreadyExistsError(
          absl::StrFormat("dataset '%s' already exists with different content", name));
    }
    FCA_RETURN_IF_ERROR(DeleteUploadLocked(upload_id));
    return existing;
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();

  FCA_ASSIGN_OR_RETURN(
      Statement has_blob,
      db_->Prepare("SELECT 1 FROM dataset_blobs WHERE sha256 = ?1", "find dataset content"));
  has_blob.BindText(1, sha256);
  FCA_ASSIGN_OR_RETURN(const bool blob_exists, has_blob.Step());
  if (!blob_exists)
    FCA_RETURN_IF_ERROR(KeepUploadAsBlob(*db_, upload_id, sha256, size, num_chunks));
  FCA_RETURN_IF_ERROR(DeleteUploadLocked(upload_id));
  FCA_ASSIGN_OR_RETURN(Statement insert,
                       db_->Prepare("INSERT INTO datasets (name, kind, owner, sha256, "
                                    "created_at_us, project, last_used_us) VALUES (?1, ?2, ?3, "
                                    "?4, ?5, ?6, ?5)",
                                    "store dataset"));
  insert.BindText(6, project);
  insert.BindText(1, name);
  insert.BindText(2, kind);
  insert.BindText(3, owner);
  insert.BindText(4, sha256);
  insert.BindInt(5, Now());
  FCA_RETURN_IF_ERROR(insert.Run());
  return GetDatasetLocked(db_->last_insert_rowid());
}

absl::Status Store::DeleteUploadLocked(int64_t upload_id) {
  FCA_ASSIGN_OR_RETURN(Statement remove,
                       db_->Prepare("DELETE FROM uploads WHERE id = ?1", "drop upload"));
  remove.BindInt(1, upload_id);  // chunks go by ON DELETE CASCADE
  return remove.Run();
}

absl::Status Store::AbortUpload(int64_t upload_id) {
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(DeleteUploadLocked(upload_id));
  return ReclaimSpaceLocked();
}

absl::StatusOr<int64_t> Store::DropUnfinishedUploads() {
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(db_->Execute("DELETE FROM uploads", "drop uploads"));
  const int64_t dropped = db_->changes();
  if (dropped > 0) FCA_RETURN_IF_ERROR(ReclaimSpaceLocked());
  return dropped;
}

absl::StatusOr<int64_t> Store::DeleteDataset(int64_t id) {
  FCA_RETURN_IF_ERROR(Inject("delete"));
  RecursiveMutexLock lock(&mu_);
  int64_t freed = 0;
  FCA_RETURN_IF_ERROR(DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const DatasetRecord dataset, GetDatasetLocked(id));
    FCA_ASSIGN_OR_RETURN(freed, internal::DeleteDatasetRow(*db_, dataset));
    return absl::OkStatus();
  }));
  return freed;
}

namespace internal {

absl::StatusOr<int64_t> DeleteDatasetRow(Database& db, const DatasetRecord& dataset) {
  FCA_ASSIGN_OR_RETURN(Statement remove,
                       db.Prepare("DELETE FROM datasets WHERE id = ?1", "delete dataset"));
  remove.BindInt(1, dataset.id);
  FCA_RETURN_IF_ERROR(remove.Run());
  // The content goes with its last dataset (chunks by ON DELETE CASCADE).
  FCA_ASSIGN_OR_RETURN(Statement orphan,
                       db.Prepare("DELETE FROM dataset_blobs WHERE sha256 = ?1 AND NOT "
                                  "EXISTS (SELECT 1 FROM datasets WHERE sha256 = ?1)",
                                  "delete dataset"));
  orphan.BindText(1, dataset.sha256);
  FCA_RETURN_IF_ERROR(orphan.Run());
  return db.changes() > 0 ? dataset.size_bytes : 0;
}

}  // namespace internal

absl::StatusOr<int64_t> Store::UserBytes(const std::string& owner) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare("SELECT COALESCE((SELECT SUM(b.size_bytes) FROM dataset_blobs b WHERE "
                   "b.sha256 IN (SELECT sha256 FROM datasets WHERE owner = ?1)), 0) + "
                   "COALESCE((SELECT SUM(size_bytes) FROM uploads WHERE owner = ?1), 0)",
                   "measure user storage"));
  stmt.BindText(1, owner);
  FCA_RETURN_IF_ERROR(stmt.Step().status());
  return stmt.ColumnInt(0);
}

absl::StatusOr<DatasetRecord> Store::GetDataset(int64_t id) {
  return Read([&](Database& db) { return GetDatasetIn(db, id); });
}

absl::StatusOr<DatasetRecord> Store::FindDataset(const std::string& name,
                                                 const std::string& project) {
  RecursiveMutexLock lock(&mu_);
  return FindDatasetLocked(name, project);
}

absl::StatusOr<DatasetRecord> Store::FindDatasetLocked(const std::string& name,
                                                       const std::string& project) {
  FCA_ASSIGN_OR_RETURN(Statement stmt, db_->Prepare(std::string(kSelectDataset) +
                                                        " WHERE d.project = ?1 AND d.name = ?2",
                                                    "find dataset"));
  stmt.BindText(1, project);
  stmt.BindText(2, name);
  return ReadOneDataset(stmt);
}

absl::StatusOr<DatasetRecord> Store::FindDatasetByContent(const std::string& sha256,
                                                          const std::string& project) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare(std::string(kSelectDataset) +
                                        " WHERE d.sha256 = ?1 AND d.project = ?2 ORDER BY d.id "
                                        "LIMIT 1",
                                    "find dataset by content"));
  stmt.BindText(1, sha256);
  stmt.BindText(2, project);
  return ReadOneDataset(stmt);
}

absl::StatusOr<std::vector<DatasetRecord>> Store::ListDatasets(
    const std::optional<std::string>& project) {
  return Read([&](Database& db) -> absl::StatusOr<std::vector<DatasetRecord>> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare(std::string(kSelectDataset) +
                                        " WHERE ?1 IS NULL OR d.project = ?1 ORDER BY d.id",
                                    "list datasets"));
    if (project.has_value()) {
      stmt.BindText(1, *project);
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
  });
}

absl::StatusOr<DatasetPage> Store::ListDatasets(const std::optional<std::string>& project,
                                                int page_size, const std::string& page_token) {
  FCA_ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page_size));
  FCA_ASSIGN_OR_RETURN(const std::optional<int64_t> before,
                       internal::ParsePageToken(kDatasetTokenKind, page_token));
  internal::WhereBuilder where;
  // datasets_by_project ends in the id: a project's page is read in order.
  if (project.has_value()) where.Add("d.project = ?", *project);
  if (before.has_value()) where.Add("d.id < ?", *before);  // newest first
  return Read([&](Database& db) -> absl::StatusOr<DatasetPage> {
    FCA_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(std::string(kSelectDataset) + where.Sql() +
                                                        " ORDER BY d.id DESC LIMIT ?",
                                                    "list datasets"));
    where.BindAll(stmt);
    stmt.BindInt(where.num_values() + 1, size + 1);  // +1: is there more?
    DatasetPage page;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      if (static_cast<int>(page.datasets.size()) == size) {
        page.next_page_token = internal::MakePageToken(kDatasetTokenKind, page.datasets.back().id);
        break;
      }
      page.datasets.push_back(ReadDataset(stmt));
    }
    return page;
  });
}

absl::StatusOr<std::string> Store::ReadDatasetBytes(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  return ReadDatasetLocked(id, -1);
}

absl::StatusOr<std::string> Store::ReadDatasetPrefix(int64_t id, int64_t max_bytes) {
  if (max_bytes < 0) return absl::InvalidArgumentError("max_bytes is negative");
  RecursiveMutexLock lock(&mu_);
  return ReadDatasetLocked(id, max_bytes);
}

// max_bytes < 0: everything. No transaction: content is only deleted by
// DeleteDataset, which this store's mutex (held by the caller) keeps out,
// and one server owns a database (StoreOptions::exclusive).
absl::StatusOr<std::string> Store::ReadDatasetLocked(int64_t id, int64_t max_bytes) {
  FCA_ASSIGN_OR_RETURN(Statement meta,
                       db_->Prepare("SELECT b.sha256, b.size_bytes, b.num_chunks FROM "
                                    "datasets d JOIN dataset_blobs b ON b.sha256 = d.sha256 "
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
  if (max_bytes < 0 || max_bytes >= meta.ColumnInt(1)) {
    return internal::ReadChunks(chunks, reader, meta.ColumnInt(1), meta.ColumnInt(2));
  }
  std::string out;
  while (static_cast<int64_t>(out.size()) < max_bytes) {
    FCA_ASSIGN_OR_RETURN(const bool more, chunks.Step());
    if (!more) return absl::DataLossError("storage: stored data is incomplete");
    FCA_RETURN_IF_ERROR(reader.AppendTo(chunks.ColumnInt(0), &out).status());
  }
  out.resize(static_cast<size_t>(max_bytes));
  return out;
}

}  // namespace fca::storage
