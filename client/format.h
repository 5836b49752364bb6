// Pure formatting for the `fca` CLI: tables, CSV, JSON (progress bars are
// format_progress.h's).
//
// Nothing here does I/O or reads a clock: every function maps messages to a
// string, so the output users and scripts depend on is unit-tested byte for
// byte.
#ifndef FCA_CLIENT_FORMAT_H_
#define FCA_CLIENT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/timestamp.pb.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

// ---------------------------------------------------------------- tables

// A text table whose columns are padded to their widest cell. Numeric
// columns read better right-aligned, so alignment is per column.
class TextTable {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string title;
    Align align = Align::kLeft;
  };
  explicit TextTable(std::vector<Column> columns);

  // Missing cells render empty; extra cells are a programming error and are
  // dropped.
  void AddRow(std::vector<std::string> cells);
  // Header line, then one line per row, each ending in '\n'. Trailing spaces
  // are trimmed so output diffs cleanly. With `max_width` > 0 a table wider
  // than that is printed in parts, one below the other (a blank line
  // between), each with the key columns and as many of the others as fit:
  // a terminal never wraps a row into the next one. A column wider than
  // `max_width` on its own still gets a part (and exceeds it).
  std::string Render(size_t max_width = 0) const;
  // The first `n` columns name a row (model, intervention): every part of a
  // split table repeats them. [1]
  void set_key_columns(size_t n) { key_columns_ = n; }
  // The same table as an HTML <table> (cells escaped; right-aligned columns
  // get class="num"), with `caption` as its <caption>, scope="col" on the
  // header cells and the first column as row headers (scope="row"), inside
  // a <div class="table-wrap"> that scrolls sideways (give it
  // overflow-x: auto) instead of widening the page.
  std::string RenderHtml(std::string_view caption) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
  size_t key_columns_ = 1;
};

// `text` with each line longer than `width` display columns broken at
// spaces (a word longer than `width` stays whole on its own line).
std::string WrapText(std::string_view text, size_t width);

// Terminal columns `fca report`, `fca compare`, `fca jobs show`, `fca info`,
// `fca admin log` and the listings' free text fit in without --wide.
constexpr size_t kReportWidth = 100;

// `text` with every line wider than `width` display columns (0: none)
// broken at spaces, a word wider than a line cut, the continuation lines
// under the line's last field (a "key:   value" line's value, a table row's
// last column; else indented two more): every line then fits in `width`.
std::string FitToWidth(std::string_view text, size_t width);

std::string FormatModelsTable(const std::vector<fca::v1::Model>& models);
// The model folders the server cannot serve (as Triton's repository index
// lists UNAVAILABLE models): a titled section, one "name: reason" each,
// wrapped to kReportWidth; "" when there are none.
std::string FormatUnavailableModels(const std::vector<fca::v1::UnavailableModel>& folders);
std::string FormatDatasetsTable(const std::vector<fca::v1::Dataset>& sets);
std::string FormatJobsTable(const std::vector<fca::v1::Job>& jobs);
// `fca jobs show`: one "key: value" line per field, the tasks with their
// provenance, the job's provenance, then the spec as JSON; fitted to
// `width` columns (FitToWidth; 0: at full width, --wide).
std::string FormatJobDetails(const fca::v1::Job& job, size_t width = kReportWidth);
// One line summarising an upload: name, id, size, sha, deduplicated.
std::string FormatUploadSummary(const fca::v1::UploadDatasetResponse& r);
// `fca export`'s summary of the stream header.
std::string FormatCoefficientsHeader(const fca::v1::CoefficientsHeader& h);

// ---------------------------------------------------------------- results

enum class ResultFormat { kTable, kJson, kCsv };
// "table", "json" or "csv"; anything else is a usage error.
[[nodiscard]] absl::StatusOr<ResultFormat> ParseResultFormat(std::string_view name);

