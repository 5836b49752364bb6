#include <gtest/gtest.h>
#include "tests/core/core_env.h"
namespace fca::core {
TEST(RaceExperiment, QueuedEventFirst) {
  Scheduler::Options o = testing::FastSchedulerOptions();
  o.poll_interval = std::chrono::milliseconds(0);
  testing::CoreEnv env({}, o);
  ASSERT_TRUE(env.UploadEvalAndCalib(testing::Alice()).ok());
  ASSERT_TRUE(env.scheduler()->Start().ok());
  int bad = 0;
  for (int i = 0; i < 60; ++i) {
    auto job = env.Submit(testing::Alice(), testing::SmallSpec({"fg_a"}, "eval", "eval"));
    ASSERT_TRUE(job.ok()) << job.status();
    auto ev = env.Watch(testing::Alice(), job->id(), 0);
    ASSERT_TRUE(ev.ok());
    if ((*ev)[0].event().state() != v1::JOB_STATE_QUEUED) ++bad;
  }
  EXPECT_EQ(bad, 0);
}
}
