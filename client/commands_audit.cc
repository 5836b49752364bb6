// `fca audit` and `fca watch`: building a spec from flags and a manifest,
// submitting it, and following the job to its end.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/manifest.h"
#include "client/watch.h"
#include "common/status_macros.h"

// One flag per AuditSpec field (defaults in brackets are the server's).
ABSL_FLAG(std::vector<std::string>, models, {}, "audit: models, comma-separated");
ABSL_FLAG(std::string, dense_twin, "", "audit: dense twin model");
ABSL_FLAG(std::string, eval, "", "audit: evaluation dataset (name or sha256:HEX)");
ABSL_FLAG(std::string, calib, "", "audit: calibration dataset");
ABSL_FLAG(std::vector<std::string>, interventions, {},
          "audit: interventions, comma-separated [all]");
ABSL_FLAG(int64_t, window, 0, "audit: tokens per window [128]");
ABSL_FLAG(int64_t, max_eval_windows, 0,
          "audit: eval windows [all, at most the server's max_windows]");
ABSL_FLAG(int64_t, max_calib_windows, 0,
          "audit: calibration windows [all, at most the server's max_windows]");
ABSL_FLAG(int64_t, batch, 0, "audit: windows per forward pass [8]");
ABSL_FLAG(uint64_t, seed, 0, "audit: seed [0]");
ABSL_FLAG(bool, per_site_shuffle, false, "audit: one token permutation per site");
ABSL_FLAG(int32_t, bootstrap, 0, "audit: bootstrap resamples [1000]");
ABSL_FLAG(double, ci_level, 0, "audit: confidence level in (0,1) [0.95]");
ABSL_FLAG(bool, allow_overlap, false, "audit: allow eval/calib windows to overlap");
ABSL_FLAG(int32_t, timing_repeats, 0,
          "audit: timed (model, dense twin) pairs per model, at least [7]");
ABSL_FLAG(int32_t, timing_max_repeats, 0,
          "audit: timed pairs per model, at most (adaptive stop) [max(200, timing_repeats)]");
ABSL_FLAG(double, timing_budget_seconds, 0,
          "audit: wall time the adaptive timing may take per model [60]");
ABSL_FLAG(std::string, label, "", "audit: free text shown in listings");
ABSL_FLAG(std::vector<std::string>, per_layer, {},
          "audit: interventions to replay one group of sites at a time, comma-separated "
          "(one replay per group each) [none]");
ABSL_FLAG(std::string, per_layer_scope, "",
          "audit: per_layer groups: layer, site or family [layer]");
ABSL_FLAG(int32_t, fidelity_check_every, 0,
          "audit: replay fidelity checked on the first and every k-th evaluation batch; 1 checks "
          "all [8]");
ABSL_FLAG(std::string, manifest, "", "audit: JSON AuditSpec to start from");
ABSL_FLAG(std::string, save_manifest, "", "audit: write the submitted spec here");
ABSL_FLAG(bool, watch, true, "audit: watch the job after submitting");
ABSL_FLAG(bool, detach, false, "audit: print the job id and exit");

// watch
ABSL_FLAG(int64_t, after_seq, 0, "watch: resume after this event sequence number");

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

// Trims entries and drops empty ones, so "--models=a, b," means {a, b}.
std::vector<std::string> CleanList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    std::string trimmed(absl::StripAsciiWhitespace(item));
    if (!trimmed.empty()) out.push_back(std::move(trimmed));
  }
  return out;
}