// Aligned columns JOB MODEL INTERVENTION METRIC VALUE CI N; VALUE is
// "undefined" when defined is false; CI is "[lo, hi]" or "-".
std::string FormatResultsTable(const std::vector<fca::v1::Result>& results);
// RFC 4180 with '\n' line ends: a header row, then one row per result.
// Undefined values leave `value` empty; absent CI bounds are empty.
// Numbers use the shortest text that reads back to the same double.
std::string FormatResultsCsv(const std::vector<fca::v1::Result>& results);
// A JSON array with one element per line; each element is the proto3
// canonical JSON of the Result (lowerCamelCase names, int64 as strings,
// RFC 3339 times) with default-valued fields printed, so `defined: false`
// and `value: 0` are explicit. `[]` when empty.
std::string FormatResultsJson(const std::vector<fca::v1::Result>& results);
std::string FormatResults(const std::vector<fca::v1::Result>& results, ResultFormat format);

// `fca tokenize --json`: {"model", "tokenizer", "vocab_size", "ids": [...]}
// on one line.
std::string FormatTokenizeJson(const fca::v1::TokenizeResponse& response);

// `fca info`: versions, devices, limits, `queue_lines` (FormatQueueSummary;
// "" for none), then the interventions and the metrics with their units and
// descriptions.
// Fitted to `width` columns (FitToWidth; 0: at full width, --wide).
std::string FormatServerInfo(const fca::v1::GetServerInfoResponse& info,
                             const std::string& queue_lines = "", size_t width = kReportWidth);
// `fca queue`: FormatQueueSummary, then tables of the models (tasks, where
// loaded, where running), the projects (the unnamed row as "(other
// projects)") and the caller's jobs with their places in the queue.
std::string FormatQueue(const fca::v1::GetQueueResponse& queue);
// Two lines for `fca info`: the server's totals and the loaded models.
std::string FormatQueueSummary(const fca::v1::GetQueueResponse& queue);
// `fca windows`: one line per window (set, index, hash).
std::string FormatWindowsTable(const fca::v1::ListJobWindowsResponse& windows);
// Any message as proto3 JSON (every field, pretty), ending in '\n'.
std::string FormatProtoJson(const google::protobuf::Message& message);

// ---------------------------------------------------------------- fields

// `text` with &, <, >, " and ' replaced by character references.
std::string HtmlEscape(std::string_view text);

// One CSV field, quoted when it holds a comma, quote, CR or LF (quotes
// doubled), verbatim otherwise.
std::string CsvField(std::string_view field);
// Shortest decimal that parses back to exactly `value` ("0.1", "3.4123").
std::string ShortestDouble(double value);
// Six significant digits, for humans ("3.41235", "98.7").
std::string HumanDouble(double value);
// "[lo, hi]" when both bounds are present, "-" otherwise.
std::string FormatCi(const fca::v1::Result& result);
// 76214528 -> "76.2M"; below 1000 the plain number.
std::string HumanCount(int64_t count);
// 1536 -> "1.5 KiB".
std::string HumanBytes(int64_t bytes);
// RFC 3339 in UTC to the second ("2024-05-01T12:00:03Z"); "-" when unset.
std::string FormatTimestamp(const google::protobuf::Timestamp& ts);
// "QUEUED", "RUNNING", ... (the enum name without its prefix).
std::string JobStateName(fca::v1::JobState state);
// queued|running|succeeded|failed|cancelled, any case; else a usage error.
[[nodiscard]] absl::StatusOr<fca::v1::JobState> ParseJobState(std::string_view name);
// text|tokens; else a usage error.
[[nodiscard]] absl::StatusOr<fca::v1::DatasetKind> ParseDatasetKind(std::string_view name);
std::string DatasetKindName(fca::v1::DatasetKind kind);
// RFC 3339 ("2024-05-01T12:00:00Z", offsets and fractions allowed).
[[nodiscard]] absl::StatusOr<google::protobuf::Timestamp> ParseRfc3339(std::string_view text);

}  // namespace fca::client

#endif  // FCA_CLIENT_FORMAT_H_
