// jobs::Refusals (server/jobs/refusals.h): the back-off a refusing worker
// waits, who counts as live, and the message naming who refused. The
// protocol's behaviour around it (no attempt spent, the task offered to
// others, the job failed once all refused) is tests/grpc/task_broker_test.cc's.
#include "server/jobs/refusals.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/testing/test_util.h"

namespace fca::core {
namespace {

using ::fca::test_util::kSecond;

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RefusalBackoffTest, DoublesFromTheInitialUpToTheCap) {
  const jobs::RefusalBackoff defaults;
  EXPECT_EQ(defaults.initial, jobs::RefusalBackoff::kDefaultInitial);
  EXPECT_EQ(defaults.max, jobs::RefusalBackoff::kDefaultMax);
  std::vector<int64_t> got;
  for (int n = 1; n <= 9; ++n) got.push_back(defaults.After(n).count());
  EXPECT_THAT(got, ElementsAre(1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000));
  const jobs::RefusalBackoff custom{milliseconds(300), milliseconds(1000)};
  EXPECT_EQ(custom.After(1), milliseconds(300));
  EXPECT_EQ(custom.After(2), milliseconds(600));
  EXPECT_EQ(custom.After(3), milliseconds(1000));
  EXPECT_EQ(custom.After(1000000), milliseconds(1000));  // no overflow
  const jobs::RefusalBackoff inverted{milliseconds(5000), milliseconds(2000)};
  EXPECT_EQ(inverted.After(1), milliseconds(2000));
}

TEST(RefusalsTest, ARefuserIsBackedOffFromThatTaskOnly) {
  jobs::Refusals r(jobs::RefusalBackoff{});
  const int64_t t0 = 100 * kSecond;
  EXPECT_EQ(r.Record(1, 10, "w1", "stale", t0), milliseconds(1000));
  EXPECT_THAT(r.BackedOff("w1", t0 + kSecond - 1), ElementsAre(10));
  EXPECT_THAT(r.BackedOff("w1", t0 + kSecond), IsEmpty());
  EXPECT_THAT(r.BackedOff("w2", t0), IsEmpty());
  EXPECT_EQ(r.Record(1, 10, "w1", "stale", t0 + kSecond), milliseconds(2000));
  EXPECT_THAT(r.BackedOff("w1", t0 + 3 * kSecond - 1), ElementsAre(10));
  r.ForgetJob(1);
  EXPECT_THAT(r.BackedOff("w1", t0 + kSecond), IsEmpty());
}

TEST(RefusalsTest, EveryLiveWorkerRefusedCountsOnlyWorkersSeenWithinTheWindow) {
  jobs::Refusals r(jobs::RefusalBackoff{});
  const milliseconds live(30000);
  r.Seen("old", 0);
  r.Seen("w2", 50 * kSecond);
  r.Record(7, 3, "w1", "no model", 60 * kSecond);
  EXPECT_FALSE(r.RefusedByEveryLiveWorker(3, 60 * kSecond, live));  // w2 has not
  r.Record(7, 3, "w2", "out of memory", 61 * kSecond);
  // "old" was last seen 61 s ago: not live.
  EXPECT_TRUE(r.RefusedByEveryLiveWorker(3, 61 * kSecond, live));
  EXPECT_EQ(r.Describe(3), "w1 (no model); w2 (out of memory)");
  // A worker seen again is live again, and has not refused.
  r.Seen("old", 62 * kSecond);
  EXPECT_FALSE(r.RefusedByEveryLiveWorker(3, 62 * kSecond, live));
  EXPECT_EQ(r.Describe(4), "");
}

}  // namespace
}  // namespace fca::core
