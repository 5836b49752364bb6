// The resumable watch loop (client/watch.h): reconnect after UNAVAILABLE
// from the last seq, no event missed or delivered twice, bounded retrying.
#include "client/watch.h"

#include <deque>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fca/v1/job_states.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A scripted server: each attempt delivers the events after `after_seq`
// from `log`, up to `deliver` of them, then ends with `status`.
struct Attempt {
  int deliver;
  absl::Status status;
  bool replay_old = false;  // misbehave: resend everything from seq 1
};

struct FakeServer {
  std::vector<v1::WatchJobResponse> log;
  std::deque<Attempt> attempts;
  std::vector<int64_t> opened_after;  // after_seq of each attempt

  int stopped_by_client = 0;  // attempts the reader ended itself

  absl::Status Stream(int64_t after_seq, const WatchReadFn& read) {
    opened_after.push_back(after_seq);
    if (attempts.empty()) return absl::InternalError("unexpected attempt");
    Attempt a = attempts.front();
    attempts.pop_front();
    int sent = 0;
    for (const auto& r : log) {
      // A seq-0 note is not stored: a server sends it on every stream.
      if (!a.replay_old && r.event().seq() != 0 && r.event().seq() <= after_seq) continue;
      if (sent == a.deliver) break;
      ++sent;
      if (!read(r)) {
        ++stopped_by_client;
        return absl::OkStatus();
      }
    }
    return a.status;
  }
};

v1::WatchJobResponse Event(int64_t seq, v1::JobState state) {
  v1::WatchJobResponse r;
  r.mutable_event()->set_seq(seq);
  if (v1::IsTerminal(state)) {
    r.mutable_event()->set_state(state);
  } else {
    r.mutable_event()->mutable_progress()->set_fraction(seq / 10.0);
  }
  r.mutable_job()->set_id(3);
  r.mutable_job()->set_state(state);
  return r;
}

FakeServer MakeServer(int events) {
  FakeServer server;
  for (int seq = 1; seq <= events; ++seq) {
    server.log.push_back(
        Event(seq, seq == events ? v1::JOB_STATE_SUCCEEDED : v1::JOB_STATE_RUNNING));
  }
  return server;
}

struct FakeClock {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> sleeps;
  WatchOptions Options() {
    WatchOptions o;
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      now += d;
    };
    return o;
  }
};

struct WatchRun {
  absl::StatusOr<WatchOutcome> outcome;
  std::vector<int64_t> seen;
};

WatchRun Watch(FakeServer& server, FakeClock& clock, int64_t after_seq = 0) {
  WatchRun run;
  run.outcome = WatchWithReconnect(
      after_seq, [&](int64_t seq, const WatchReadFn& fn) { return server.Stream(seq, fn); },
      [&](const v1::WatchJobResponse& r) { run.seen.push_back(r.event().seq()); }, clock.Options());
  return run;
}

TEST(WatchWithReconnectTest, OneCleanStream) {
  FakeServer server = MakeServer(4);
  server.attempts = {{100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok());
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(run.outcome->last_seq, 4);
  EXPECT_EQ(run.outcome->job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(clock.sleeps.empty());
}

TEST(WatchWithReconnectTest, ResumesFromLastSeqWithoutGapsOrRepeats) {
  FakeServer server = MakeServer(6);
  server.attempts = {{2, absl::UnavailableError("reset")},
                     {0, absl::UnavailableError("still down")},
                     {3, absl::UnavailableError("reset again")},
                     {100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok()) << run.outcome.status();
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(server.opened_after, ElementsAre(0, 2, 2, 5));
  // Backoff doubles while nothing arrives and resets after progress.
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Milliseconds(250), absl::Milliseconds(500),
                                        absl::Milliseconds(250)));
}

TEST(WatchWithReconnectTest, AnUnstoredNoteIsShownAndDoesNotMoveTheResumePoint) {
  FakeServer server = MakeServer(4);
  v1::WatchJobResponse note = Event(0, v1::JOB_STATE_RUNNING);
  note.mutable_event()->set_message("its end cannot be recorded yet");
  server.log.insert(server.log.begin() + 2, note);  // after seq 2
  server.attempts = {{3, absl::UnavailableError("reset")}, {100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok()) << run.outcome.status();
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 0, 0, 3, 4));  // the note again on the new stream
  EXPECT_THAT(server.opened_after, ElementsAre(0, 2));
  EXPECT_EQ(run.outcome->last_seq, 4);
}

