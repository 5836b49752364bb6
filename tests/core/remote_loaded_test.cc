// jobs::RemoteLoaded (server/jobs/remote_loaded.h): what remote workers
// last reported holding loaded, forgotten a lease after their last report,
// with names no model could have dropped and the list capped. The protocol
// around it (ClaimTask and RenewLease carry the list, GetQueue shows it, an
// overlong list is refused) is tests/e2e/remote_worker_e2e_test.cc's.
#include "server/jobs/remote_loaded.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "server/runtime/task_broker.h"
#include "tests/testing/test_util.h"

namespace fca::core {
namespace {

using ::fca::test_util::kSecond;

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RemoteLoadedTest, AReportReplacesTheLastAndExpiresALeaseAfterIt) {
  jobs::RemoteLoaded loaded(std::chrono::seconds(2));
  loaded.Report("w1@pool", {"fg-b", "fg-a"}, 10 * kSecond);
  loaded.Report("w2@pool", {"fg-a"}, 11 * kSecond);
  auto live = loaded.Live(12 * kSecond);
  EXPECT_THAT(live["w1@pool"], ElementsAre("fg-a", "fg-b"));  // sorted
  EXPECT_THAT(live["w2@pool"], ElementsAre("fg-a"));
  // w1 unloaded fg-b; its new report is all that counts.
  loaded.Report("w1@pool", {"fg-a"}, 12 * kSecond);
  EXPECT_THAT(loaded.Live(12 * kSecond)["w1@pool"], ElementsAre("fg-a"));
  // A lease after its last report, w2 is forgotten; w1 called later.
  live = loaded.Live(13 * kSecond + 1);
  EXPECT_EQ(live.count("w2@pool"), 0u);
  EXPECT_THAT(live["w1@pool"], ElementsAre("fg-a"));
  EXPECT_THAT(loaded.Live(14 * kSecond + 1), IsEmpty());
  // An empty report: the worker holds nothing now.
  loaded.Report("w1@pool", {"fg-a"}, 20 * kSecond);
  loaded.Report("w1@pool", {}, 20 * kSecond);
  EXPECT_THAT(loaded.Live(20 * kSecond), IsEmpty());
}

TEST(RemoteLoadedTest, NamesNoModelCouldHaveAreDroppedAndTheListIsCapped) {
  jobs::RemoteLoaded loaded(std::chrono::seconds(30));
  loaded.Report("w@pool", {"../etc", "", std::string(129, 'x'), "fg-a", "fg-a", ".hidden"},
                kSecond);
  EXPECT_THAT(loaded.Live(kSecond)["w@pool"], ElementsAre("fg-a"));
  std::vector<std::string> many;
  for (int i = 0; i < 3 * runtime::kMaxLoadedModels; ++i) many.push_back("m" + std::to_string(i));
  loaded.Report("w@pool", many, kSecond);
  EXPECT_EQ(loaded.Live(kSecond)["w@pool"].size(), static_cast<size_t>(runtime::kMaxLoadedModels));
}

}  // namespace
}  // namespace fca::core
