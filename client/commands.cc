// Dispatch, help, the connection flags and the helpers every subcommand uses;
// the subcommands are in commands_*.cc.
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
#include "client/commands_data.h"
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
ABSL_FLAG(bool, dry_parse, false,
          "check the command line (the command, its flags and their values) and exit 0 "
          "without running it or contacting the server");

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
      new std::vector<std::string>{"server", "token", "tls", "ca_cert", "timeout", "dry_parse"};
  return *names;
}

std::string FlagOrEnv(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? value : fallback;
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
       "jobs show ID [--wide]",
       "show one job: its spec, tasks and provenance",
       {"wide"},
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
      {{"pool"},
       "pool JOB_ID JOB_ID... [--wide] [--save_json=FILE]",
       "2 to 64 finished jobs as one report: every job's models, across models over all of them",
       {"wide", "save_json"},
       RunPool},
      {{"windows"},
       "windows JOB_ID [--model=M] [--json]",
       "a job's evaluation and calibration windows with the hashes export takes",
       {"model", "json"},
       RunWindows},
      {{"info"},
       "info [--json] [--wide]",
       "the server: versions, devices, limits, interventions, metrics and units",
       {"json", "wide"},
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
       "export (--model=M --window_hash=H | --job=J [--model=M] [--calibration]) [--dtype=D] "
       "[--project=P] --out=FILE [--format=npy|safetensors|raw]",
       "download a cached coefficient tensor of a project's audits: .npy [T, channels of every "
       "site], .safetensors (a tensor per site) or raw, by --format or the file's extension; "
       "--job: every evaluation (--calibration: calibration) window of the job as one "
       "[N, T, C] .npy or .safetensors",
       {"model", "window_hash", "dtype", "out", "format", "project", "job", "calibration"},
       RunExport},
      {{"admin", "backup"},
       "admin backup NAME",
       "admins: a checked copy of the live database, NAME in the server's --backup_dir",
       {},
       RunAdminBackup},
      {{"admin", "log"},
       "admin log [--since=T --until=T --user=U --action=A] [--page_size=N] [--wide]",
       "admins: the audit log, newest first (who did what, from where, with what outcome)",
       {"since", "until", "user", "action", "page_size", "wide"},
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

// --------------------------------------------------------- shared helpers

absl::StatusOr<std::string> ReadLocalFile(const std::string& path, const std::string& what) {
  absl::StatusOr<std::string> text = ReadFile(path, what);
  if (!text.ok()) return UsageError(std::string(text.status().message()));
  return text;
}

absl::Status ExpectArgs(const CommandContext& ctx, size_t count, const std::string& usage) {
  if (ctx.args().size() == count) return absl::OkStatus();
  return UsageError(absl::StrFormat("expected: fca %s", usage));
}

absl::Status RequireFlag(const std::string& value, const std::string& flag) {
  if (!value.empty()) return absl::OkStatus();
  return UsageError(absl::StrFormat("--%s is required", flag));
}

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
  // The docs' command lines are checked this way (tests/docs/check_cli_lines.py).
  if (absl::GetFlag(FLAGS_dry_parse)) return kExitOk;
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
  text += "\nGlobal flags (--" + absl::StrJoin(GlobalFlagNames(), ", --") + "): see 'fca help'.\n";
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
      "  --dry_parse         check the command and its flags, run nothing, exit 0 (or 2)\n"
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
      "  --bootstrap_block_length=L  circular block bootstrap blocks of L windows [" +
      spec_fields::DefaultText(spec_fields::kBootstrapBlockLength) +
      "]\n"
      "  --static_token_min_count=M  static_token(_position) cells seen fewer than M\n"
      "      times in calibration are shrunk towards the site mean (a pair: its id's) [" +
      spec_fields::DefaultText(spec_fields::kStaticTokenMinCount) +
      "]\n"
      "  --calib_resamples=R   re-estimate the static profiles on R resamples of the\n"
      "      calibration windows, one replay each (penalty_calib rows); 0 = off [" +
      spec_fields::DefaultText(spec_fields::kCalibResamples) + "]\n" +
      "  --dense_twin_mismatch=TEXT  why the dense twin may differ from the models\n"
      "      (printed in the report); without it a mismatched twin is refused\n" +
      InterventionsHelp() +
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
