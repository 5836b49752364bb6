// `fca models`, `datasets`, `jobs`, `results`, `tokenize`, `report`,
// `compare`, `info`, `queue`, `windows`, `export` and `admin backup`: the
// listing and transfer subcommands, and their flags.
#include "client/commands_data.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli_flags.h"
#include "client/coefficients_file.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/manifest.h"
#include "client/report_format.h"
#include "client/report_html.h"
#include "client/text_safety.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "proto/fca/v1/result_keys.h"

// datasets upload
ABSL_FLAG(std::string, name, "", "datasets upload: dataset name");
ABSL_FLAG(std::string, kind, "text", "datasets upload: text or tokens (int32 LE)");

// jobs list, results
ABSL_FLAG(std::string, state, "", "jobs list: queued|running|succeeded|failed|cancelled");
ABSL_FLAG(int32_t, page_size, 0, "jobs list, results, admin log: rows per page [server default]");
ABSL_FLAG(std::string, owner, "",
          "jobs list: whose jobs (without --project: admins only); projects create: its first "
          "owner [you]");
ABSL_FLAG(std::string, project, "",
          "datasets, audit, jobs list, export, webhooks: the project [your personal project; "
          "jobs list and datasets list of an admin: every project]");
// jobs list also takes --label (the audit flag): the label, exactly.
ABSL_DECLARE_FLAG(std::string, label);

// results (and --model for export)
ABSL_FLAG(int64_t, job, 0, "results: job id; export: every window of the job, stacked [N, T, C]");
ABSL_FLAG(std::string, model, "",
          "results, export, windows: model name; jobs list: audited or dense twin");
ABSL_FLAG(std::string, dataset, "",
          "results: evaluation dataset sha256; jobs list: eval or calib dataset as submitted");
ABSL_FLAG(std::string, intervention, "", "results: intervention name");
ABSL_FLAG(std::string, metric, "",
          "results: a stored metric name, or a keyed metric's name alone for all its rows");
ABSL_FLAG(std::string, since, "", "results, jobs list, admin log: at or after (RFC 3339)");
ABSL_FLAG(std::string, until, "", "results, jobs list, admin log: before (RFC 3339)");
ABSL_FLAG(
    std::string, format, "table",
    "results: table, json or csv; compare, queue: table or json; export: npy, safetensors or raw "
    "[from --out's extension]");

// export
ABSL_FLAG(std::string, save_json, "", "report, pool: also write the report as JSON to this file");
ABSL_FLAG(std::string, save_html, "", "report: also write it as a self-contained HTML page");
ABSL_FLAG(bool, wide, false,
          "report, compare, jobs show, info, admin log: at full width (default: within 100 "
          "columns, tables in parts and long lines broken)");
ABSL_FLAG(bool, json, false, "tokenize, info, windows, webhooks: print JSON");
ABSL_FLAG(std::string, window_hash, "", "export: hex SHA-256 of the window");
ABSL_FLAG(std::string, dtype, "", "export: cache entry dtype [float32]");
ABSL_FLAG(std::string, out, "", "export: output file; jobs manifest: output file [stdout]");
ABSL_FLAG(bool, calibration, false, "export --job: the calibration windows [the evaluation ones]");

namespace fca::client {

namespace v1 = ::fca::v1;

CommandResult RunModels(CommandContext& ctx) {
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::ListModelsResponse listed, client->ListModels());
  ctx.out() << FormatModelsTable({listed.models().begin(), listed.models().end()})
            << FormatUnavailableModels({listed.unavailable().begin(), listed.unavailable().end()});
  return kExitOk;
}

CommandResult RunDatasetsUpload(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "datasets upload --name=N FILE"));
  const std::string name = absl::GetFlag(FLAGS_name);
  FCA_RETURN_IF_ERROR(RequireFlag(name, "name"));
  FCA_ASSIGN_OR_RETURN(v1::DatasetKind kind, ParseDatasetKind(absl::GetFlag(FLAGS_kind)));
  const std::string& path = ctx.args()[0];
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) return UsageError(absl::StrFormat("cannot read %s", path));
  if (kind == v1::DATASET_KIND_TOKENS_INT32 && size % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d bytes, not a whole number of int32 tokens", path, size));
  }
  auto sha = Sha256FileHex(path);
  if (!sha.ok()) return UsageError(absl::StrFormat("cannot read %s", path));
  v1::UploadDatasetHeader header;
  header.set_name(name);
  header.set_kind(kind);
  header.set_size_bytes(static_cast<int64_t>(size));
  header.set_sha256(*sha);
  header.set_project(absl::GetFlag(FLAGS_project));
  std::ifstream in(path, std::ios::binary);
  if (!in) return UsageError(absl::StrFormat("cannot read %s", path));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(auto response, client->UploadDataset(header, in));
  ctx.out() << FormatUploadSummary(response);
  return kExitOk;
}

