// HostLinear (host_gemm.h) against at::linear on the row-major weight, bit
// for bit: row counts 1-300 and 1024 (the small-matrix fallback, part tiles,
// whole tiles), widths of one block and of several (OpenBLAS's split of the
// last two), outputs that fill the 32-wide panels and outputs that do not.
#include "server/engine/models/host_gemm.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace fca::engine {
namespace {

constexpr char kUnavailable[] =
    "no AVX-512, or this BLAS rounds otherwise than OpenBLAS's SkylakeX kernels: "
    "the projections stay row-major and run in at::linear";

struct Shape {
  int64_t in, out;
};

TEST(HostGemmTest, EveryRowCountHasTheBitsOfAtLinear) {
  if (!HostGemmAvailable()) GTEST_SKIP() << kUnavailable;
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  // olmoe-s1's attention and experts, its twin's MLP, and widths of 2 and 3
  // blocks (448 + 552 -> 448 + 288 + 264) with a part panel of outputs.
  for (const Shape s : std::vector<Shape>{
           {192, 192}, {192, 256}, {256, 192}, {192, 512}, {512, 192}, {1000, 48}, {1400, 40}}) {
    const at::Tensor w = at::randn({s.out, s.in}, gen);
    const at::Tensor stored = HostGemmLayout(w);
    ASSERT_TRUE(HostLinearApplies(at::empty({1, s.in}), stored));
    std::vector<int64_t> rows;
    for (int64_t n = 1; n <= 300; ++n) rows.push_back(n);
    rows.push_back(1024);
    for (const int64_t n : rows) {
      at::Tensor x = at::randn({n, s.in}, gen);
      x[0].zero_();  // a row of zeros: each chain of +-0 ends at +0
      ASSERT_TRUE(at::equal(HostLinear(x, stored), at::linear(x, w)))
          << "in " << s.in << " out " << s.out << " rows " << n;
    }
  }
}

TEST(HostGemmTest, WritesIntoARowSliceAndKeepsTheLeadingDimensions) {
  if (!HostGemmAvailable()) GTEST_SKIP() << kUnavailable;
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const at::Tensor w = at::randn({256, 192}, gen);
  const at::Tensor stored = HostGemmLayout(w);
  const at::Tensor x = at::randn({4, 50, 192}, gen);
  const at::Tensor y = HostLinear(x, stored);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 50, 256}));
  EXPECT_TRUE(at::equal(y, at::linear(x, w)));

  const at::Tensor big = at::full({300, 256}, 7.0);
  const at::Tensor xs = at::randn({100, 192}, gen);
  HostLinearInto(xs, stored, big.slice(0, 100, 200));
  EXPECT_TRUE(at::equal(big.slice(0, 100, 200), at::linear(xs, w)));
  EXPECT_TRUE(at::equal(big.slice(0, 0, 100), at::full({100, 256}, 7.0)));
  EXPECT_TRUE(at::equal(big.slice(0, 200, 300), at::full({100, 256}, 7.0)));
}

TEST(HostGemmTest, AppliesOnlyToItsLayoutOutsideAutograd) {
  if (!HostGemmAvailable()) GTEST_SKIP() << kUnavailable;
  const at::Tensor w = at::randn({64, 32});
  const at::Tensor stored = HostGemmLayout(w);
  const at::Tensor x = at::randn({8, 32});
  EXPECT_EQ(stored.strides(), (std::vector<int64_t>{1, 64}));
  EXPECT_TRUE(at::equal(stored, w));
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(HostLinearApplies(x, stored));
    EXPECT_FALSE(HostLinearApplies(x, w));  // row-major: at::linear
    EXPECT_FALSE(HostLinearApplies(x.to(at::kBFloat16), stored.to(at::kBFloat16)));
  }
  at::AutoGradMode grad(true);
  EXPECT_FALSE(HostLinearApplies(x, stored));
}

// Beyond 1 MiB OpenBLAS was faster, and other dtypes are not the kernel's:
// those weights stay as they are.
TEST(HostGemmTest, LeavesWeightsTheKernelDoesNotSuit) {
  const at::Tensor wide = at::zeros({1024, 512});
  EXPECT_TRUE(HostGemmLayout(wide).is_same(wide));
  const at::Tensor half = at::zeros({64, 32}, at::kBFloat16);
  EXPECT_TRUE(HostGemmLayout(half).is_same(half));
  if (!HostGemmAvailable()) {
    const at::Tensor w = at::zeros({64, 32});
    EXPECT_TRUE(HostGemmLayout(w).is_same(w));
  }
}

}  // namespace
}  // namespace fca::engine
