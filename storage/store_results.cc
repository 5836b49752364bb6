// Store: audit results and their filtered, paged query.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr char kResultTokenKind = 'r';

absl::Status ValidateRow(const ResultRow& row, int64_t job_id) {
  if (row.job_id != 0 && row.job_id != job_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("result row names job %d, expected %d", row.job_id, job_id));
  }
  if (row.model.empty() || row.intervention.empty() || row.metric.empty()) {
    return absl::InvalidArgumentError("result row needs a model, an intervention and a metric");
  }
  if (row.n < 0) return absl::InvalidArgumentError("result row has n < 0");
  return absl::OkStatus();
}

void BindOptionalDouble(Statement& stmt, int index, const std::optional<double>& value) {
  if (value.has_value()) {
    stmt.BindDouble(index, *value);
  } else {
    stmt.BindNull(index);
  }
}

std::optional<double> ColumnOptionalDouble(const Statement& stmt, int col) {
  if (stmt.ColumnIsNull(col)) return std::nullopt;
  return stmt.ColumnDouble(col);
}

// `column` IN (`one` and `more` together) when there is any value. SQLite
// reads `IN (?)` with one value as an equality, which the single-column
// indexes serve in id order, as before several values were possible.
template <typename T>
void AddOneOf(internal::WhereBuilder& where, const char* column, const std::optional<T>& one,
              std::vector<T> more) {
  if (one.has_value()) more.insert(more.begin(), *one);
  if (more.empty()) return;
  where.AddIn(column, more);
}

}  // namespace

absl::StatusOr<int64_t> Store::InsertResults(int64_t job_id, const std::vector<ResultRow>& rows) {
  FCA_RETURN_IF_ERROR(Inject("insert_results"));
  for (const ResultRow& row : rows) FCA_RETURN_IF_ERROR(ValidateRow(row, job_id));
  RecursiveMutexLock lock(&mu_);
  int64_t inserted = 0;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    inserted = 0;
    FCA_ASSIGN_OR_RETURN(const bool exists, JobExistsLocked(job_id));
    if (!exists) {
      return absl::NotFoundError(absl::StrFormat("job %d not found", job_id));
    }
    FCA_ASSIGN_OR_RETURN(
        Statement insert,
        db_->Prepare("INSERT INTO results (job_id, model, weights_sha256, "
                     "dataset_sha256, intervention, metric, value, defined, ci_low, "
                     "ci_high, n, created_at_us, calib_sha256) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
                     "ON CONFLICT (job_id, model, intervention, metric) DO NOTHING",
                     "insert results"));
    const int64_t now = Now();
    for (const ResultRow& row : rows) {
      insert.BindInt(1, job_id);
      insert.BindText(2, row.model);
      insert.BindText(3, row.weights_sha256);
      insert.BindText(4, row.dataset_sha256);
      insert.BindText(5, row.intervention);
      insert.BindText(6, row.metric);
      insert.BindDouble(7, row.value);
      insert.BindInt(8, row.defined ? 1 : 0);
      BindOptionalDouble(insert, 9, row.ci_low);
      BindOptionalDouble(insert, 10, row.ci_high);
      insert.BindInt(11, row.n);
      insert.BindInt(12, now);
      insert.BindText(13, row.calib_sha256);
      FCA_RETURN_IF_ERROR(insert.Run());
      inserted += db_->changes();
      FCA_RETURN_IF_ERROR(insert.Reset());
    }
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<ResultPage> Store::QueryResults(const ResultFilter& filter, int page_size,
                                               const std::string& page_token) {
  FCA_ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page_size));
  FCA_ASSIGN_OR_RETURN(const std::optional<int64_t> after,
                       internal::ParsePageToken(kResultTokenKind, page_token));
  internal::WhereBuilder where;
  AddOneOf(where, "job_id", filter.job_id, filter.job_ids);
  AddOneOf(where, "model", filter.model, filter.models);
  if (filter.dataset_sha256.has_value()) {
    where.Add("dataset_sha256 = ?", *filter.dataset_sha256);
  }
  AddOneOf(where, "intervention", filter.intervention, filter.interventions);
  AddOneOf(where, "metric", filter.metric, filter.metrics);
  if (filter.created_after_us.has_value()) {
    where.Add("created_at_us >= ?", *filter.created_after_us);
  }
  if (filter.created_before_us.has_value()) {
    where.Add("created_at_us < ?", *filter.created_before_us);
  }
  if (after.has_value()) where.Add("id > ?", *after);

  return Read([&](Database& db) -> absl::StatusOr<ResultPage> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare("SELECT id, job_id, model, weights_sha256, dataset_sha256, "
                                    "intervention, metric, value, defined, ci_low, ci_high, n, "
                                    "created_at_us, calib_sha256 FROM results" +
                                        where.Sql() + " ORDER BY id LIMIT ?",
                                    "query results"));
    where.BindAll(stmt);
    stmt.BindInt(where.num_values() + 1, size + 1);  // +1: is there more?
    ResultPage page;
    int64_t last_id = 0;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      if (static_cast<int>(page.rows.size()) == size) {
        page.next_page_token = internal::MakePageToken(kResultTokenKind, last_id);
        break;
      }
      last_id = stmt.ColumnInt(0);
      ResultRow result;
      result.job_id = stmt.ColumnInt(1);
      result.model = stmt.ColumnText(2);
      result.weights_sha256 = stmt.ColumnText(3);
      result.dataset_sha256 = stmt.ColumnText(4);
      result.intervention = stmt.ColumnText(5);
      result.metric = stmt.ColumnText(6);
      result.value = stmt.ColumnDouble(7);
      result.defined = stmt.ColumnInt(8) != 0;
      result.ci_low = ColumnOptionalDouble(stmt, 9);
      result.ci_high = ColumnOptionalDouble(stmt, 10);
      result.n = stmt.ColumnInt(11);
      result.created_at_us = stmt.ColumnInt(12);
      result.calib_sha256 = stmt.ColumnText(13);
      page.rows.push_back(std::move(result));
    }
    return page;
  });
}

}  // namespace fca::storage