CommandResult RunDatasetsList(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "datasets list"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(auto sets, client->ListDatasets(absl::GetFlag(FLAGS_project)));
  ctx.out() << FormatDatasetsTable(sets);
  return kExitOk;
}

// --since and --until, when given, into `after` and `before`.
absl::Status TimeFlags(const CommandContext& ctx, google::protobuf::Timestamp* after,
                       google::protobuf::Timestamp* before) {
  if (ctx.Specified("since")) {
    FCA_ASSIGN_OR_RETURN(*after, ParseRfc3339(absl::GetFlag(FLAGS_since)));
  }
  if (ctx.Specified("until")) {
    FCA_ASSIGN_OR_RETURN(*before, ParseRfc3339(absl::GetFlag(FLAGS_until)));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<v1::ListJobsRequest> JobsRequestFromFlags(const CommandContext& ctx) {
  v1::ListJobsRequest request;
  if (ctx.Specified("state")) {
    FCA_ASSIGN_OR_RETURN(v1::JobState state, ParseJobState(absl::GetFlag(FLAGS_state)));
    request.set_state(state);
  }
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_dataset(NormalizeDatasetRef(absl::GetFlag(FLAGS_dataset)));
  request.set_label(absl::GetFlag(FLAGS_label));
  request.set_owner(absl::GetFlag(FLAGS_owner));
  request.set_project(absl::GetFlag(FLAGS_project));
  google::protobuf::Timestamp after, before;
  FCA_RETURN_IF_ERROR(TimeFlags(ctx, &after, &before));
  if (ctx.Specified("since")) *request.mutable_created_after() = after;
  if (ctx.Specified("until")) *request.mutable_created_before() = before;
  return request;
}

}  // namespace

CommandResult RunJobsList(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "jobs list [filters]"));
  FCA_ASSIGN_OR_RETURN(v1::ListJobsRequest request, JobsRequestFromFlags(ctx));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  std::vector<v1::Job> jobs;
  FCA_RETURN_IF_ERROR(FollowPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    request.set_page_token(token);
    FCA_ASSIGN_OR_RETURN(auto page, client->ListJobs(request));
    jobs.insert(jobs.end(), page.jobs().begin(), page.jobs().end());
    return page.next_page_token();
  }));
  ctx.out() << FormatJobsTable(jobs);
  return kExitOk;
}

CommandResult RunJobsShow(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "jobs show ID"));
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(id));
  ctx.out() << FormatJobDetails(job, absl::GetFlag(FLAGS_wide) ? 0 : kReportWidth);
  return kExitOk;
}

// A stored job as a manifest `fca audit --manifest` reruns.
CommandResult RunJobsManifest(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "jobs manifest ID [--out=FILE]"));
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(id));
  FCA_ASSIGN_OR_RETURN(const v1::AuditSpec spec, RerunSpec(job));
  if (!ctx.Specified("out")) {
    ctx.out() << ManifestJson(spec);
    return kExitOk;
  }
  FCA_RETURN_IF_ERROR(SaveManifest(absl::GetFlag(FLAGS_out), spec));
  return kExitOk;
}

CommandResult RunJobsCancel(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "jobs cancel ID"));
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->CancelJob(id));
  if (job.state() == v1::JOB_STATE_CANCELLED) {
    ctx.out() << absl::StrFormat("job %d: CANCELLED\n", job.id());
  } else {
    ctx.out() << absl::StrFormat("job %d: %s, cancel requested (it stops within one batch)\n",
                                 job.id(), JobStateName(job.state()));
  }
  return kExitOk;
}

CommandResult RunJobsDelete(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "jobs delete ID"));
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_RETURN_IF_ERROR(client->DeleteJob(id));
  ctx.out() << absl::StrFormat("job %d: deleted with its events and results\n", id);
  return kExitOk;
}

CommandResult RunDatasetsDelete(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "datasets delete NAME"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(int64_t freed,
                       client->DeleteDataset(ctx.args()[0], absl::GetFlag(FLAGS_project)));
  ctx.out() << absl::StrFormat("dataset %s: deleted, %d bytes freed\n", ctx.args()[0], freed);
  return kExitOk;
}

