// Dispatch, connection flags and the listing/transfer subcommands.
#include "client/commands.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli_flags.h"
#include "client/coefficients_file.h"
#include "client/commands_audit.h"
#include "client/commands_keys.h"
#include "client/commands_projects.h"
#include "client/commands_webhooks.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/manifest.h"
#include "client/report_format.h"
#include "client/report_html.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/spec_fields.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"

// Connection (every command).
ABSL_FLAG(std::string, server, "", "host:port of fca-server [env FCA_SERVER, else 127.0.0.1:7400]");
ABSL_FLAG(std::string, token, "",
          "API key, sent as 'authorization: Bearer <token>' [env FCA_TOKEN]");
ABSL_FLAG(bool, tls, false, "connect with TLS (system root certificates)");
ABSL_FLAG(std::string, ca_cert, "", "PEM file of root certificates for TLS; implies --tls");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "deadline of each unary call, e.g. 30s, 2m");

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
ABSL_FLAG(int64_t, job, 0, "results: job id");
ABSL_FLAG(std::string, model, "",
          "results, export, windows: model name; jobs list: audited or dense twin");
ABSL_FLAG(std::string, dataset, "",
          "results: evaluation dataset sha256; jobs list: eval or calib dataset as submitted");
ABSL_FLAG(std::string, intervention, "", "results: intervention name");
ABSL_FLAG(std::string, metric, "", "results: metric name");
ABSL_FLAG(std::string, since, "", "results, jobs list, admin log: at or after (RFC 3339)");
ABSL_FLAG(std::string, until, "", "results, jobs list, admin log: before (RFC 3339)");
ABSL_FLAG(
    std::string, format, "table",
    "results: table, json or csv; compare, queue: table or json; export: npy, safetensors or raw "
    "[from --out's extension]");

// export
ABSL_FLAG(std::string, save_json, "", "report: also write the report as JSON to this file");
ABSL_FLAG(std::string, save_html, "", "report: also write it as a self-contained HTML page");
ABSL_FLAG(bool, wide, false,
          "report, compare: tables at their full width (default: in parts within 100 columns)");
ABSL_FLAG(bool, json, false, "tokenize, info, windows, webhooks: print JSON");
ABSL_FLAG(std::string, window_hash, "", "export: hex SHA-256 of the window");
ABSL_FLAG(std::string, dtype, "", "export: cache entry dtype [float32]");
ABSL_FLAG(std::string, out, "", "export: output file; jobs manifest: output file [stdout]");

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

constexpr char kDefaultServer[] = "127.0.0.1:7400";

// Flags naming local files: any bytes are a valid path, and none of them
// is sent to the server.
const std::set<std::string>& LocalPathFlags() {
  static const auto* names = new std::set<std::string>{"out",      "save_json",     "save_html",
                                                       "manifest", "save_manifest", "ca_cert"};
  return *names;
}

