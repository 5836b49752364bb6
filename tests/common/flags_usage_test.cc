// common/flags_usage.h: the flag checks fca-server and fca-worker share.
#include "common/flags_usage.h"

#include <gtest/gtest.h>

namespace fca {
namespace {

TEST(FlagsUsageTest, RangeIncludesBothEnds) {
  EXPECT_TRUE(CheckFlagRange("threads", 0, 0, 8).ok());
  EXPECT_TRUE(CheckFlagRange("threads", 8, 0, 8).ok());
  const absl::Status low = CheckFlagRange("threads", -1, 0, 8);
  EXPECT_EQ(low.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(low.message(), "--threads=-1 is out of range: it must be in [0, 8]");
  EXPECT_FALSE(CheckFlagRange("threads", 9, 0, 8).ok());
}

TEST(FlagsUsageTest, DeviceNames) {
  for (const char* good : {"cpu", "cuda", "cuda:0", "cuda:12", "cuda:9999"}) {
    EXPECT_TRUE(IsDeviceName(good)) << good;
  }
  for (const char* bad :
       {"", "CPU", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:12345", "cuda0", " cpu", "cuda:1 "}) {
    EXPECT_FALSE(IsDeviceName(bad)) << bad;
  }
}

// --help groups flags by source file: named inside the project, whether the
// compiler saw an absolute path or one relative to the build folder.
TEST(FlagsUsageTest, FlagFilesAreNamedInsideTheProject) {
  std::string root = __FILE__;
  root.resize(root.size() - std::string("tests/common/flags_usage_test.cc").size());
  EXPECT_EQ(FlagFileName(root + "server/main.cc"), "server/main.cc");
  EXPECT_EQ(FlagFileName("../client/commands.cc"), "client/commands.cc");
  EXPECT_EQ(FlagFileName("./common/log.cc"), "common/log.cc");
  EXPECT_EQ(FlagFileName("client/spec_flags.cc"), "client/spec_flags.cc");
}

}  // namespace
}  // namespace fca