namespace {

absl::StatusOr<v1::ResultFilter> ResultFilterFromFlags(const CommandContext& ctx) {
  v1::ResultFilter filter;
  filter.set_job_id(absl::GetFlag(FLAGS_job));
  filter.set_model(absl::GetFlag(FLAGS_model));
  filter.set_dataset_sha256(NormalizeSha256Hex(absl::GetFlag(FLAGS_dataset)));
  filter.set_intervention(absl::GetFlag(FLAGS_intervention));
  filter.set_metric(absl::GetFlag(FLAGS_metric));
  google::protobuf::Timestamp after, before;
  FCA_RETURN_IF_ERROR(TimeFlags(ctx, &after, &before));
  if (ctx.Specified("since")) *filter.mutable_created_after() = after;
  if (ctx.Specified("until")) *filter.mutable_created_before() = before;
  return filter;
}

}  // namespace

// Every page of a query.
absl::StatusOr<std::vector<v1::Result>> FetchResults(AuditClient& client,
                                                     v1::QueryResultsRequest request) {
  std::vector<v1::Result> results;
  FCA_RETURN_IF_ERROR(FollowPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    request.set_page_token(token);
    FCA_ASSIGN_OR_RETURN(auto page, client.QueryResults(request));
    results.insert(results.end(), page.results().begin(), page.results().end());
    return page.next_page_token();
  }));
  return results;
}

CommandResult RunResults(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "results [filters] [--format=F]"));
  FCA_ASSIGN_OR_RETURN(ResultFormat format, ParseResultFormat(absl::GetFlag(FLAGS_format)));
  v1::QueryResultsRequest request;
  FCA_ASSIGN_OR_RETURN(*request.mutable_filter(), ResultFilterFromFlags(ctx));
  // A keyed metric's name alone ("expert_coactivation"): every row of it,
  // whatever its key. The server matches stored names exactly, so its rows
  // are picked here by their typed key.
  const std::string metric = request.filter().metric();
  const MetricDef* keyed = FindMetricByName(metric);
  const bool by_name = keyed != nullptr && keyed->scope != MetricScope::kModel;
  if (by_name) request.mutable_filter()->clear_metric();
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(std::vector<v1::Result> results, FetchResults(*client, request));
  if (by_name) {
    results.erase(
        std::remove_if(results.begin(), results.end(),
                       [&](const v1::Result& r) { return v1::KeyOfRow(r).metric != metric; }),
        results.end());
  }
  ctx.out() << FormatResults(results, format);
  return kExitOk;
}

namespace {

// Writes `path`.part, then renames it, so a reader never sees half a file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string part = path + ".part";
  std::ofstream file(part, std::ios::binary | std::ios::trunc);
  file.write(content.data(), static_cast<std::streamsize>(content.size()));
  file.close();
  if (!file || std::rename(part.c_str(), path.c_str()) != 0) {
    std::remove(part.c_str());
    return UsageError(absl::StrFormat("cannot write %s", path));
  }
  return absl::OkStatus();
}

}  // namespace

CommandResult RunTokenize(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "tokenize --model=M [--json] < TEXT"));
  v1::TokenizeRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  FCA_RETURN_IF_ERROR(RequireFlag(request.model(), "model"));
  std::stringstream text;
  text << std::cin.rdbuf();
  request.set_text(text.str());
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::TokenizeResponse response, client->Tokenize(request));
  const std::vector<int32_t> ids(response.ids().begin(), response.ids().end());
  ctx.out() << (absl::GetFlag(FLAGS_json) ? FormatTokenizeJson(response)
                                          : absl::StrJoin(ids, " ") + "\n");
  if (!absl::GetFlag(FLAGS_json)) {
    ctx.err() << absl::StrFormat("%d tokens (%s tokenizer of %s, vocabulary %d)\n", ids.size(),
                                 SanitizeForTerminal(response.tokenizer()),
                                 SanitizeForTerminal(response.model()), response.vocab_size());
  }
  return kExitOk;
}

CommandResult RunReport(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(
      ExpectArgs(ctx, 1, "report JOB_ID [--wide] [--save_json=FILE] [--save_html=FILE]"));
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  // Computed by the server from the stored rows (GetReport).
  FCA_ASSIGN_OR_RETURN(v1::GetReportResponse response, client->GetReport(id));
  const ReportView report(std::move(response));
  ctx.out() << FormatReportText(report, absl::GetFlag(FLAGS_wide) ? 0 : kReportWidth);
  if (ctx.Specified("save_json")) {
    FCA_RETURN_IF_ERROR(
        WriteFileAtomically(absl::GetFlag(FLAGS_save_json), FormatReportJson(report)));
  }
  if (ctx.Specified("save_html")) {
    FCA_RETURN_IF_ERROR(
        WriteFileAtomically(absl::GetFlag(FLAGS_save_html), FormatReportHtml(report)));
  }
  return kExitOk;
}