// An API key travels as an HTTP/2 header value: printable ASCII only.
[[nodiscard]] absl::Status CheckToken(const std::string& token) {
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return UsageError("--token (or $FCA_TOKEN) must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

const std::vector<std::string>& GlobalFlagNames() {
  static const auto* names =
      new std::vector<std::string>{"server", "token", "tls", "ca_cert", "timeout"};
  return *names;
}

std::string FlagOrEnv(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// A file the user named on the command line: unreadable is a usage error.
absl::StatusOr<std::string> ReadLocalFile(const std::string& path, const std::string& what) {
  absl::StatusOr<std::string> text = ReadFile(path, what);
  if (!text.ok()) return UsageError(std::string(text.status().message()));
  return text;
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags() {
  ClientOptions options;
  options.address = FlagOrEnv(absl::GetFlag(FLAGS_server), "FCA_SERVER", kDefaultServer);
  options.token = FlagOrEnv(absl::GetFlag(FLAGS_token), "FCA_TOKEN", "");
  FCA_RETURN_IF_ERROR(CheckToken(options.token));
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.use_tls = absl::GetFlag(FLAGS_tls);
  const std::string ca_cert = absl::GetFlag(FLAGS_ca_cert);
  if (!ca_cert.empty()) {
    FCA_ASSIGN_OR_RETURN(options.ca_cert_pem, ReadLocalFile(ca_cert, "CA certificate"));
    options.use_tls = true;
  }
  return options;
}

absl::Status ExpectArgs(const CommandContext& ctx, size_t count, const std::string& usage) {
  if (ctx.args().size() == count) return absl::OkStatus();
  return UsageError(absl::StrFormat("expected: fca %s", usage));
}

absl::Status RequireFlag(const std::string& value, const std::string& flag) {
  if (!value.empty()) return absl::OkStatus();
  return UsageError(absl::StrFormat("--%s is required", flag));
}

// ---------------------------------------------------------------- commands

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
  ctx.out() << FormatJobDetails(job);
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
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(std::vector<v1::Result> results, FetchResults(*client, request));
  ctx.out() << FormatResults(results, format);
  return kExitOk;
}

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
  ctx.out() << FormatServerInfo(info, queue.ok() ? FormatQueueSummary(*queue) : "");
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

// Receives the export whole (the header says how many bytes; a broken
// transfer writes nothing), then writes it in `format` through a temporary
// file and a rename, so no file that looks whole is half written.
absl::Status ExportToFile(AuditClient& client, const v1::ExportCoefficientsRequest& request,
                          const std::string& path, CoefficientsFormat format, std::ostream& out) {
  v1::CoefficientsHeader header;
  std::string raw;
  absl::Status status = client.ExportCoefficients(
      request,
      [&](const v1::CoefficientsHeader& h) {
        header = h;
        out << FormatCoefficientsHeader(h);
        return absl::OkStatus();
      },
      [&](const std::string& chunk) {
        raw += chunk;
        return absl::OkStatus();
      });
  FCA_RETURN_IF_ERROR(status);
  const int64_t expected = header.total_bytes();
  if (static_cast<int64_t>(raw.size()) != expected) {
    return absl::DataLossError(
        absl::StrFormat("export ended after %d of %d bytes", raw.size(), expected));
  }
  absl::StatusOr<std::string> file = EncodeCoefficients(header, raw, format);
  if (!file.ok()) return absl::DataLossError(file.status().message());
  FCA_RETURN_IF_ERROR(WriteFileAtomically(path, *file));
  out << absl::StrFormat("wrote %d bytes to %s\n", file->size(), path);
  return absl::OkStatus();
}

CommandResult RunExport(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(
      ctx, 0, "export --model=M --window_hash=H --out=FILE [--format=npy|safetensors|raw]"));
  v1::ExportCoefficientsRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_window_hash(NormalizeSha256Hex(absl::GetFlag(FLAGS_window_hash)));
  request.set_dtype(absl::GetFlag(FLAGS_dtype));
  request.set_project(absl::GetFlag(FLAGS_project));
  const std::string path = absl::GetFlag(FLAGS_out);
  FCA_RETURN_IF_ERROR(RequireFlag(request.model(), "model"));
  FCA_RETURN_IF_ERROR(RequireFlag(request.window_hash(), "window_hash"));
  FCA_RETURN_IF_ERROR(RequireFlag(path, "out"));
  FCA_ASSIGN_OR_RETURN(
      const CoefficientsFormat format,
      ChooseCoefficientsFormat(ctx.Specified("format") ? absl::GetFlag(FLAGS_format) : "", path));
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

CommandResult RunHelp(CommandContext& ctx) {
  ctx.out() << CommandHelpText(ctx.args());
  return kExitOk;
}

// ---------------------------------------------------------------- dispatch

struct Command {
  std::vector<std::string> words;  // "jobs", "list"
  std::string synopsis;            // shown by help
  std::string summary;
  std::vector<std::string> flags;  // accepted beyond the global ones
  CommandResult (*run)(CommandContext&);
};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {{"models"}, "models", "list the models the server can audit", {}, RunModels},
      {{"datasets", "upload"},
       "datasets upload --name=N [--kind=text|tokens] [--project=P] FILE",
       "upload a dataset (1 MiB chunks, SHA-256 checked)",
       {"name", "kind", "project"},
       RunDatasetsUpload},
      {{"datasets", "list"},
       "datasets list [--project=P]",
       "list a project's datasets",
       {"project"},
       RunDatasetsList},
      {{"datasets", "delete"},
       "datasets delete NAME [--project=P]",
       "delete a dataset you uploaded (owners: any; not while a queued or running job uses it)",
       {"project"},
       RunDatasetsDelete},
      {{"audit"},
       "audit --models=a,b --eval=D --calib=D [options] | --manifest=FILE",
       "submit an audit job, then watch it (see AUDIT OPTIONS)",
       AuditFlagNames(),
       RunAudit},
      {{"watch"},
       "watch JOB_ID [--after_seq=N]",
       "stream a job's progress and results until it ends",
       {"after_seq"},
       RunWatch},
      {{"jobs", "list"},
       "jobs list [--project=P --state=S --model=M --dataset=D --label=L --owner=U\n"
       "          --since=T --until=T] [--page_size=N]",
       "list a project's jobs, newest first",
       {"state", "page_size", "model", "dataset", "label", "owner", "since", "until", "project"},
       RunJobsList},
      {{"jobs", "show"},
       "jobs show ID",
       "show one job: its spec, tasks and provenance",
       {},
       RunJobsShow},
      {{"jobs", "manifest"},
       "jobs manifest ID [--out=FILE]",
       "the job's spec as a manifest, datasets pinned by sha256 (rerun: audit --manifest)",
       {"out"},
       RunJobsManifest},
      {{"jobs", "cancel"}, "jobs cancel ID", "cancel a queued or running job", {}, RunJobsCancel},
      {{"jobs", "delete"},
       "jobs delete ID",
       "delete a finished job with its events and results",
       {},
       RunJobsDelete},
      {{"results"},
       "results [--job=ID --model=M --dataset=SHA --intervention=I "
       "--metric=X\n          --since=T --until=T] [--format=table|json|csv]",
       "query stored results (all pages)",
       {"job", "model", "dataset", "intervention", "metric", "since", "until", "format",
        "page_size"},
       RunResults},
      {{"report"},
       "report JOB_ID [--wide] [--save_json=FILE] [--save_html=FILE]",
       "a job's report: variation, dependence, execution, per model and across models",
       {"wide", "save_json", "save_html"},
       RunReport},
      {{"compare"},
       "compare JOB_ID [JOB_ID...] [--wide] [--format=table|json]",
       "up to 16 jobs side by side: per model and across models",
       {"wide", "format"},
       RunCompare},
      {{"windows"},
       "windows JOB_ID [--model=M] [--json]",
       "a job's evaluation and calibration windows with the hashes export takes",
       {"model", "json"},
       RunWindows},
      {{"info"},
       "info [--json]",
       "the server: versions, devices, limits, interventions, metrics and units",
       {"json"},
       RunInfo},
      {{"queue"},
       "queue [--format=table|json]",
       "the queue: models (where loaded, their tasks), your projects' jobs, your jobs' places",
       {"format"},
       RunQueue},
      {{"tokenize"},
       "tokenize --model=M [--json] < TEXT",
       "the ids the server feeds model M for the text on stdin",
       {"model", "json"},
       RunTokenize},
      {{"export"},
       "export --model=M --window_hash=H [--dtype=D] [--project=P] --out=FILE "
       "[--format=npy|safetensors|raw]",
       "download a cached coefficient tensor of a project's audits: .npy [T, channels of every "
       "site], .safetensors (a tensor per site) or raw, by --format or the file's extension",
       {"model", "window_hash", "dtype", "out", "format", "project"},
       RunExport},
      {{"admin", "backup"},
       "admin backup NAME",
       "admins: a checked copy of the live database, NAME in the server's --backup_dir",
       {},
       RunAdminBackup},
      {{"admin", "log"},
       "admin log [--since=T --until=T --user=U --action=A] [--page_size=N]",
       "admins: the audit log, newest first (who did what, from where, with what outcome)",
       {"since", "until", "user", "action", "page_size"},
       RunAdminLog},
      {{"keys", "list"},
       "keys list [--user=U]",
       "API keys (id, prefix, user, role, times, last address; never the key): yours, or "
       "admins: all",
       {"user"},
       RunKeysList},
      {{"keys", "create"},
       "keys create [--user=U --role=user|admin|worker --expires_days=N]",
       "a new API key, printed once (admins: for any user, any role)",
       {"user", "role", "expires_days"},
       RunKeysCreate},
      {{"keys", "revoke"},
       "keys revoke ID",
       "revoke a key: refused from its next call on",
       {},
       RunKeysRevoke},
      {{"keys", "rotate"},
       "keys rotate ID [--grace=DURATION]",
       "a new key replacing ID, printed once; ID stays valid for --grace (e.g. 24h)",
       {"grace"},
       RunKeysRotate},
      {{"webhooks", "add"},
       "webhooks add URL [--project=P]",
       "POST each ended job of the project to URL, signed; prints the secret once",
       {"project", "json"},
       RunWebhooksAdd},
      {{"webhooks", "list"},
       "webhooks list [--project=P]",
       "the project's webhooks",
       {"project", "json"},
       RunWebhooksList},
      {{"webhooks", "remove"}, "webhooks remove ID", "remove a webhook", {}, RunWebhooksRemove},
      {{"webhooks", "deliveries"},
       "webhooks deliveries ID [--limit=N]",
       "a webhook's deliveries, newest first, with each attempt's status or error",
       {"limit", "json"},
       RunWebhooksDeliveries},
      {{"projects", "create"},
       "projects create NAME [--owner=U]",
       "admins: a shared project, owned by --owner [you]",
       {"owner"},
       RunProjectsCreate},
      {{"projects", "list"},
       "projects list",
       "the projects you are a member of, with your role",
       {},
       RunProjectsList},
      {{"projects", "show"},
       "projects show NAME",
       "a project's members and their roles",
       {},
       RunProjectsShow},
      {{"projects", "add-member"},
       "projects add-member NAME USER --role=reader|writer|owner",
       "owners: add a member or change a member's role",
       {"role"},
       RunProjectsAddMember},
      {{"projects", "remove-member"},
       "projects remove-member NAME USER",
       "owners: remove a member (their open watches end)",
       {},
       RunProjectsRemoveMember},
      {{"projects", "delete"},
       "projects delete NAME",
       "owners: delete a shared project with its jobs, results and datasets",
       {},
       RunProjectsDelete},
      {{"projects", "retention"},
       "projects retention NAME [--keep_jobs_days=N|default] "
       "[--keep_unused_datasets_days=N|default]",
       "how long a project keeps finished jobs and unused datasets; owners: set it",
       {"keep_jobs_days", "keep_unused_datasets_days"},
       RunProjectsRetention},
      {{"help"}, "help", "this text", {}, RunHelp},
  };
  return *commands;
}

// The command whose words prefix `words`, longest first.
const Command* FindCommand(const std::vector<std::string>& words) {
  const Command* best = nullptr;
  for (const Command& c : Commands()) {
    if (c.words.size() > words.size()) continue;
    if (!std::equal(c.words.begin(), c.words.end(), words.begin())) continue;
    if (best == nullptr || c.words.size() > best->words.size()) best = &c;
  }
  return best;
}

// A flag that belongs to another command is almost always a mistake (a
// typo'd command, or a filter the user believes is applied): refuse it.
absl::Status CheckFlagsApply(const Command& command, const std::set<std::string>& specified) {
  for (const std::string& flag : specified) {
    const auto& global = GlobalFlagNames();
    if (std::find(global.begin(), global.end(), flag) != global.end()) continue;
    if (std::find(command.flags.begin(), command.flags.end(), flag) != command.flags.end()) {
      continue;
    }
    return UsageError(absl::StrFormat("--%s does not apply to 'fca %s'", flag,
                                      absl::StrJoin(command.words, " ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<const Command*> Resolve(const std::vector<std::string>& words,
                                       const std::set<std::string>& specified) {
  if (words.empty()) return UsageError("no command given");
  const Command* command = FindCommand(words);
  if (command == nullptr) {
    return UsageError(absl::StrFormat(
        "unknown command '%s'",
        absl::StrJoin(words.begin(), words.begin() + std::min<size_t>(2, words.size()), " ")));
  }
  FCA_RETURN_IF_ERROR(CheckFlagsApply(*command, specified));
  FCA_RETURN_IF_ERROR(CheckFlagValuesAreUtf8(specified, LocalPathFlags()));
  return command;
}

// "  (interventions: correct, ..., neutral)\n" from the vocabulary,
// wrapped at 80 columns with the continuation lines indented.
std::string InterventionsHelp() {
  const std::vector<std::string>& names = InterventionNames();
  std::string out, line = "  (interventions: ";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string word = names[i] + (i + 1 < names.size() ? "," : ")");
    if (line.size() + word.size() > 80) {
      line.pop_back();  // the space after the last word
      out += line + "\n";
      line = "   ";
    }
    line += word + " ";
  }
  line.pop_back();
  return out + line + "\n";
}

}  // namespace

absl::StatusOr<AuditClient*> CommandContext::Client() {
  if (client_ != nullptr) return client_.get();
  FCA_ASSIGN_OR_RETURN(client_options_, ClientOptionsFromFlags());
  FCA_ASSIGN_OR_RETURN(client_, AuditClient::Open(client_options_));
  return client_.get();
}

absl::StatusOr<AuditClient*> CommandContext::ReopenClient() {
  if (client_ == nullptr) return Client();
  FCA_ASSIGN_OR_RETURN(client_, AuditClient::Open(client_options_));
  return client_.get();
}

namespace {

// A call refused because the CLI sent no key: the server says what was
// missing; the CLI says where it takes a key from.
absl::Status WithTokenHint(const absl::Status& status) {
  if (!absl::IsUnauthenticated(status) ||
      !FlagOrEnv(absl::GetFlag(FLAGS_token), "FCA_TOKEN", "").empty()) {
    return status;
  }
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), ": set FCA_TOKEN or pass --token"));
}

}  // namespace

