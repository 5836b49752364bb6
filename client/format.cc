// Long file: the CLI's tables and value formats, one home for widths, units and names.
#include "client/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/exit_codes.h"
#include "client/text_safety.h"
#include "common/json.h"
#include "common/proto_json.h"
#include "common/vocabulary.h"

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

constexpr size_t kShaPrefix = 12;  // enough to tell weights apart by eye

std::string ShaPrefix(const std::string& sha) {
  return SanitizeForTerminal(sha.substr(0, std::min(sha.size(), kShaPrefix)));
}

// fca's JSON of one message (common/proto_json.h), enum values by their
// short names as in the tables and the HTTP API; the printer fails only
// on invalid UTF-8, which the server's replies do not carry.
std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  absl::StatusOr<std::string> out = PrintProtoJsonShortEnums(message, pretty);
  return out.ok() ? *std::move(out) : std::string("{}");
}

std::string RightTrim(std::string line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

}  // namespace

// ---------------------------------------------------------------- TextTable

TextTable::TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

namespace {

// Terminal columns of UTF-8 text, one per code point (cells hold no wide or
// combining characters: names, numbers and "±").
size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string TextTable::Render(size_t max_width) const {
  // Cells carry server strings (names, labels, errors): sanitized here, at
  // the one place every table is printed from.
  std::vector<std::string> titles;
  for (const Column& column : columns_) titles.push_back(SanitizeForTerminal(column.title));
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : rows_) {
    std::vector<std::string>& cells = rows.emplace_back();
    for (const std::string& cell : row) cells.push_back(SanitizeForTerminal(cell));
  }
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = DisplayWidth(titles[c]);
    for (const auto& row : rows) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  // The parts: the key columns, then the others greedily while they fit.
  const size_t keys = std::min(key_columns_, columns_.size());
  size_t key_width = 0;
  for (size_t c = 0; c < keys; ++c) key_width += widths[c] + 2;
  std::vector<std::vector<size_t>> parts(1);
  size_t width = key_width;
  for (size_t c = keys; c < columns_.size(); ++c) {
    if (max_width > 0 && !parts.back().empty() && width + widths[c] > max_width) {
      parts.emplace_back();
      width = key_width;
    }
    parts.back().push_back(c);
    width += widths[c] + 2;
  }
  auto render_line = [&](const std::vector<size_t>& part, auto cell_at) {
    std::string line;
    bool first = true;
    auto add = [&](size_t c) {
      if (!first) line += "  ";
      first = false;
      const std::string& cell = cell_at(c);
      std::string pad(widths[c] - DisplayWidth(cell), ' ');
      line += columns_[c].align == Align::kRight ? pad + cell : cell + pad;
    };
    for (size_t c = 0; c < keys; ++c) add(c);
    for (size_t c : part) add(c);
    return RightTrim(std::move(line)) + "\n";
  };
  std::string out;
  for (const std::vector<size_t>& part : parts) {
    if (!out.empty()) out += "\n";
    out += render_line(part, [&](size_t c) -> const std::string& { return titles[c]; });
    for (const auto& row : rows) {
      out += render_line(part, [&](size_t c) -> const std::string& { return row[c]; });
    }
  }
  return out;
}

std::string WrapText(std::string_view text, size_t width) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    if (!out.empty()) out += "\n";
    if (width == 0 || DisplayWidth(std::string(line)) <= width) {
      out.append(line.data(), line.size());
      continue;
    }
    // Pieces between single spaces ("" where spaces run), so that runs of
    // spaces within a line are kept; a break drops one space.
    size_t used = 0;
    bool first = true;
    for (absl::string_view word : absl::StrSplit(line, ' ')) {
      const size_t w = DisplayWidth(std::string(word));
      if (!first && used + 1 + w > width && used > 0) {
        out += "\n";
        used = 0;
        if (word.empty()) continue;  // no leading space on the new line
      } else if (!first) {
        out += " ";
        ++used;
      }
      first = false;
      out.append(word.data(), word.size());
      used += w;
    }
  }
  return out;
}