CommandResult RunCompare(CommandContext& ctx) {
  if (ctx.args().empty()) return UsageError("expected: fca compare JOB_ID [JOB_ID...]");
  FCA_ASSIGN_OR_RETURN(ResultFormat format, ParseResultFormat(absl::GetFlag(FLAGS_format)));
  if (format == ResultFormat::kCsv) return UsageError("compare: --format is table or json");
  v1::CompareJobsRequest request;
  for (const std::string& arg : ctx.args()) {
    FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(arg));
    request.add_job_ids(id);
  }
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::CompareJobsResponse response, client->CompareJobs(request));
  ctx.out() << (format == ResultFormat::kJson
                    ? FormatComparisonJson(response)
                    : FormatComparisonText(response, absl::GetFlag(FLAGS_wide) ? 0 : kReportWidth));
  return kExitOk;
}

CommandResult RunPool(CommandContext& ctx) {
  if (ctx.args().size() < 2) {
    return UsageError("expected: fca pool JOB_ID JOB_ID... [--wide] [--save_json=FILE]");
  }
  v1::PoolJobsRequest request;
  for (const std::string& arg : ctx.args()) {
    FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(arg));
    request.add_job_ids(id);
  }
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  // Pooled by the server (PoolJobs), printed as `fca report` prints a job.
  FCA_ASSIGN_OR_RETURN(v1::PoolJobsResponse response, client->PoolJobs(request));
  ctx.out() << FormatPoolText(response, absl::GetFlag(FLAGS_wide) ? 0 : kReportWidth);
  if (ctx.Specified("save_json")) {
    FCA_RETURN_IF_ERROR(
        WriteFileAtomically(absl::GetFlag(FLAGS_save_json), FormatPoolJson(response)));
  }
  return kExitOk;
}

CommandResult RunInfo(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "info [--json]"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::GetServerInfoResponse info, client->GetServerInfo());
  if (absl::GetFlag(FLAGS_json)) {
    ctx.out() << FormatProtoJson(info);
    return kExitOk;
  }
  // The queue in two lines (`fca queue` shows it all) after the first
  // lines; a server older than GetQueue has none to show.
  const absl::StatusOr<v1::GetQueueResponse> queue = client->GetQueue();
  ctx.out() << FormatServerInfo(info, queue.ok() ? FormatQueueSummary(*queue) : "",
                                absl::GetFlag(FLAGS_wide) ? 0 : kReportWidth);
  return kExitOk;
}

CommandResult RunQueue(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "queue [--format=table|json]"));
  FCA_ASSIGN_OR_RETURN(ResultFormat format, ParseResultFormat(absl::GetFlag(FLAGS_format)));
  if (format == ResultFormat::kCsv) return UsageError("queue: --format is table or json");
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::GetQueueResponse queue, client->GetQueue());
  ctx.out() << (format == ResultFormat::kJson ? FormatProtoJson(queue) : FormatQueue(queue));
  return kExitOk;
}

CommandResult RunWindows(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "windows JOB_ID [--model=M] [--json]"));
  v1::ListJobWindowsRequest request;
  FCA_ASSIGN_OR_RETURN(int64_t id, ParseJobId(ctx.args()[0]));
  request.set_job_id(id);
  request.set_model(absl::GetFlag(FLAGS_model));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::ListJobWindowsResponse response, client->ListJobWindows(request));
  ctx.out() << (absl::GetFlag(FLAGS_json) ? FormatProtoJson(response)
                                          : FormatWindowsTable(response));
  return kExitOk;
}