absl::StatusOr<int64_t> ParseJobId(const std::string& text) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id <= 0) {
    return UsageError(absl::StrFormat("'%s' is not a job id", text));
  }
  return id;
}

int RunCommand(const std::vector<std::string>& words, const std::set<std::string>& specified,
               std::ostream& out, std::ostream& err) {
  auto command = Resolve(words, specified);
  if (!command.ok()) {
    err << FormatError(command.status()) << "\n";
    return ExitCodeForStatus(command.status());
  }
  std::vector<std::string> args(words.begin() + (*command)->words.size(), words.end());
  CommandContext ctx(std::move(args), specified, out, err);
  CommandResult result = (*command)->run(ctx);
  out.flush();
  if (!result.ok()) {
    const absl::Status status = WithTokenHint(result.status());
    err << FormatError(status) << "\n";
    return ExitCodeForStatus(status);
  }
  return *result;
}

namespace {

// One flag of a command's help: a spec field's help, range and default from
// common/spec_fields; any other flag's registered help and default.
std::string FlagHelpLine(const std::string& name) {
  std::string help;
  for (const spec_fields::SpecField* field : spec_fields::SpecFields()) {
    if (name == field->flag) help = spec_fields::FieldHelp(*field);
  }
  if (help.empty()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) return "";
    help = flag->Help();
    const std::string default_value = flag->DefaultValue();
    if (!default_value.empty() && !flag->IsOfType<bool>()) {
      absl::StrAppend(&help, "; default ", default_value);
    }
  }
  return absl::StrFormat("  --%s\n      %s\n", name, help);
}

}  // namespace

