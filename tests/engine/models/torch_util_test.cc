// GuardTorch: torch's exceptions become statuses that name the step and
// send the reader to the server's log, where torch's whole text is.
#include "server/engine/models/torch_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

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

// LayerNormInFloat against libtorch's own bfloat16 layer_norm on random rows
// of the models' widths (FeatureGate 128/192, the tiny MUDDPythia 64,
// MUDDPythia-1.4B 2048, and a width that is no multiple of the vector size).
// libtorch 1.13's CPU kernel keeps the row's moments in bfloat16, so no
// float32 computation equals it: about half the elements differ, by up to
// 0.05. That is why muddpythia, whose reference runs LayerNorm natively in
// bfloat16, calls at::layer_norm, and LayerNormInFloat stays FeatureGate's own
// (documented) numerics (docs/fca.md, "bfloat16 numerics"). Should a libtorch
// make them equal, this test fails and muddpythia can take the faster one.
TEST(LayerNormInFloatTest, DiffersFromLibtorchBf16LayerNorm) {
  at::manual_seed(7);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {8, 128, 128}, {8, 128, 192}, {2, 16, 64}, {1, 64, 2048}, {3, 5, 100}}) {
    const int64_t d = shape.back();
    const at::Tensor x = (at::randn(shape) * 3 + 0.5).to(at::kBFloat16);
    const at::Tensor w = (at::randn({d}) * 0.2 + 1).to(at::kBFloat16);
    const at::Tensor b = (at::randn({d}) * 0.1).to(at::kBFloat16);
    const at::Tensor native = at::layer_norm(x, {d}, w, b, 1e-5);
    const at::Tensor ours = LayerNormInFloat(x, w, b, 1e-5);
    const double differ = native.ne(ours).to(at::kDouble).mean().item<double>();
    std::printf("[ measured ] width %ld: %.3f of the elements differ\n", static_cast<long>(d),
                differ);
    EXPECT_GT(differ, 0.1) << "width " << d;
    // Both are LayerNorms: within about 2^-6 of each other, relative to
    // |y| + 1 (measured: at most 0.0104).
    const at::Tensor f = ours.to(at::kFloat);
    const at::Tensor gap = (native.to(at::kFloat) - f).abs() / (f.abs() + 1);
    EXPECT_LE(gap.max().item<double>(), 1.0 / 64) << "width " << d;
  }
}

}  // namespace
}  // namespace fca::engine