namespace {

// The narrowest continuation: a last column further right than this goes
// on from the line's own indent instead.
constexpr size_t kMinContinuation = 24;

// Where a too-long line's continuation lines start: under its last field
// (the text after the last run of two or more spaces that leaves at least
// kMinContinuation columns: a "key:   value" line's value, a table row's
// last column), else two columns in from the line's own indent.
size_t HangingIndent(std::string_view line, size_t width) {
  const size_t limit = width > 2 * kMinContinuation ? width - kMinContinuation : width / 2;
  const size_t lead = line.find_first_not_of(' ');
  size_t indent = (lead == std::string_view::npos ? 0 : lead) + 2;
  size_t columns = 0;  // display columns before position i
  for (size_t i = 0; i < line.size() && columns <= limit; ++i) {
    if (i >= 2 && i > lead && line[i] != ' ' && line[i - 1] == ' ' && line[i - 2] == ' ') {
      indent = columns;
    }
    columns += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  }
  return std::min(indent, limit);
}

// The bytes of `text`'s first `columns` code points.
size_t BytesOfColumns(std::string_view text, size_t columns) {
  size_t i = 0;
  for (size_t seen = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (seen == columns) break;
    ++seen;
  }
  return i;
}

}  // namespace

std::string FitToWidth(std::string_view text, size_t width) {
  std::string out;
  bool first_line = true;
  for (absl::string_view piece :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    if (!first_line) out += '\n';
    first_line = false;
    const std::string line(piece);
    if (width == 0 || DisplayWidth(line) <= width) {
      out += line;
      continue;
    }
    const size_t indent = HangingIndent(line, width);
    const size_t lead = std::min(line.find_first_not_of(' '), line.size());
    out.append(line, 0, lead);
    size_t used = lead;
    const auto new_line = [&] {
      out += '\n';
      out.append(indent, ' ');
      used = indent;
    };
    // A word wider than a line fills this one and goes on below, cut after
    // its last comma that fits (a list, JSON), else where the line ends.
    const auto put = [&](std::string_view word) {
      while (DisplayWidth(std::string(word)) > width - used) {
        size_t cut = BytesOfColumns(word, width - used);
        const size_t comma = word.substr(0, cut).rfind(',');
        if (comma != std::string_view::npos) cut = comma + 1;
        out.append(word.substr(0, cut));
        word.remove_prefix(cut);
        new_line();
      }
      out.append(word);
      used += DisplayWidth(std::string(word));
    };
    bool fresh = true;  // no word yet on the current output line
    // "" between two spaces: runs of spaces (table columns) are kept.
    for (absl::string_view w : absl::StrSplit(absl::string_view(line).substr(lead), ' ')) {
      const std::string_view word(w.data(), w.size());
      const size_t cols = DisplayWidth(std::string(word));
      if (!fresh && ((used + 1 + cols > width && cols <= width - indent) || used + 1 >= width)) {
        new_line();
        fresh = true;
        if (word.empty()) continue;  // no leading space on a new line
      }
      if (!fresh) {
        out += ' ';
        ++used;
      }
      put(word);
      fresh = false;
    }
  }
  return out;
}

