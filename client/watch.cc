#include "client/watch.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "client/format.h"
#include "client/format_progress.h"
#include "client/text_safety.h"
#include "common/result_key.h"
#include "common/vocabulary.h"
#include "proto/fca/v1/job_states.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::client {

namespace v1 = ::fca::v1;

absl::StatusOr<WatchOutcome> WatchWithReconnect(int64_t after_seq, const WatchStreamFn& stream,
                                                const WatchEventFn& on_event,
                                                const WatchOptions& options) {
  WatchOutcome outcome;
  outcome.last_seq = after_seq;
  absl::Time last_progress = options.now();
  absl::Duration backoff = options.initial_backoff;
  while (true) {
    bool advanced = false;
    absl::Status status = stream(outcome.last_seq, [&](const v1::WatchJobResponse& response) {
      const v1::JobEvent& event = response.event();
      if (event.seq() == 0) {  // a note the server could not store: shown, never replayed
        on_event(response);
        return true;
      }
      if (event.seq() <= outcome.last_seq) return true;  // replayed
      outcome.last_seq = event.seq();
      outcome.job = response.job();
      advanced = true;
      on_event(response);
      return !(event.has_state() && v1::IsTerminal(event.state()));
    });
    if (status.ok()) return outcome;
    if (status.code() != absl::StatusCode::kUnavailable) return status;
    if (advanced) {
      // The server was reachable and made progress: a fresh budget.
      last_progress = options.now();
      backoff = options.initial_backoff;
    }
    if (options.now() + backoff - last_progress > options.reconnect_budget) {
      return absl::UnavailableError(absl::StrFormat("%s (gave up reconnecting after %s)",
                                                    status.message(),
                                                    HumanDuration(options.now() - last_progress)));
    }
    if (options.on_retry) options.on_retry(status, backoff);
    options.sleep(backoff);
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

bool ProgressThrottle::ShouldPrint(const v1::Progress& progress, absl::Time now) {
  const double fraction = std::clamp(progress.fraction(), 0.0, 1.0);
  const int decile = static_cast<int>(std::floor(fraction * 10));
  const bool print = !printed_any_ || progress.phase() != phase_ ||
                     progress.model_index() != model_index_ || decile > decile_ ||
                     now - last_time_ >= min_interval_;
  if (print) {
    printed_any_ = true;
    phase_ = progress.phase();
    model_index_ = progress.model_index();
    decile_ = std::max(decile_, decile);
    last_time_ = now;
  }
  return print;
}

WatchPrinter::WatchPrinter(std::ostream& out, std::ostream& progress_out, Options options)
    : out_(out),
      progress_out_(progress_out),
      options_(std::move(options)),
      watch_start_(options_.now()) {}

void WatchPrinter::OnEvent(const v1::WatchJobResponse& response) {
  const v1::Job& job = response.job();
  if (!job_start_ && job.has_started_at()) {
    job_start_ = absl::FromUnixSeconds(job.started_at().seconds()) +
                 absl::Nanoseconds(job.started_at().nanos());
  }
  const v1::JobEvent& event = response.event();
  switch (event.payload_case()) {
    case v1::JobEvent::kState:
      OnState(job.id(), event.state());
      break;
    case v1::JobEvent::kProgress:
      OnProgress(event.progress());
      break;
    case v1::JobEvent::kResults:
      OnResults(event.results());
      break;
    case v1::JobEvent::kMessage:
      OnMessage(event.message());
      break;
    case v1::JobEvent::PAYLOAD_NOT_SET:
      break;
  }
}

void WatchPrinter::Finish() { ClearBar(); }

absl::Duration WatchPrinter::Elapsed() const {
  const absl::Time now = options_.now();
  // The job's own start survives reconnects and late attaches; a clock skew
  // between client and server must not show a negative time.
  if (job_start_ && now >= *job_start_) return now - *job_start_;
  return now - watch_start_;
}

void WatchPrinter::OnProgress(const v1::Progress& progress) {
  last_progress_ = progress;
  if (options_.tty) {
    DrawBar();
    return;
  }
  if (throttle_.ShouldPrint(progress, options_.now())) {
    progress_out_ << RenderProgressLine(progress, Elapsed()) << "\n";
    progress_out_.flush();
  }
}

void WatchPrinter::OnResults(const v1::ResultBatch& batch) {
  ClearBar();
  // Per-site means and variances (two rows per site, hundreds for a large
  // model) are for plots; `fca report` and `fca results` show them.
  std::vector<v1::Result> rows;
  for (const v1::Result& r : batch.results()) {
    const ResultKey key = v1::KeyOfRow(r);
    const bool per_site =
        key.scope == MetricScope::kSite && (key.metric == kSiteMean || key.metric == kSiteVariance);
    if (!per_site) rows.push_back(r);
  }
  const int hidden = batch.results_size() - static_cast<int>(rows.size());
  out_ << absl::StrFormat("results for %s (%d rows%s):\n", SanitizeForTerminal(batch.model()),
                          batch.results_size(),
                          hidden > 0 ? absl::StrFormat("; %d per-site rows not shown", hidden) : "")
       << FormatResultsTable(rows);
  out_.flush();
  DrawBar();
}

void WatchPrinter::OnMessage(const std::string& message) {
  ClearBar();
  progress_out_ << "note: " << SanitizeForTerminal(message) << "\n";
  progress_out_.flush();
  DrawBar();
}

void WatchPrinter::OnState(int64_t job_id, v1::JobState state) {
  // Terminal states are reported once by the command after the stream ends.
  if (v1::IsTerminal(state)) return;
  ClearBar();
  progress_out_ << absl::StrFormat("job %d: %s\n", job_id, JobStateName(state));
  progress_out_.flush();
  DrawBar();
}

void WatchPrinter::ClearBar() {
  if (bar_chars_ == 0) return;
  progress_out_ << '\r' << std::string(bar_chars_, ' ') << '\r';
  progress_out_.flush();
  bar_chars_ = 0;
}

void WatchPrinter::DrawBar() {
  if (!options_.tty || !last_progress_) return;
  const std::string line = RenderProgressBar(*last_progress_, options_.width, Elapsed());
  // Pad over the previous bar instead of relying on terminal escapes.
  const size_t pad = bar_chars_ > line.size() ? bar_chars_ - line.size() : 0;
  progress_out_ << '\r' << line << std::string(pad, ' ');
  progress_out_.flush();
  bar_chars_ = line.size() + pad;
}

}  // namespace fca::client
