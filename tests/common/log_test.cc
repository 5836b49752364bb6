#include "common/log.h"

#include <errno.h>  // program_invocation_short_name
#include <gtest/gtest.h>

#include <string>

namespace fca {
namespace {

TEST(LogTest, AnErrorIsOneLineNamingTheProgramWhatAndWhy) {
  ::testing::internal::CaptureStderr();
  LogIfError("optimizing the store", absl::UnavailableError("database is busy"));
  const std::string line = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(line, std::string(program_invocation_short_name) +
                      ": optimizing the store: UNAVAILABLE: database is busy\n");
}

TEST(LogTest, OkIsNotLogged) {
  ::testing::internal::CaptureStderr();
  LogIfError("optimizing the store", absl::OkStatus());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace fca
