// The event stream's parts without a socket (server/http/event_stream.h):
// where a stream resumes, the frames, the keep-alive on a fake clock, a
// client that goes away, and one whole stream of a real core's job.
#include "server/http/event_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/core/core_env.h"

namespace fca::http {
namespace {

using core::testing::Alice;
using core::testing::CoreEnv;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = JobEventWriter::Clock;

TEST(ResumeAfterTest, LastEventIdWinsOverAfterSeq) {
  EXPECT_EQ(*ResumeAfter(std::nullopt, std::nullopt), 0);
  EXPECT_EQ(*ResumeAfter(std::nullopt, "5"), 5);
  EXPECT_EQ(*ResumeAfter("7", "5"), 7);
  EXPECT_EQ(*ResumeAfter("999999999999999999", std::nullopt), 999999999999999999);
}

TEST(ResumeAfterTest, RefusesWhatIsNotASequenceNumberNamingItsSource) {
  for (const char* bad : {"", "-1", "+1", " 1", "1x", "1000000000000000000"}) {
    const absl::StatusOr<int64_t> header = ResumeAfter(bad, "5");
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(header.status().message(), HasSubstr("Last-Event-ID must be a non-negative"));
    const absl::StatusOr<int64_t> param = ResumeAfter(std::nullopt, bad);
    EXPECT_THAT(param.status().message(), HasSubstr("after_seq must be a non-negative")) << bad;
  }
}

v1::WatchJobResponse EventWithSeq(int64_t seq) {
  v1::WatchJobResponse r;
  r.mutable_event()->set_seq(seq);
  return r;
}

TEST(FramesTest, JobEventsAndErrors) {
  const std::string frame = JobEventFrame(EventWithSeq(3));
  EXPECT_THAT(frame, StartsWith("id: 3\nevent: job\ndata: {"));
  EXPECT_EQ(frame.substr(frame.size() - 3), "}\n\n");
  EXPECT_EQ(frame.find('\n', frame.find("data: ")), frame.size() - 2);  // one line of JSON
  EXPECT_EQ(ErrorEventFrame(absl::UnavailableError("draining")),
            "event: error\ndata: {\"code\":\"UNAVAILABLE\",\"message\":\"draining\"}\n\n");
}

TEST(FramesTest, AnUnstoredNoteHasNoIdSoResumingIsUnaffected) {
  v1::WatchJobResponse note = EventWithSeq(0);
  note.mutable_event()->set_message("its end cannot be recorded yet");
  EXPECT_THAT(JobEventFrame(note), StartsWith("event: job\ndata: {"));
}

// A writer on a fake clock and sink.
class JobEventWriterTest : public ::testing::Test {
 protected:
  JobEventWriter MakeWriter() {
    return JobEventWriter(
        [this](absl::string_view frame) {
          if (!client_connected_) return false;
          frames_.emplace_back(frame);
          return true;
        },
        std::chrono::milliseconds(15000), &stopping_, [this] { return now_; });
  }

  Clock::time_point now_{};
  std::atomic<bool> stopping_{false};
  bool client_connected_ = true;
  std::vector<std::string> frames_;
};

TEST_F(JobEventWriterTest, KeepAliveOnlyAfterTheIntervalWithoutAWrite) {
  JobEventWriter writer = MakeWriter();
  now_ += std::chrono::milliseconds(14999);
  EXPECT_FALSE(writer.Poll());
  EXPECT_TRUE(frames_.empty());
  EXPECT_TRUE(writer.Event(EventWithSeq(1)));  // resets the interval
  now_ += std::chrono::milliseconds(14999);
  EXPECT_FALSE(writer.Poll());
  EXPECT_EQ(frames_.size(), 1u);
  now_ += std::chrono::milliseconds(1);
  EXPECT_FALSE(writer.Poll());
  ASSERT_EQ(frames_.size(), 2u);
  EXPECT_EQ(frames_[1], kKeepAliveFrame);
  writer.Finish(absl::OkStatus());  // a finished job: nothing more
  EXPECT_EQ(frames_.size(), 2u);
}

TEST_F(JobEventWriterTest, AGoneClientOrAStoppingServerEndsTheStream) {
  JobEventWriter writer = MakeWriter();
  client_connected_ = false;
  EXPECT_FALSE(writer.Event(EventWithSeq(1)));
  EXPECT_TRUE(writer.client_gone());
  EXPECT_TRUE(writer.Poll());

  JobEventWriter draining = MakeWriter();
  client_connected_ = true;
  stopping_ = true;
  EXPECT_TRUE(draining.Poll());
  draining.Finish(absl::UnavailableError("server is shutting down"));
  ASSERT_EQ(frames_.size(), 1u);
  EXPECT_THAT(frames_[0], StartsWith("event: error\ndata: {\"code\":\"UNAVAILABLE\""));
}

TEST_F(JobEventWriterTest, StreamsAJobUntilItsTerminalEvent) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  absl::StatusOr<v1::Job> job =
      env.Submit(Alice(), core::testing::SmallSpec({core::testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  ASSERT_TRUE(env.core()->CancelJob(Alice(), cancel).ok());  // queued: canceled at once

  JobEventWriter writer = MakeWriter();
  EXPECT_TRUE(StreamJobEvents(*env.core(), Alice(), job->id(), 0, writer));
  ASSERT_FALSE(frames_.empty());
  EXPECT_THAT(frames_[0], StartsWith("id: 1\nevent: job\n"));
  EXPECT_THAT(frames_.back(), HasSubstr("\"state\":\"CANCELLED\""));  // short enum names

  // Resumed after the first event: the rest, the same frames.
  const std::vector<std::string> all = frames_;
  frames_.clear();
  JobEventWriter resumed = MakeWriter();
  EXPECT_TRUE(StreamJobEvents(*env.core(), Alice(), job->id(), 1, resumed));
  EXPECT_EQ(frames_, std::vector<std::string>(all.begin() + 1, all.end()));
}

}  // namespace
}  // namespace fca::http
