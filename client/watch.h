// Watching a job: the resumable event loop and the printer behind
// `fca watch` and `fca audit --watch`.
//
// Both are independent of gRPC: the loop takes the stream as a function and
// the printer writes to std::ostreams, so reconnects, de-duplication and
// output are unit-tested with fakes.
#ifndef FCA_CLIENT_WATCH_H_
#define FCA_CLIENT_WATCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

using WatchEventFn = std::function<void(const fca::v1::WatchJobResponse&)>;
// Receives one streamed event; returning false stops the stream.
using WatchReadFn = std::function<bool(const fca::v1::WatchJobResponse&)>;
// One stream attempt: deliver the events after `after_seq`, in order, until
// the server ends the stream (return its status) or `read` returns false
// (return OK). AuditClient::WatchJob fits.
using WatchStreamFn = std::function<absl::Status(int64_t after_seq, const WatchReadFn& read)>;

struct WatchOptions {
  // Give up when this long passes without a new event while reconnecting.
  absl::Duration reconnect_budget = absl::Seconds(30);
  absl::Duration initial_backoff = absl::Milliseconds(250);
  absl::Duration max_backoff = absl::Seconds(4);
  // Injectable clock, so tests run instantly.
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
  // Told before each retry (the CLI prints a note); may be empty.
  std::function<void(const absl::Status&, absl::Duration backoff)> on_retry;
};

struct WatchOutcome {
  int64_t last_seq = 0;             // the last event delivered
  std::optional<fca::v1::Job> job;  // the job as of that event
};

// Runs `stream` from `after_seq`. When it breaks with UNAVAILABLE it is
// reopened after the last seq seen, with exponential backoff, until
// `reconnect_budget` passes without progress. Events whose seq is not above
// the last one delivered are dropped, so `on_event` sees each seq once and
// in order even if a server replays; a seq-0 event (a note the server could
// not store) is delivered as it comes and does not move the resume point.
// Returns after the event that moves the
// job to a terminal state (the stream is not read further, so a server that
// keeps it open cannot hang the CLI), when a stream ends OK, on the first
// non-UNAVAILABLE error, or with the last UNAVAILABLE once the budget is
// spent.
[[nodiscard]] absl::StatusOr<WatchOutcome> WatchWithReconnect(int64_t after_seq,
                                                              const WatchStreamFn& stream,
                                                              const WatchEventFn& on_event,
                                                              const WatchOptions& options);

// Decides which progress events earn a line when output is not a terminal:
// the first, a change of phase or model, each new 10% of the job, and
// otherwise at most one per `min_interval`.
class ProgressThrottle {
 public:
  explicit ProgressThrottle(absl::Duration min_interval = absl::Seconds(60))
      : min_interval_(min_interval) {}
  bool ShouldPrint(const fca::v1::Progress& progress, absl::Time now);

 private:
  absl::Duration min_interval_;
  bool printed_any_ = false;
  std::string phase_;
  int64_t model_index_ = -1;
  int decile_ = -1;
  absl::Time last_time_;
};

// Renders a job's events. Results and notes go to `out`; progress and state
// changes to `progress_out` (stderr in the CLI, so redirected results stay
// clean). With `tty` the progress is one bar redrawn in place with '\r';
// otherwise throttled plain lines.
class WatchPrinter {
 public:
  struct Options {
    bool tty = false;
    int width = 80;  // terminal columns, for the bar
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };
  WatchPrinter(std::ostream& out, std::ostream& progress_out, Options options);

  void OnEvent(const fca::v1::WatchJobResponse& response);
  // Erases a bar left on screen. Call once the stream is over.
  void Finish();

 private:
  void OnProgress(const fca::v1::Progress& progress);
  void OnResults(const fca::v1::ResultBatch& batch);
  void OnMessage(const std::string& message);
  void OnState(int64_t job_id, fca::v1::JobState state);
  void ClearBar();
  void DrawBar();
  absl::Duration Elapsed() const;

  std::ostream& out_;
  std::ostream& progress_out_;
  Options options_;
  ProgressThrottle throttle_;
  absl::Time watch_start_;
  std::optional<absl::Time> job_start_;  // started_at, when the server set it
  std::optional<fca::v1::Progress> last_progress_;
  size_t bar_chars_ = 0;  // width of the bar on screen; 0 = none
};

}  // namespace fca::client

#endif  // FCA_CLIENT_WATCH_H_
