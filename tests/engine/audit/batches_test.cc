// RunBatches: every window in exactly one batch, progress on the calling
// thread, the first error stops the pass.
#include "server/engine/audit/batches.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fca::engine {
namespace {

TEST(RunBatchesTest, EveryWindowRunsOnceAndProgressEndsAtN) {
  for (int threads : {1, 3}) {
    std::vector<std::atomic<int>> seen(23);
    std::vector<int64_t> progress;
    const std::thread::id caller = std::this_thread::get_id();
    absl::Status s = RunBatches(
        3, 23, 4, threads,
        [&](int64_t b, int64_t e) {
          EXPECT_EQ((b - 3) % 4, 0);
          EXPECT_LE(e - b, 4);
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          return absl::OkStatus();
        },
        [&](int64_t done) {
          EXPECT_EQ(std::this_thread::get_id(), caller);
          progress.push_back(done);
          return absl::OkStatus();
        });
    ASSERT_TRUE(s.ok()) << s;
    for (int i = 0; i < 23; ++i) EXPECT_EQ(seen[i].load(), i < 3 ? 0 : 1) << i;
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), 23);
    for (size_t i = 1; i < progress.size(); ++i) EXPECT_GT(progress[i], progress[i - 1]);
    EXPECT_GT(progress.front(), 3);  // the `first` windows count as done
  }
}

TEST(RunBatchesTest, TheFirstErrorStopsThePass) {
  std::atomic<int> ran{0};
  absl::Status s = RunBatches(
      0, 400, 1, 3,
      [&](int64_t b, int64_t) {
        ran.fetch_add(1);
        if (b == 5) return absl::InvalidArgumentError("batch 5 is bad");
        // Batches that take a while, as real ones do: empty ones let the
        // other threads run all 400 while the thread holding batch 5 waits
        // to be scheduled (a test that failed on a loaded machine). Now it
        // would have to wait ~0.4 s.
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        return absl::OkStatus();
      },
      [](int64_t) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "batch 5 is bad");
  EXPECT_LT(ran.load(), 400);
}

TEST(RunBatchesTest, AnErrorFromAfterStopsThePassAndIsReturned) {
  std::atomic<int> ran{0};
  absl::Status s = RunBatches(
      0, 100, 2, 1, [&](int64_t, int64_t) { return ran.fetch_add(1), absl::OkStatus(); },
      [](int64_t done) { return done >= 10 ? absl::CancelledError("stop") : absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(ran.load(), 5);  // one thread: no batch after the one that reached 10
}

TEST(RunBatchesTest, AnExceptionBecomesInternalNamingTheStepAndIsLogged) {
  ::testing::internal::CaptureStderr();
  absl::Status s = RunBatches(
      0, 8, 2, 2,
      [](int64_t b, int64_t) -> absl::Status {
        if (b == 4) throw std::runtime_error("boom\nsecond line");
        return absl::OkStatus();
      },
      [](int64_t) { return absl::OkStatus(); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "running a batch failed (see the server log)") << s;
  // The exception's text is the server's to read, all of it.
  EXPECT_NE(log.find("running a batch failed: boom\nsecond line"), std::string::npos) << log;
}

TEST(RunBatchesTest, NothingToDoIsOk) {
  int calls = 0;
  EXPECT_TRUE(RunBatches(
                  5, 5, 4, 2, [&](int64_t, int64_t) { return ++calls, absl::OkStatus(); },
                  [&](int64_t) { return ++calls, absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace fca::engine