// Only flags the user typed override the manifest; a default must never
// silently reset a manifest field.
SpecOverrides OverridesFromFlags(const CommandContext& ctx) {
  SpecOverrides o;
  auto given = [&](const char* flag) { return ctx.Specified(flag); };
  if (given("models")) o.models = CleanList(absl::GetFlag(FLAGS_models));
  if (given("dense_twin")) o.dense_twin = absl::GetFlag(FLAGS_dense_twin);
  if (given("eval")) o.eval_dataset = absl::GetFlag(FLAGS_eval);
  if (given("calib")) o.calib_dataset = absl::GetFlag(FLAGS_calib);
  if (given("interventions")) {
    o.interventions = CleanList(absl::GetFlag(FLAGS_interventions));
  }
  if (given("window")) o.window_length = absl::GetFlag(FLAGS_window);
  if (given("max_eval_windows")) {
    o.max_eval_windows = absl::GetFlag(FLAGS_max_eval_windows);
  }
  if (given("max_calib_windows")) {
    o.max_calib_windows = absl::GetFlag(FLAGS_max_calib_windows);
  }
  if (given("batch")) o.batch_size = absl::GetFlag(FLAGS_batch);
  if (given("seed")) o.seed = absl::GetFlag(FLAGS_seed);
  if (given("per_site_shuffle")) {
    o.per_site_shuffle = absl::GetFlag(FLAGS_per_site_shuffle);
  }
  if (given("bootstrap")) o.bootstrap_resamples = absl::GetFlag(FLAGS_bootstrap);
  if (given("ci_level")) o.ci_level = absl::GetFlag(FLAGS_ci_level);
  if (given("allow_overlap")) o.allow_overlap = absl::GetFlag(FLAGS_allow_overlap);
  if (given("timing_repeats")) {
    o.timing_repeats = absl::GetFlag(FLAGS_timing_repeats);
  }
  if (given("timing_max_repeats")) {
    o.timing_max_repeats = absl::GetFlag(FLAGS_timing_max_repeats);
  }
  if (given("timing_budget_seconds")) {
    o.timing_budget_seconds = absl::GetFlag(FLAGS_timing_budget_seconds);
  }
  if (given("label")) o.label = absl::GetFlag(FLAGS_label);
  if (given("per_layer")) o.per_layer_interventions = CleanList(absl::GetFlag(FLAGS_per_layer));
  if (given("per_layer_scope")) o.per_layer_scope = absl::GetFlag(FLAGS_per_layer_scope);
  if (given("fidelity_check_every")) {
    o.fidelity_check_every = absl::GetFlag(FLAGS_fidelity_check_every);
  }
  return o;
}

absl::StatusOr<v1::AuditSpec> SpecFromCommandLine(const CommandContext& ctx) {
  v1::AuditSpec base;
  if (ctx.Specified("manifest")) {
    FCA_ASSIGN_OR_RETURN(base, LoadManifest(absl::GetFlag(FLAGS_manifest)));
  }
  v1::AuditSpec spec = MergeSpec(std::move(base), OverridesFromFlags(ctx));
  // The server stores and compares hashes in lower case.
  spec.set_eval_dataset(NormalizeDatasetRef(spec.eval_dataset()));
  spec.set_calib_dataset(NormalizeDatasetRef(spec.calib_dataset()));
  FCA_RETURN_IF_ERROR(CheckSpecComplete(spec));
  return spec;
}

// A progress bar only makes sense on an interactive terminal.
bool StderrIsTerminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) == 1 && !(term != nullptr && std::string(term) == "dumb");
}

int TerminalWidth() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    return size.ws_col;
  }
  const char* columns = std::getenv("COLUMNS");
  const int parsed = columns != nullptr ? std::atoi(columns) : 0;
  return parsed > 0 ? parsed : 80;
}

// Prints the final state and maps it to the exit code.
int ReportFinalState(CommandContext& ctx, const v1::Job& job) {
  std::string line = absl::StrFormat("job %d %s", job.id(), JobStateName(job.state()));
  if (job.has_started_at() && job.has_finished_at()) {
    absl::StrAppendFormat(
        &line, " after %s",
        HumanDuration(absl::Seconds(job.finished_at().seconds() - job.started_at().seconds())));
  }
  ctx.out() << line << "\n";
  ctx.out().flush();
  // The server already formats the error as "CODE: message".
  if (job.state() == v1::JOB_STATE_FAILED && !job.error().empty()) {
    ctx.err() << SanitizeForTerminal(job.error()) << "\n";
  }
  return ExitCodeForJobState(job.state());
}

// The finished job a watch ended with, asking the server when the stream
// did not carry it: nothing came after `after_seq` (the job had already
// ended) or the server closed the stream early.
absl::StatusOr<v1::Job> FinalJob(CommandContext& ctx, int64_t job_id, const WatchOutcome& outcome) {
  if (outcome.job && IsTerminalState(outcome.job->state())) return *outcome.job;
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(job_id));
  if (!IsTerminalState(job.state())) {
    return absl::UnavailableError(
        absl::StrFormat("the server ended the stream while job %d is %s; resume with "
                        "'fca watch %d --after_seq=%d'",
                        job_id, JobStateName(job.state()), job_id, outcome.last_seq));
  }
  return job;
}

