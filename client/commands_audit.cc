#include "client/commands_audit.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/format_progress.h"
#include "client/manifest.h"
#include "client/spec_flags.h"
#include "client/text_safety.h"
#include "client/watch.h"
#include "common/spec_fields.h"
#include "common/status_macros.h"
#include "proto/fca/v1/job_states.h"

// The AuditSpec fields' flags are client/spec_flags.cc's; these are the
// command's own.
ABSL_FLAG(std::string, manifest, "", "audit: JSON AuditSpec to start from");
ABSL_FLAG(std::string, save_manifest, "", "audit: write the submitted spec here");
ABSL_FLAG(bool, watch, true, "audit: watch the job after submitting");
ABSL_FLAG(bool, detach, false, "audit: print the job id and exit");
ABSL_DECLARE_FLAG(std::string, project);  // commands.cc

// watch
ABSL_FLAG(int64_t, after_seq, 0, "watch: resume after this event sequence number");

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

absl::StatusOr<v1::AuditSpec> SpecFromCommandLine(const CommandContext& ctx) {
  v1::AuditSpec base;
  if (ctx.Specified("manifest")) {
    FCA_ASSIGN_OR_RETURN(base, LoadManifest(absl::GetFlag(FLAGS_manifest)));
  }
  v1::AuditSpec spec = MergeSpec(std::move(base), OverridesFromFlags(ctx.specified()));
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
  if (outcome.job && v1::IsTerminal(outcome.job->state())) return *outcome.job;
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(job_id));
  if (!v1::IsTerminal(job.state())) {
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
        if (response.event().seq() > 0) last_seq = response.event().seq();
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
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    for (const spec_fields::SpecField* f : spec_fields::SpecFields()) out->push_back(f->flag);
    for (const char* own : {"manifest", "save_manifest", "watch", "detach", "project"}) {
      out->push_back(own);
    }
    return out;
  }();
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
  FCA_ASSIGN_OR_RETURN(v1::Job job, client->SubmitAudit(spec, absl::GetFlag(FLAGS_project)));
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
