#include "common/log.h"

#include <glog/logging.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace fca {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

TEST(LogTest, AnErrorIsOneWarningLineNamingWhatWhyAndTheCaller) {
  ::testing::internal::CaptureStderr();
  const int line = __LINE__ + 1;
  LogIfError("optimizing the store", absl::UnavailableError("database is busy"));
  const std::string log = ::testing::internal::GetCapturedStderr();
  // glog's prefix: severity W, then the caller's file and line, not log.cc's.
  EXPECT_THAT(log,
              ContainsRegex("(^|\n)W[0-9]+ [0-9:.]+ +[0-9]+ log_test\\.cc:" + std::to_string(line) +
                            "\\] optimizing the store: UNAVAILABLE: database is busy\n"))
      << log;
}

TEST(LogTest, OkIsNotLogged) {
  ::testing::internal::CaptureStderr();
  LogIfError("optimizing the store", absl::OkStatus());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(LogTest, ServerLoggingWritesEverySeverityToStderr) {
  InitServerLogging("log_test");
  InitServerLogging("log_test");  // a second call is harmless
  ::testing::internal::CaptureStderr();
  LOG(INFO) << "an info line";
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("] an info line\n")) << log;
  EXPECT_THAT(log, ContainsRegex("(^|\n)I[0-9]+ ")) << log;
}

}  // namespace
}  // namespace fca
