// WatchJob as server-sent events (GET /api/v1/jobs/<id>/events): where a
// stream resumes, the framing of each event and the keep-alive, free of any
// HTTP library (the transport gives a function that writes bytes to the
// client); tested with a fake sink and clock (tests/http/event_stream_test.cc).
//
//   id: <seq>\nevent: job\ndata: <WatchJobResponse as one line of JSON>\n\n
//   : keep-alive\n\n                 when nothing was written for a while
//   event: error\ndata: <error JSON>\n\n   an error once the stream started
#ifndef FCA_SERVER_HTTP_EVENT_STREAM_H_
#define FCA_SERVER_HTTP_EVENT_STREAM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/caller.h"
#include "server/core/service.h"

namespace fca::http {

// The seq after which a stream starts: `last_event_id` (the Last-Event-ID
// header, what a reconnecting EventSource sends) wins over `after_seq` (the
// query parameter); 0 without either. INVALID_ARGUMENT naming the one used
// when it is not a non-negative integer of at most 18 digits.
[[nodiscard]] absl::StatusOr<int64_t> ResumeAfter(const std::optional<std::string>& last_event_id,
                                                  const std::optional<std::string>& after_seq);

// The frames.
std::string JobEventFrame(const v1::WatchJobResponse& response);
std::string ErrorEventFrame(const absl::Status& status);
inline constexpr absl::string_view kKeepAliveFrame = ": keep-alive\n\n";

// Turns WatchJob's callbacks into frames written to the client.
class JobEventWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // Writes bytes to the client: false when it is gone.
  using Write = std::function<bool(absl::string_view)>;

  // A keep-alive after `keepalive` without a write; the stream ends at the
  // next poll once `*stopping` (the server drains).
  JobEventWriter(Write write, std::chrono::milliseconds keepalive,
                 const std::atomic<bool>* stopping, std::function<Clock::time_point()> now);

  // WatchJob's `write`: one event; false once the client is gone.
  bool Event(const v1::WatchJobResponse& response);
  // WatchJob's `stop`, polled while no event comes: true ends the stream
  // (the client is gone or the server stops); else a keep-alive when due.
  bool Poll();
  // After WatchJob: the error event of a non-OK status.
  void Finish(const absl::Status& status);

  bool client_gone() const { return client_gone_; }

 private:
  bool Send(absl::string_view frame);

  Write write_;
  const std::chrono::milliseconds keepalive_;
  const std::atomic<bool>* stopping_;
  std::function<Clock::time_point()> now_;
  Clock::time_point last_write_;
  bool client_gone_ = false;
};

// Job `job_id`'s events after `after_seq` from `core` through `writer`,
// until the job ends, the client goes, the server stops (an UNAVAILABLE
// error event: resume with Last-Event-ID) or `may_go_on` says no (its
// error as the event: the key was revoked). False when the client went away.
bool StreamJobEvents(core::AuditServiceCore& core, const core::Caller& caller, int64_t job_id,
                     int64_t after_seq, JobEventWriter& writer,
                     const std::function<absl::Status(bool)>& may_go_on = {});

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_EVENT_STREAM_H_