std::string TextTable::RenderHtml(std::string_view caption) const {
  auto cell = [&](const char* tag, const char* scope, size_t c, const std::string& text) {
    const bool num = columns_[c].align == Align::kRight;
    return absl::StrCat("<", tag, scope, num ? " class=\"num\">" : ">", HtmlEscape(text), "</", tag,
                        ">");
  };
  const std::string label = HtmlEscape(caption);
  std::string out =
      absl::StrCat("<div class=\"table-wrap\" role=\"region\" aria-label=\"", label,
                   "\" tabindex=\"0\">\n<table>\n<caption>", label, "</caption>\n<thead><tr>");
  for (size_t c = 0; c < columns_.size(); ++c) {
    out += cell("th", " scope=\"col\"", c, columns_[c].title);
  }
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows_) {
    out += "<tr>";
    for (size_t c = 0; c < columns_.size(); ++c) {
      out += c == 0 ? cell("th", " scope=\"row\"", c, row[c]) : cell("td", "", c, row[c]);
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n</div>\n";
}

// ---------------------------------------------------------------- listings

std::string FormatModelsTable(const std::vector<v1::Model>& models) {
  using A = TextTable::Align;
  TextTable table({{"NAME"}, {"FAMILY"}, {"PARAMS", A::kRight}, {"SITES", A::kRight}, {"WEIGHTS"}});
  for (const auto& m : models) {
    table.AddRow({m.name(), m.family(), HumanCount(m.num_parameters()),
                  absl::StrFormat("%d", m.sites_size()), ShaPrefix(m.weights_sha256())});
  }
  return table.Render();
}

std::string FormatUnavailableModels(const std::vector<v1::UnavailableModel>& folders) {
  if (folders.empty()) return "";
  std::string out = "\nUnavailable (the server refused their config.json; fix the folder):\n";
  for (const auto& f : folders) {
    absl::StrAppend(
        &out, WrapText(SanitizeForTerminal(absl::StrCat(f.name(), ": ", f.reason())), kReportWidth),
        "\n");
  }
  return out;
}

std::string FormatDatasetsTable(const std::vector<v1::Dataset>& sets) {
  using A = TextTable::Align;
  TextTable table({{"ID", A::kRight},
                   {"NAME"},
                   {"KIND"},
                   {"SIZE", A::kRight},
                   {"SHA256"},
                   {"OWNER"},
                   {"PROJECT"},
                   {"CREATED"}});
  for (const auto& d : sets) {
    table.AddRow({absl::StrFormat("%d", d.id()), d.name(), DatasetKindName(d.kind()),
                  HumanBytes(d.size_bytes()), ShaPrefix(d.sha256()), d.owner(), d.project(),
                  FormatTimestamp(d.created_at())});
  }
  return table.Render();
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs) {
  using A = TextTable::Align;
  TextTable table({{"ID", A::kRight},
                   {"STATE"},
                   {"PROGRESS", A::kRight},
                   {"OWNER"},
                   {"PROJECT"},
                   {"CREATED"},
                   {"MODELS"},
                   {"LABEL"}});
  for (const auto& j : jobs) {
    table.AddRow({absl::StrFormat("%d", j.id()), JobStateName(j.state()),
                  absl::StrFormat("%.0f%%", 100 * j.progress()), j.owner(), j.project(),
                  FormatTimestamp(j.created_at()), absl::StrJoin(j.spec().models(), ","),
                  j.spec().label()});
  }
  return table.Render();
}

namespace {

std::string DatasetLine(const std::string& ref, const std::string& sha256) {
  return absl::StrFormat("%s (sha256:%s)", SanitizeForTerminal(ref),
                         sha256.empty() ? "?" : SanitizeForTerminal(sha256));
}

// Indented lines under a task: who ran it, on what, with which windows.
std::string FormatTaskProvenance(const v1::TaskProvenance& p) {
  auto s = [](const std::string& text) { return SanitizeForTerminal(text); };
  std::string out;
  absl::StrAppendFormat(&out, "      ran by %s on %s: engine %s, torch %s, %s %s, threads=%d\n",
                        s(p.worker()), s(p.host()), s(p.engine_version()), s(p.torch_version()),
                        s(p.device()), s(p.dtype()), p.threads());
  absl::StrAppendFormat(&out, "      weights sha256:%s", s(p.weights_sha256()));
  if (!p.dense_twin().empty()) {
    absl::StrAppendFormat(&out, ", twin %s sha256:%s", s(p.dense_twin()),
                          s(p.dense_twin_weights_sha256()));
  }
  absl::StrAppendFormat(&out,
                        "\n      windows T=%d: eval %d (%d cached), calib %d (%d cached); "
                        "seed %d; attempt %d\n",
                        p.window_length(), p.eval_windows(), p.cached_eval_windows(),
                        p.calib_windows(), p.cached_calib_windows(), p.seed(), p.attempt());
  absl::StrAppendFormat(&out, "      interventions %s\n", s(absl::StrJoin(p.interventions(), ",")));
  absl::StrAppendFormat(&out, "      options %s\n", s(p.options_json()));
  absl::StrAppendFormat(&out, "      ran %s .. %s\n", FormatTimestamp(p.started_at()),
                        FormatTimestamp(p.finished_at()));
  return out;
}

std::string FormatJobProvenance(const v1::Provenance& p) {
  std::string out = "provenance:\n";
  absl::StrAppendFormat(&out, "  eval:           %s\n",
                        DatasetLine(p.eval_dataset(), p.eval_sha256()));
  absl::StrAppendFormat(&out, "  calib:          %s\n",
                        DatasetLine(p.calib_dataset(), p.calib_sha256()));
  absl::StrAppendFormat(&out, "  seed:           %d\n", p.seed());
  absl::StrAppendFormat(&out, "  server_version: %s\n", SanitizeForTerminal(p.server_version()));
  return out;
}

}  // namespace

std::string FormatJobDetails(const v1::Job& job, size_t width) {
  std::string out;
  absl::StrAppendFormat(&out, "id:               %d\n", job.id());
  absl::StrAppendFormat(&out, "owner:            %s\n", SanitizeForTerminal(job.owner()));
  absl::StrAppendFormat(&out, "project:          %s\n", SanitizeForTerminal(job.project()));
  absl::StrAppendFormat(&out, "state:            %s\n", JobStateName(job.state()));
  absl::StrAppendFormat(&out, "progress:         %.1f%%\n", 100 * job.progress());
  absl::StrAppendFormat(&out, "created:          %s\n", FormatTimestamp(job.created_at()));
  absl::StrAppendFormat(&out, "started:          %s\n", FormatTimestamp(job.started_at()));
  absl::StrAppendFormat(&out, "finished:         %s\n", FormatTimestamp(job.finished_at()));
  absl::StrAppendFormat(&out, "attempts:         %d\n", job.attempts());
  absl::StrAppendFormat(&out, "cancel_requested: %s\n", job.cancel_requested() ? "true" : "false");
  if (!job.error().empty()) {
    absl::StrAppendFormat(&out, "error:            %s\n", SanitizeForTerminal(job.error()));
  }
  if (!job.notice().empty()) {
    absl::StrAppendFormat(&out, "notice:           %s\n", SanitizeForTerminal(job.notice()));
  }
  if (job.tasks_size() > 0) out += "tasks:\n";
  for (const v1::JobTask& t : job.tasks()) {
    absl::StrAppendFormat(&out, "  %d %-20s %-9s attempts %d", t.index(),
                          SanitizeForTerminal(t.model()), JobStateName(t.state()), t.attempts());
    if (!t.worker().empty())
      absl::StrAppendFormat(&out, "  on %s", SanitizeForTerminal(t.worker()));
    if (!t.placement().empty()) {
      absl::StrAppendFormat(&out, "  [%s]", SanitizeForTerminal(t.placement()));
    }
    if (!t.error().empty())
      absl::StrAppendFormat(&out, "\n      %s", SanitizeForTerminal(t.error()));
    out += "\n";
    if (t.has_provenance()) out += FormatTaskProvenance(t.provenance());
  }
  if (job.has_provenance()) out += FormatJobProvenance(job.provenance());
  // Proto JSON escapes control characters but not every character a
  // terminal acts on (bidi controls); an escape is still valid JSON.
  absl::StrAppendFormat(&out, "spec:\n%s\n",
                        SanitizeLinesForTerminal(ToJson(job.spec(), /*pretty=*/true)));
  return FitToWidth(out, width);
}

std::string FormatUploadSummary(const v1::UploadDatasetResponse& r) {
  const v1::Dataset& d = r.dataset();
  return absl::StrFormat("dataset %d '%s' (%s, %s) sha256:%s%s\n", d.id(),
                         SanitizeForTerminal(d.name()), DatasetKindName(d.kind()),
                         HumanBytes(d.size_bytes()), SanitizeForTerminal(d.sha256()),
                         r.deduplicated() ? " [deduplicated]" : "");
}

std::string FormatCoefficientsHeader(const v1::CoefficientsHeader& h) {
  int64_t channels = 0;
  for (const auto& site : h.sites()) channels += site.channels();
  return absl::StrFormat(
      "model %s (weights %s) window %s: dtype %s, T=%d, %d sites, "
      "%d channels/token, %s\n",
      SanitizeForTerminal(h.model()), ShaPrefix(h.weights_sha256()), ShaPrefix(h.window_hash()),
      SanitizeForTerminal(h.dtype()), h.window_length(), h.sites_size(), channels,
      HumanBytes(h.total_bytes()));
}

// ---------------------------------------------------------------- results

absl::StatusOr<ResultFormat> ParseResultFormat(std::string_view name) {
  if (name == "table") return ResultFormat::kTable;
  if (name == "json") return ResultFormat::kJson;
  if (name == "csv") return ResultFormat::kCsv;
  return UsageError(
      absl::StrFormat("--format must be table, json or csv, not '%s'", std::string(name)));
}

namespace {

// A table's VALUE: a verdict as the report words it (JSON and CSV keep the
// number).
std::string ValueCell(const v1::Result& r) {
  if (!r.defined()) return "undefined";
  if (r.metric() == kSlowdownVerdict) return SlowdownVerdictName(r.value());
  return HumanDouble(r.value());
}

}  // namespace

std::string FormatResultsTable(const std::vector<v1::Result>& results) {
  using A = TextTable::Align;
  TextTable table({{"JOB", A::kRight},
                   {"MODEL"},
                   {"INTERVENTION"},
                   {"METRIC"},
                   {"VALUE", A::kRight},
                   {"CI"},
                   {"N", A::kRight}});
  for (const auto& r : results) {
    table.AddRow({absl::StrFormat("%d", r.job_id()), r.model(), r.intervention(), r.metric(),
                  ValueCell(r), FormatCi(r), absl::StrFormat("%d", r.n())});
  }
  return table.Render();
}

std::string FormatResultsCsv(const std::vector<v1::Result>& results) {
  std::string out =
      "job_id,model,weights_sha256,dataset_sha256,intervention,metric,value,"
      "defined,ci_low,ci_high,n,created_at\n";
  for (const auto& r : results) {
    std::vector<std::string> fields = {
        absl::StrFormat("%d", r.job_id()),
        CsvField(r.model()),
        CsvField(r.weights_sha256()),
        CsvField(r.dataset_sha256()),
        CsvField(r.intervention()),
        CsvField(r.metric()),
        r.defined() ? ShortestDouble(r.value()) : "",
        r.defined() ? "true" : "false",
        r.has_ci_low() ? ShortestDouble(r.ci_low()) : "",
        r.has_ci_high() ? ShortestDouble(r.ci_high()) : "",
        absl::StrFormat("%d", r.n()),
        r.has_created_at() ? FormatTimestamp(r.created_at()) : "",
    };
    out += absl::StrJoin(fields, ",") + "\n";
  }
  return out;
}

std::string FormatResultsJson(const std::vector<v1::Result>& results) {
  if (results.empty()) return "[]\n";
  std::string out = "[\n";
  for (size_t i = 0; i < results.size(); ++i) {
    out += ToJson(results[i], /*pretty=*/false);
    out += i + 1 < results.size() ? ",\n" : "\n";
  }
  return out + "]\n";
}

std::string FormatResults(const std::vector<v1::Result>& results, ResultFormat format) {
  switch (format) {
    case ResultFormat::kJson:
      return FormatResultsJson(results);
    case ResultFormat::kCsv:
      return FormatResultsCsv(results);
    case ResultFormat::kTable:
      break;
  }
  return FormatResultsTable(results);
}

// ---------------------------------------------------------------- fields

std::string FormatTokenizeJson(const v1::TokenizeResponse& r) {
  json::Value v = json::Value::MakeObject();
  v.Set("model", json::Value::String(r.model()));
  v.Set("tokenizer", json::Value::String(r.tokenizer()));
  v.Set("vocab_size", json::Value::Int(r.vocab_size()));
  json::Value ids = json::Value::MakeArray();
  for (int32_t id : r.ids()) ids.mutable_array().push_back(json::Value::Int(id));
  v.Set("ids", std::move(ids));
  return json::Write(v) + "\n";
}

std::string FormatServerInfo(const v1::GetServerInfoResponse& info, const std::string& queue_lines,
                             size_t width) {
  std::string out;
  absl::StrAppendFormat(&out, "server:           fca-server %s (engine %s, torch %s)\n",
                        SanitizeForTerminal(info.server_version()),
                        SanitizeForTerminal(info.engine_version()),
                        SanitizeForTerminal(info.torch_version()));
  absl::StrAppendFormat(&out, "workers:          %d (%s), dtype %s, executor %s\n", info.workers(),
                        SanitizeForTerminal(absl::StrJoin(info.devices(), ", ")),
                        SanitizeForTerminal(info.dtype()), SanitizeForTerminal(info.executor()));
  absl::StrAppendFormat(&out, "authentication:   %s\n", info.auth() ? "on" : "off");
  absl::StrAppendFormat(&out,
                        "limits:           dataset %s, %d windows of at most %d tokens, %d models "
                        "per job, %d queued jobs per user\n",
                        HumanBytes(info.max_dataset_bytes()), info.max_windows(),
                        info.max_window_length(), info.max_models(),
                        info.max_queued_jobs_per_user());
  out += queue_lines;
  TextTable interventions({{"INTERVENTION"}, {"WHAT IS SUBSTITUTED"}});
  for (const v1::InterventionInfo& i : info.interventions()) {
    interventions.AddRow({i.name(), i.description()});
  }
  TextTable metrics({{"METRIC"}, {"ROWS UNDER"}, {"UNIT"}, {"DESCRIPTION"}});
  for (const v1::MetricInfo& m : info.metrics()) {
    metrics.AddRow({m.name(), m.intervention().empty() ? "each intervention" : m.intervention(),
                    m.unit(), m.description()});
  }
  return FitToWidth(out + "\n" + interventions.Render() + "\n" + metrics.Render(), width);
}

namespace {

// "local/0: m1, m2; local/1: m1" from the models' loaded_on.
std::string LoadedModels(const v1::GetQueueResponse& queue) {
  std::vector<std::string> loaded;
  for (const v1::ModelQueue& m : queue.models()) {
    if (m.loaded_on().empty()) continue;
    loaded.push_back(absl::StrFormat("%s (on %s)", SanitizeForTerminal(m.model()),
                                     SanitizeForTerminal(absl::StrJoin(m.loaded_on(), ", "))));
  }
  return loaded.empty() ? "none" : absl::StrJoin(loaded, ", ");
}

}  // namespace

std::string FormatQueueSummary(const v1::GetQueueResponse& queue) {
  return absl::StrFormat(
      "queue:            %d jobs queued, %d running (tasks: %d queued, %d running)\n"
      "loaded models:    %s\n",
      queue.queued_jobs(), queue.running_jobs(), queue.queued_tasks(), queue.running_tasks(),
      LoadedModels(queue));
}

std::string FormatQueue(const v1::GetQueueResponse& queue) {
  using A = TextTable::Align;
  std::string out = FormatQueueSummary(queue);
  if (!queue.models().empty()) {
    TextTable models(
        {{"MODEL"}, {"QUEUED", A::kRight}, {"RUNNING", A::kRight}, {"LOADED ON"}, {"RUNNING ON"}});
    for (const v1::ModelQueue& m : queue.models()) {
      models.AddRow({m.model(), absl::StrCat(m.queued_tasks()), absl::StrCat(m.running_tasks()),
                     absl::StrJoin(m.loaded_on(), ","), absl::StrJoin(m.running_on(), ",")});
    }
    out += "\n" + models.Render();
  }
  if (!queue.projects().empty()) {
    TextTable projects({{"PROJECT"},
                        {"QUEUED JOBS", A::kRight},
                        {"RUNNING JOBS", A::kRight},
                        {"QUEUED TASKS", A::kRight},
                        {"RUNNING TASKS", A::kRight}});
    for (const v1::ProjectQueue& p : queue.projects()) {
      projects.AddRow({p.project().empty() ? "(other projects)" : p.project(),
                       absl::StrCat(p.queued_jobs()), absl::StrCat(p.running_jobs()),
                       absl::StrCat(p.queued_tasks()), absl::StrCat(p.running_tasks())});
    }
    out += "\n" + projects.Render();
  }
  if (!queue.jobs().empty()) {
    TextTable jobs({{"JOB", A::kRight},
                    {"PROJECT"},
                    {"OWNER"},
                    {"STATE"},
                    {"POSITION", A::kRight},
                    {"TASKS AHEAD", A::kRight},
                    {"QUEUED", A::kRight},
                    {"RUNNING", A::kRight}});
    for (const v1::QueuedJob& j : queue.jobs()) {
      jobs.AddRow({absl::StrCat(j.job_id()), j.project(), j.owner(), JobStateName(j.state()),
                   j.position() > 0 ? absl::StrCat(j.position()) : "-",
                   absl::StrCat(j.tasks_ahead()), absl::StrCat(j.queued_tasks()),
                   absl::StrCat(j.running_tasks())});
    }
    out += "\n" + jobs.Render();
  }
  return out;
}

std::string FormatWindowsTable(const v1::ListJobWindowsResponse& windows) {
  TextTable table({{"SET"}, {"INDEX", TextTable::Align::kRight}, {"WINDOW HASH"}});
  for (const v1::Window& w : windows.windows()) {
    table.AddRow({w.calibration() ? "calib" : "eval", absl::StrCat(w.index()), w.hash()});
  }
  return table.Render();
}

std::string FormatProtoJson(const google::protobuf::Message& message) {
  return ToJson(message, /*pretty=*/true) + "\n";
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(field);
  }
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string ShortestDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string HumanDouble(double value) { return absl::StrFormat("%.6g", value); }

std::string FormatCi(const v1::Result& result) {
  if (!result.has_ci_low() || !result.has_ci_high()) return "-";
  return absl::StrFormat("[%s, %s]", HumanDouble(result.ci_low()), HumanDouble(result.ci_high()));
}

std::string HumanCount(int64_t count) {
  static constexpr struct {
    double scale;
    const char* suffix;
  } kUnits[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& unit : kUnits) {
    if (std::llabs(count) >= unit.scale) {
      return absl::StrFormat("%.1f%s", count / unit.scale, unit.suffix);
    }
  }
  return absl::StrFormat("%d", count);
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::llabs(bytes) < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (std::fabs(value) >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatTimestamp(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(ts.seconds()),
                          absl::UTCTimeZone());
}

std::string JobStateName(v1::JobState state) {
  const auto* value = v1::JobState_descriptor()->FindValueByNumber(state);
  return value == nullptr ? absl::StrFormat("STATE_%d", state) : ShortEnumName(*value);
}

absl::StatusOr<v1::JobState> ParseJobState(std::string_view name) {
  // "succeeded" or JOB_STATE_SUCCEEDED, in any case.
  const auto* value = FindEnumValue(*v1::JobState_descriptor(), name);
  if (value != nullptr && value->number() != v1::JOB_STATE_UNSPECIFIED) {
    return static_cast<v1::JobState>(value->number());
  }
  return UsageError(
      absl::StrFormat("--state must be queued, running, succeeded, failed or cancelled, not "
                      "'%s'",
                      std::string(name)));
}

absl::StatusOr<v1::DatasetKind> ParseDatasetKind(std::string_view name) {
  if (name == "text") return v1::DATASET_KIND_TEXT;
  if (name == "tokens") return v1::DATASET_KIND_TOKENS_INT32;
  return UsageError(absl::StrFormat("--kind must be text or tokens, not '%s'", std::string(name)));
}

std::string DatasetKindName(v1::DatasetKind kind) {
  switch (kind) {
    case v1::DATASET_KIND_TEXT:
      return "text";
    case v1::DATASET_KIND_TOKENS_INT32:
      return "tokens";
    default:
      return "?";
  }
}

absl::StatusOr<google::protobuf::Timestamp> ParseRfc3339(std::string_view text) {
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &time, &error)) {
    return UsageError(absl::StrFormat("'%s' is not an RFC 3339 time like 2024-05-01T12:00:00Z (%s)",
                                      std::string(text), error));
  }
  const int64_t seconds = absl::ToUnixSeconds(time);
  google::protobuf::Timestamp ts;
  ts.set_seconds(seconds);
  ts.set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(time - absl::FromUnixSeconds(seconds))));
  return ts;
}

}  // namespace fca::client