std::string CommandHelpText(const std::vector<std::string>& words) {
  const Command* command = FindCommand(words);
  if (command == nullptr || command->words == std::vector<std::string>{"help"}) {
    return HelpText();
  }
  std::string text = absl::StrFormat("usage: fca %s\n  %s\n", command->synopsis, command->summary);
  if (!command->flags.empty()) text += "\nFLAGS\n";
  for (const std::string& flag : command->flags) text += FlagHelpLine(flag);
  text += "\nGlobal flags (--server, --token, --tls, --ca_cert, --timeout): see 'fca help'.\n";
  return text;
}

std::string HelpText() {
  std::string text =
      "fca: client of the fca audit server (Frozen-Controller Auditing)\n\n"
      "usage: fca [global flags] COMMAND [flags] [args]\n\nCOMMANDS\n";
  for (const Command& c : Commands()) {
    absl::StrAppendFormat(&text, "  fca %s\n      %s\n", c.synopsis, c.summary);
  }
  text +=
      "\nGLOBAL FLAGS\n"
      "  --server=HOST:PORT  server address [env FCA_SERVER, else 127.0.0.1:7400]\n"
      "  --token=KEY         API key, sent as 'authorization: Bearer KEY' [env FCA_TOKEN]\n"
      "  --tls               use TLS; --ca_cert=FILE for a custom root (implies --tls)\n"
      "  --timeout=30s       deadline of each unary call (streams have none)\n"
      "\nAUDIT OPTIONS (each sets one AuditSpec field; see docs/fca.md)\n"
      "  --models=a,b --dense_twin=M --eval=D --calib=D --interventions=x,y\n"
      "  --window=T --max_eval_windows=N --max_calib_windows=N --batch=B\n"
      "  --seed=S --per_site_shuffle --bootstrap=R --ci_level=" +
      spec_fields::DefaultText(spec_fields::kCiLevel) +
      "\n"
      "  --allow_overlap --timing_repeats=K --timing_max_repeats=K\n"
      "  --timing_budget_seconds=S --label=TEXT\n"
      "  --per_layer=static_layer,cross_input  replay each intervention at one group of\n"
      "      sites at a time, correct elsewhere (one replay per group)\n"
      "  --per_layer_scope=" +
      ScopeNameList("|") + "    the groups [" +
      spec_fields::DefaultText(spec_fields::kPerLayerScope) +
      "]\n"
      "  --fidelity_check_every=K  compare REPLAY with LIVE on the first and every\n"
      "      K-th evaluation batch; 1 checks every batch [" +
      spec_fields::DefaultText(spec_fields::kFidelityCheckEvery) + "]\n" +
      "  --retention_baseline=global_mean|neutral  the baseline of retention_pct [" +
      spec_fields::DefaultText(spec_fields::kRetentionBaseline) +
      "]\n"
      "  --bootstrap_block_length=L  moving-block bootstrap blocks of L windows [" +
      spec_fields::DefaultText(spec_fields::kBootstrapBlockLength) +
      "]\n"
      "  --static_token_min_count=M  static_token(_position) cells seen fewer than M\n"
      "      times in calibration are shrunk towards the site (position) mean [" +
      spec_fields::DefaultText(spec_fields::kStaticTokenMinCount) +
      "]\n"
      "  --calib_resamples=R   re-estimate the static profiles on R resamples of the\n"
      "      calibration windows, one replay each (penalty_calib rows); 0 = off [" +
      spec_fields::DefaultText(spec_fields::kCalibResamples) + "]\n" + InterventionsHelp() +
      "  --manifest=FILE       start from a JSON AuditSpec; explicit flags override it\n"
      "  --save_manifest=FILE  write the exact spec submitted (rerun with --manifest)\n"
      "  --detach              print the job id and exit (same as --nowatch)\n"
      "\nWATCHING\n"
      "  Progress goes to stderr: a bar on a terminal, plain lines otherwise.\n"
      "  Result rows and the final state go to stdout. A dropped connection is\n"
      "  resumed from the last event seen (for up to 30s without progress).\n"
      "  Ctrl-C stops watching; the job keeps running (fca watch ID resumes).\n"
      "\nOUTPUT\n"
      "  results --format=json prints a JSON array, one proto3-JSON Result per\n"
      "  line; --format=csv has a header row and RFC 4180 quoting.\n"
      "  Errors print 'CODE: message' on stderr.\n"
      "\nEXIT CODES\n";
  text += ExitCodeHelp();
  return text;
}

}  // namespace fca::client
