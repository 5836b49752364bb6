// Every status code and job state maps to the documented exit code
// (client/exit_codes.h); scripts depend on these numbers.
#include "client/exit_codes.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

using ::absl::StatusCode;

TEST(ExitCodeTest, EveryStatusCode) {
  const std::vector<std::pair<StatusCode, int>> expected = {
      {StatusCode::kOk, 0},
      {StatusCode::kCancelled, 1},
      {StatusCode::kUnknown, 1},
      {StatusCode::kInvalidArgument, 3},
      {StatusCode::kDeadlineExceeded, 6},
      {StatusCode::kNotFound, 4},
      {StatusCode::kAlreadyExists, 8},
      {StatusCode::kPermissionDenied, 5},
      {StatusCode::kResourceExhausted, 7},
      {StatusCode::kFailedPrecondition, 8},
      {StatusCode::kAborted, 8},
      {StatusCode::kOutOfRange, 3},
      {StatusCode::kUnimplemented, 1},
      {StatusCode::kInternal, 1},
      {StatusCode::kUnavailable, 6},
      {StatusCode::kDataLoss, 1},
      {StatusCode::kUnauthenticated, 5},
  };
  ASSERT_EQ(expected.size(), 17u);  // all canonical codes
  for (const auto& [code, exit_code] : expected) {
    const absl::Status status =
        code == StatusCode::kOk ? absl::OkStatus() : absl::Status(code, "x");
    EXPECT_EQ(ExitCodeForStatus(status), exit_code) << absl::StatusCodeToString(code);
  }
}

TEST(ExitCodeTest, UsageErrorWinsOverItsCode) {
  absl::Status usage = UsageError("--name is required");
  EXPECT_TRUE(IsUsageError(usage));
  EXPECT_EQ(usage.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExitCodeForStatus(usage), kExitUsage);
  EXPECT_FALSE(IsUsageError(absl::InvalidArgumentError("server said no")));
  EXPECT_FALSE(IsUsageError(absl::OkStatus()));
}

TEST(ExitCodeTest, JobStates) {
  EXPECT_EQ(ExitCodeForJobState(fca::v1::JOB_STATE_SUCCEEDED), 0);
  EXPECT_EQ(ExitCodeForJobState(fca::v1::JOB_STATE_FAILED), 9);
  EXPECT_EQ(ExitCodeForJobState(fca::v1::JOB_STATE_CANCELLED), 10);
  EXPECT_EQ(ExitCodeForJobState(fca::v1::JOB_STATE_RUNNING), 1);
  EXPECT_EQ(ExitCodeForJobState(fca::v1::JOB_STATE_QUEUED), 1);
}

TEST(ExitCodeTest, ErrorLines) {
  EXPECT_EQ(FormatError(absl::NotFoundError("model 'x' is not in the repository")),
            "NOT_FOUND: model 'x' is not in the repository");
  EXPECT_EQ(FormatError(UsageError("unknown flag --bogus")),
            "USAGE: unknown flag --bogus (see 'fca help')");
}

TEST(ExitCodeTest, HelpListsEveryCode) {
  const std::string help = ExitCodeHelp();
  for (int code = 0; code <= 10; ++code) {
    EXPECT_THAT(help, ::testing::HasSubstr(absl::StrFormat("  %2d  ", code)));
  }
}

}  // namespace
}  // namespace fca::client
