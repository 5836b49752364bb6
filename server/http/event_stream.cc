#include "server/http/event_stream.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/http/json_io.h"

namespace fca::http {
namespace {

// A non-negative integer of at most 18 digits (no sign, no spaces).
bool ParseSeq(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(text, out);
}

}  // namespace

absl::StatusOr<int64_t> ResumeAfter(const std::optional<std::string>& last_event_id,
                                    const std::optional<std::string>& after_seq) {
  const std::optional<std::string>& from = last_event_id ? last_event_id : after_seq;
  int64_t after = 0;
  if (from && !ParseSeq(*from, &after)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be a non-negative integer (an event's sequence number)",
                        last_event_id ? "Last-Event-ID" : "after_seq"));
  }
  return after;
}

std::string JobEventFrame(const v1::WatchJobResponse& response) {
  absl::StatusOr<std::string> json = PrintJson(response);
  if (!json.ok()) {
    return absl::StrCat(": event ", response.event().seq(), " cannot be written as JSON\n\n");
  }
  // A seq-0 note is not stored: without an id the browser resumes from the
  // last stored event.
  const std::string id =
      response.event().seq() > 0 ? absl::StrCat("id: ", response.event().seq(), "\n") : "";
  return absl::StrCat(id, "event: job\ndata: ", *json, "\n\n");
}

std::string ErrorEventFrame(const absl::Status& status) {
  return absl::StrCat("event: error\ndata: ", ErrorJson(status), "\n\n");
}

JobEventWriter::JobEventWriter(Write write, std::chrono::milliseconds keepalive,
                               const std::atomic<bool>* stopping,
                               std::function<Clock::time_point()> now)
    : write_(std::move(write)),
      keepalive_(keepalive),
      stopping_(stopping),
      now_(std::move(now)),
      last_write_(now_()) {}

bool JobEventWriter::Send(absl::string_view frame) {
  if (!write_(frame)) client_gone_ = true;
  last_write_ = now_();
  return !client_gone_;
}

bool JobEventWriter::Event(const v1::WatchJobResponse& response) {
  return Send(JobEventFrame(response));
}

bool JobEventWriter::Poll() {
  if (client_gone_ || *stopping_) return true;
  if (now_() - last_write_ >= keepalive_) return !Send(kKeepAliveFrame);
  return false;
}

void JobEventWriter::Finish(const absl::Status& status) {
  if (!client_gone_ && !status.ok()) Send(ErrorEventFrame(status));
}

bool StreamJobEvents(core::AuditServiceCore& core, const core::Caller& caller, int64_t job_id,
                     int64_t after_seq, JobEventWriter& writer,
                     const std::function<absl::Status(bool)>& may_go_on) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  const absl::Status status = core.WatchJob(
      caller, request, [&](const v1::WatchJobResponse& r) { return writer.Event(r); },
      [&] { return writer.Poll(); }, may_go_on);
  if (writer.client_gone()) return false;
  writer.Finish(status);
  return true;
}

}  // namespace fca::http