// Streams the job's events until it ends, then reports its final state.
CommandResult WatchToEnd(CommandContext& ctx, int64_t job_id, int64_t after_seq) {
  WatchPrinter::Options printer_options;
  printer_options.tty = StderrIsTerminal();
  printer_options.width = TerminalWidth();
  WatchPrinter printer(ctx.out(), ctx.err(), printer_options);
  WatchOptions options;
  int64_t last_seq = after_seq;
  options.on_retry = [&](const absl::Status& status, absl::Duration backoff) {
    printer.Finish();
    ctx.err() << absl::StrFormat("connection lost (%s); resuming after seq %d in %s\n",
                                 FormatError(status), last_seq, absl::FormatDuration(backoff));
  };
  auto outcome = WatchWithReconnect(
      after_seq,
      [&, attempt = 0](int64_t seq, const WatchReadFn& read) mutable -> absl::Status {
        // gRPC's channel retries connecting on its own backoff schedule and
        // fails calls fast meanwhile; a fresh channel connects at once, so a
        // restarted server is found on our next retry.
        FCA_ASSIGN_OR_RETURN(AuditClient * client,
                             attempt++ == 0 ? ctx.Client() : ctx.ReopenClient());
        return client->WatchJob(job_id, seq, read);
      },
      [&](const v1::WatchJobResponse& response) {
        last_seq = response.event().seq();
        printer.OnEvent(response);
      },
      options);
  printer.Finish();
  FCA_RETURN_IF_ERROR(outcome.status());
  FCA_ASSIGN_OR_RETURN(v1::Job job, FinalJob(ctx, job_id, *outcome));
  return ReportFinalState(ctx, job);
}

}  // namespace

const std::vector<std::string>& AuditFlagNames() {
  // One per AuditSpec field, then the command's own.
  // clang-format off
  static constexpr const char* kNames[] = {
      "models", "dense_twin", "eval", "calib", "interventions", "window",
      "max_eval_windows", "max_calib_windows", "batch", "seed", "per_site_shuffle",
      "bootstrap", "ci_level", "allow_overlap", "timing_repeats", "label",
      "timing_max_repeats", "timing_budget_seconds", "per_layer", "per_layer_scope",
      "fidelity_check_every", "manifest", "save_manifest", "watch", "detach"};
  // clang-format on
  static const auto* names = new std::vector<std::string>(std::begin(kNames), std::end(kNames));
  return *names;
}

CommandResult RunAudit(CommandContext& ctx) {
  if (!ctx.args().empty()) {
    return UsageError(absl::StrFormat("unexpected argument '%s'", ctx.args()[0]));
  }
  FCA_ASSIGN_OR_RETURN(v1::AuditSpec spec, SpecFromCommandLine(ctx));
  // Saved before submitting: a manifest that cannot be written stops the
  // job from starting, and a rejected spec can be fixed and resubmitted.
  if (ctx.Specified("save_manifest")) {
    FCA_RETURN_IF_ERROR(SaveManifest(absl::GetFlag(FLAGS_save_manifest), spec));
  }
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->SubmitAudit(spec));
  if (absl::GetFlag(FLAGS_detach) || !absl::GetFlag(FLAGS_watch)) {
    // Only the id, so scripts can write JOB=$(fca audit --detach ...).
    ctx.out() << job.id() << "\n";
    return kExitOk;
  }
  ctx.out() << absl::StrFormat("submitted job %d (%s)\n", job.id(), JobStateName(job.state()));
  ctx.out().flush();
  return WatchToEnd(ctx, job.id(), /*after_seq=*/0);
}

CommandResult RunWatch(CommandContext& ctx) {
  if (ctx.args().size() != 1) {
    return UsageError("expected: fca watch JOB_ID [--after_seq=N]");
  }
  FCA_ASSIGN_OR_RETURN(int64_t job_id, ParseJobId(ctx.args()[0]));
  const int64_t after_seq = absl::GetFlag(FLAGS_after_seq);
  if (after_seq < 0) return UsageError("--after_seq must be >= 0");
  return WatchToEnd(ctx, job_id, after_seq);
}

}  // namespace fca::client
