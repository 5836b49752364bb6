// GuardTorch: torch's exceptions become statuses that name the step and
// send the reader to the server's log, where torch's whole text is.
#include "server/engine/models/torch_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

namespace fca::engine {
namespace {

// A product of a 2x3 by a 2x3 matrix: c10::Error, with torch's source file
// and C++ frames in its text.
at::Tensor BadProduct() { return at::ones({2, 3}).matmul(at::ones({2, 3})); }

std::string TorchText() {
  try {
    BadProduct();
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "";
}

TEST(GuardTorchTest, ATorchErrorNamesTheStepForTheClientAndIsLoggedInFull) {
  const std::string torch_text = TorchText();
  ASSERT_FALSE(torch_text.empty()) << "a 2x3 by 2x3 product no longer throws";
  ::testing::internal::CaptureStderr();
  const absl::StatusOr<at::Tensor> product =
      GuardTorch("multiplying the test matrices",
                 [&]() -> absl::StatusOr<at::Tensor> { return BadProduct(); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(product.ok());
  EXPECT_EQ(product.status().code(), absl::StatusCode::kInternal);
  // Nothing of torch's text: not its message, not its paths or frames.
  EXPECT_EQ(product.status().message(),
            "multiplying the test matrices failed (see the server log)");
  const std::string first_line = torch_text.substr(0, torch_text.find('\n'));
  EXPECT_EQ(product.status().message().find(first_line), absl::string_view::npos);
  // The log has it all: the message, where torch raised it, the frames
  // (whose addresses differ from TorchText's call, so up to the first).
  const std::string stable = torch_text.substr(0, torch_text.find("frame #"));
  EXPECT_NE(log.find("multiplying the test matrices failed: " + stable), std::string::npos) << log;
  EXPECT_EQ(torch_text.find("frame #") == std::string::npos,
            log.find("frame #") == std::string::npos)
      << log;
}

TEST(GuardTorchTest, NoExceptionPassesTheResultThrough) {
  const absl::Status ok = GuardTorch("a step", [] { return absl::OkStatus(); });
  EXPECT_TRUE(ok.ok());
  const absl::Status refused =
      GuardTorch("a step", [] { return absl::InvalidArgumentError("the caller's mistake"); });
  EXPECT_EQ(refused.message(), "the caller's mistake");
}

}  // namespace
}  // namespace fca::engine