TEST(WatchWithReconnectTest, StopsReadingAtTheTerminalStateEvent) {
  // A server that keeps the stream open after the job ended must not hang
  // the CLI: the attempt's status is never reached once the reader stops.
  FakeServer server = MakeServer(3);
  server.log.push_back(Event(4, v1::JOB_STATE_RUNNING));  // must not be seen
  server.attempts = {{100, absl::DeadlineExceededError("would hang")}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok()) << run.outcome.status();
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 3));
  EXPECT_EQ(server.stopped_by_client, 1);
}

TEST(WatchWithReconnectTest, TerminalJobSnapshotAloneDoesNotStop) {
  // Attaching late, a server may attach the current (finished) job to every
  // replayed event; only the state event itself ends the watch.
  FakeServer server = MakeServer(4);
  for (auto& r : server.log) r.mutable_job()->set_state(v1::JOB_STATE_SUCCEEDED);
  server.attempts = {{100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok());
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 3, 4));
}

TEST(WatchWithReconnectTest, DropsEventsAServerReplays) {
  FakeServer server = MakeServer(5);
  server.attempts = {{3, absl::UnavailableError("reset")},
                     {100, absl::OkStatus(), /*replay_old=*/true}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_TRUE(run.outcome.ok());
  EXPECT_THAT(run.seen, ElementsAre(1, 2, 3, 4, 5));
}

TEST(WatchWithReconnectTest, StartsAfterTheGivenSeq) {
  FakeServer server = MakeServer(5);
  server.attempts = {{100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock, /*after_seq=*/3);
  ASSERT_TRUE(run.outcome.ok());
  EXPECT_THAT(run.seen, ElementsAre(4, 5));
  EXPECT_THAT(server.opened_after, ElementsAre(3));
}

TEST(WatchWithReconnectTest, NothingAfterSeqLeavesNoJob) {
  FakeServer server = MakeServer(2);
  server.attempts = {{100, absl::OkStatus()}};
  FakeClock clock;
  WatchRun run = Watch(server, clock, /*after_seq=*/9);
  ASSERT_TRUE(run.outcome.ok());
  EXPECT_TRUE(run.seen.empty());
  EXPECT_FALSE(run.outcome->job.has_value());
  EXPECT_EQ(run.outcome->last_seq, 9);
}

TEST(WatchWithReconnectTest, GivesUpAfterTheBudgetWithoutProgress) {
  FakeServer server = MakeServer(3);
  for (int i = 0; i < 100; ++i) {
    server.attempts.push_back({0, absl::UnavailableError("connection refused")});
  }
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_FALSE(run.outcome.ok());
  EXPECT_EQ(run.outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(run.outcome.status().message(), HasSubstr("connection refused"));
  EXPECT_THAT(run.outcome.status().message(), HasSubstr("gave up"));
  EXPECT_LE(clock.now - absl::UnixEpoch(), absl::Seconds(30));
  EXPECT_GE(clock.now - absl::UnixEpoch(), absl::Seconds(20));
  // Backoff is capped.
  for (absl::Duration d : clock.sleeps) EXPECT_LE(d, absl::Seconds(4));
}

TEST(WatchWithReconnectTest, OtherErrorsAreNotRetried) {
  FakeServer server = MakeServer(3);
  server.attempts = {{1, absl::NotFoundError("job 3 not found")}};
  FakeClock clock;
  WatchRun run = Watch(server, clock);
  ASSERT_FALSE(run.outcome.ok());
  EXPECT_EQ(run.outcome.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server.opened_after.size(), 1u);
  EXPECT_TRUE(clock.sleeps.empty());
}

TEST(WatchWithReconnectTest, RetryCallbackSeesEachAttempt) {
  FakeServer server = MakeServer(2);
  server.attempts = {{1, absl::UnavailableError("a")}, {100, absl::OkStatus()}};
  FakeClock clock;
  WatchOptions options = clock.Options();
  int retries = 0;
  options.on_retry = [&](const absl::Status& s, absl::Duration) {
    EXPECT_EQ(s.message(), "a");
    ++retries;
  };
  auto outcome = WatchWithReconnect(
      0, [&](int64_t seq, const WatchReadFn& fn) { return server.Stream(seq, fn); },
      [](const v1::WatchJobResponse&) {}, options);
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(retries, 1);
}

}  // namespace
}  // namespace fca::client
