// Helpers shared by the store_*.cc files; not part of the storage API.
#ifndef FCA_STORAGE_STORE_INTERNAL_H_
#define FCA_STORAGE_STORE_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/records.h"
#include "storage/sqlite.h"

namespace fca::storage::internal {

// Inserts `bytes` as consecutive chunks of at most `chunk_bytes` through
// `insert`, whose parameter 1 (the owner key) is already bound; parameters 2
// and 3 receive the chunk index (0, 1, ...) and the chunk. Empty bytes make
// no chunk. Sets *num_chunks.
[[nodiscard]] absl::Status InsertChunks(Statement& insert, const std::string& bytes,
                                        int64_t chunk_bytes, int64_t* num_chunks);

// Concatenates the chunks whose rowids `select` returns in column 0 (in
// chunk order), read through `reader`, and checks them against the recorded
// size and chunk count: DATA_LOSS when they differ.
[[nodiscard]] absl::StatusOr<std::string> ReadChunks(Statement& select, BlobReader& reader,
                                                     int64_t expected_bytes,
                                                     int64_t expected_chunks);

// Builds a WHERE clause from fixed SQL fragments, each with `?`
// placeholders, and remembers the values to bind to them in order. Values
// never enter the SQL text.
class WhereBuilder {
 public:
  // `fragment` holds exactly one `?`.
  void Add(const char* fragment, int64_t value);
  void Add(const char* fragment, std::string value);
  // `column IN (?, ?, ...)` with one placeholder per value; `column` is a
  // fixed column name.
  void AddIn(const char* column, const std::vector<std::string>& values);
  void AddIn(const char* column, const std::vector<int64_t>& values);
  // " WHERE a AND b ..." or "" when nothing was added.
  std::string Sql() const;
  // Binds every value, starting at parameter 1.
  void BindAll(Statement& stmt) const;
  // Placeholders used so far; the next free parameter is num_values() + 1.
  int num_values() const { return static_cast<int>(values_.size()); }

 private:
  template <typename T>
  void AddInValues(const char* column, const std::vector<T>& values);

  std::vector<std::string> fragments_;
  std::vector<std::variant<int64_t, std::string>> values_;
};

// Steps `select` to its end: column 0 of every row, as ids.
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> ReadIds(Statement& select);

// Page tokens are a one-letter kind followed by the decimal id of the last
// row served, so a token of one listing is refused by another.
std::string MakePageToken(char kind, int64_t last_id);
// nullopt for an empty token (first page); INVALID_ARGUMENT when malformed.
[[nodiscard]] absl::StatusOr<std::optional<int64_t>> ParsePageToken(char kind,
                                                                    const std::string& token);
// 0 -> default, above the maximum -> maximum, negative -> INVALID_ARGUMENT.
[[nodiscard]] absl::StatusOr<int> EffectivePageSize(int page_size);

// Deletes `dataset`'s row, and its bytes (chunks by ON DELETE CASCADE) when
// no other dataset has them; returns the bytes freed. Inside the caller's
// transaction (DeleteDataset, PurgeExpiredDataset).
[[nodiscard]] absl::StatusOr<int64_t> DeleteDatasetRow(Database& db, const DatasetRecord& dataset);

}  // namespace fca::storage::internal

#endif  // FCA_STORAGE_STORE_INTERNAL_H_