namespace {

// Receives one window's export whole (the header says how many bytes).
absl::StatusOr<CoefficientsWindow> ReceiveWindow(AuditClient& client,
                                                 const v1::ExportCoefficientsRequest& request) {
  CoefficientsWindow w;
  FCA_RETURN_IF_ERROR(client.ExportCoefficients(
      request,
      [&](const v1::CoefficientsHeader& h) {
        w.header = h;
        return absl::OkStatus();
      },
      [&](const std::string& chunk) {
        w.raw += chunk;
        return absl::OkStatus();
      }));
  if (static_cast<int64_t>(w.raw.size()) != w.header.total_bytes()) {
    return absl::DataLossError(absl::StrFormat("export of window %s ended after %d of %d bytes",
                                               request.window_hash(), w.raw.size(),
                                               w.header.total_bytes()));
  }
  return w;
}

// Writes one window's export in `format` through a temporary file and a
// rename (a broken transfer writes nothing), so no file that looks whole is
// half written.
absl::Status ExportToFile(AuditClient& client, const v1::ExportCoefficientsRequest& request,
                          const std::string& path, CoefficientsFormat format, std::ostream& out) {
  FCA_ASSIGN_OR_RETURN(const CoefficientsWindow w, ReceiveWindow(client, request));
  out << FormatCoefficientsHeader(w.header);
  absl::StatusOr<std::string> file = EncodeCoefficients(w.header, w.raw, format);
  if (!file.ok()) return absl::DataLossError(file.status().message());
  FCA_RETURN_IF_ERROR(WriteFileAtomically(path, *file));
  out << absl::StrFormat("wrote %d bytes to %s\n", file->size(), path);
  return absl::OkStatus();
}

// `export --job=J`: the model's coefficients on every evaluation (or
// calibration) window of the job, in the job's window order, as one
// [N, T, C] file (client/coefficients_file.h).
CommandResult RunExportJob(CommandContext& ctx, v1::ExportCoefficientsRequest request,
                           const std::string& path, CoefficientsFormat format) {
  if (!request.window_hash().empty()) {
    return UsageError("export: --job exports every window of the job; drop --window_hash");
  }
  if (format == CoefficientsFormat::kRaw) {
    return UsageError("export --job: the stacked file is npy or safetensors, not raw");
  }
  v1::ListJobWindowsRequest list;
  list.set_job_id(absl::GetFlag(FLAGS_job));
  list.set_model(request.model());
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::ListJobWindowsResponse listed, client->ListJobWindows(list));
  request.set_model(listed.model());
  const bool calibration = absl::GetFlag(FLAGS_calibration);
  std::vector<CoefficientsWindow> windows;
  for (const v1::Window& w : listed.windows()) {
    if (w.calibration() != calibration) continue;
    request.set_window_hash(w.hash());
    FCA_ASSIGN_OR_RETURN(CoefficientsWindow got, ReceiveWindow(*client, request));
    windows.push_back(std::move(got));
  }
  if (windows.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("job %d has no %s windows of %s to export", list.job_id(),
                        calibration ? "calibration" : "evaluation", listed.model()));
  }
  FCA_ASSIGN_OR_RETURN(const std::string file, EncodeStackedCoefficients(windows, format));
  FCA_RETURN_IF_ERROR(WriteFileAtomically(path, file));
  const v1::CoefficientsHeader& h = windows.front().header;
  int64_t channels = 0;
  for (const v1::CoefficientSite& s : h.sites()) channels += s.channels();
  ctx.out() << absl::StrFormat("%s, job %d: %d %s windows x T=%d x C=%d (%d sites), %s\n",
                               h.model(), list.job_id(), windows.size(),
                               calibration ? "calibration" : "evaluation", h.window_length(),
                               channels, h.sites_size(), h.dtype());
  ctx.out() << absl::StrFormat("wrote %d bytes to %s\n", file.size(), path);
  return kExitOk;
}

}  // namespace

CommandResult RunExport(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0,
                                 "export (--model=M --window_hash=H | --job=J [--model=M] "
                                 "[--calibration]) --out=FILE [--format=npy|safetensors|raw]"));
  v1::ExportCoefficientsRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_window_hash(NormalizeSha256Hex(absl::GetFlag(FLAGS_window_hash)));
  request.set_dtype(absl::GetFlag(FLAGS_dtype));
  request.set_project(absl::GetFlag(FLAGS_project));
  const std::string path = absl::GetFlag(FLAGS_out);
  FCA_RETURN_IF_ERROR(RequireFlag(path, "out"));
  FCA_ASSIGN_OR_RETURN(
      const CoefficientsFormat format,
      ChooseCoefficientsFormat(ctx.Specified("format") ? absl::GetFlag(FLAGS_format) : "", path));
  if (ctx.Specified("job")) return RunExportJob(ctx, request, path, format);
  FCA_RETURN_IF_ERROR(RequireFlag(request.model(), "model"));
  FCA_RETURN_IF_ERROR(RequireFlag(request.window_hash(), "window_hash"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_RETURN_IF_ERROR(ExportToFile(*client, request, path, format, ctx.out()));
  return kExitOk;
}

CommandResult RunAdminBackup(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "admin backup NAME"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::BackupDatabaseResponse backup,
                       client->BackupDatabase(ctx.args()[0]));
  ctx.out() << absl::StrFormat(
      "backup %s: %d bytes (%d pages), copied in %.1f s, integrity_check ok in %.1f s\n",
      backup.path(), backup.bytes(), backup.pages(), backup.copy_seconds(), backup.check_seconds());
  return kExitOk;
}

}  // namespace fca::client
