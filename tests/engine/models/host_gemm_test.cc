// HostLinear (host_gemm.h) against at::linear on the row-major weight, bit
// for bit: row counts 1-300 and 1024 (the small-matrix fallback, part tiles,
// whole tiles), widths of one block and of several (OpenBLAS's split of the
// last two), outputs that fill the 32-wide panels and outputs that do not,
// with and without a bias.
#include "server/engine/models/host_gemm.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "server/engine/models/controlled_model.h"
#include "server/engine/models/transformer_model.h"
#include "server/engine/models/transformer_net.h"
#include "tests/testing/test_models.h"

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

// at::linear adds a bias first for a matrix or a contiguous 3-d x (addmm)
// and after the product otherwise: HostLinear rounds as each does.
TEST(HostGemmTest, ABiasIsAddedWhereAtLinearAddsIt) {
  if (!HostGemmAvailable()) GTEST_SKIP() << kUnavailable;
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (const Shape s : std::vector<Shape>{{192, 576}, {768, 192}, {1000, 48}, {96, 4}}) {
    const at::Tensor w = at::randn({s.out, s.in}, gen);
    const at::Tensor b = at::randn({s.out}, gen);
    const at::Tensor stored = HostGemmLayout(w);
    for (const int64_t n : {1, 5, 37, 128, 300}) {
      SCOPED_TRACE(::testing::Message() << "in " << s.in << " out " << s.out << " rows " << n);
      const at::Tensor x = at::randn({n, s.in}, gen);
      EXPECT_TRUE(at::equal(HostLinear(x, stored, b), at::linear(x, w, b)));
      const at::Tensor x3 = at::randn({2, n, s.in}, gen);
      EXPECT_TRUE(at::equal(HostLinear(x3, stored, b), at::linear(x3, w, b)));
      const at::Tensor strided = at::randn({n, 2, s.in}, gen).transpose(0, 1);
      EXPECT_TRUE(at::equal(HostLinear(strided, stored, b), at::linear(strided, w, b)));
    }
  }
}

// A loaded featuregate model multiplies in HostLinear (its linear weights in
// HostGemmLayout); its LIVE logits and gates and its REPLAY are those of the
// same weights row-major through at::linear.
TEST(HostGemmTest, ALoadedModelHasTheBitsOfAtLinear) {
  if (!HostGemmAvailable()) GTEST_SKIP() << kUnavailable;
  TransformerConfig config = testing::TinyConfig("featuregate");
  config.d_model = 128;
  config.d_ff = 512;
  config.n_heads = 4;
  config.max_seq_len = 128;
  InitOptions init;
  init.controller_out_std = 0.5;  // input-dependent gates
  auto tensors = InitTransformerWeights(config, init);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(10);
  for (TensorData& t : *tensors) {  // biases start at 0: make them count
    if (t.shape.size() != 1) continue;
    const at::Tensor values = at::randn(t.shape, gen) * 0.1;
    std::memcpy(t.bytes.data(), values.data_ptr(), t.bytes.size());
  }
  const std::unique_ptr<ControlledModel> model = testing::LoadWritten(config, *tensors);
  ASSERT_NE(model, nullptr);
  std::vector<at::Tensor> weights;
  for (const TensorData& t : *tensors) {
    weights.push_back(at::empty(t.shape));
    std::memcpy(weights.back().data_ptr(), t.bytes.data(), t.bytes.size());
  }
  auto net = TransformerNet::Create(config, std::move(weights));
  ASSERT_TRUE(net.ok()) << net.status();

  for (const int64_t batch : {1, 8}) {
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    const at::Tensor ids = at::randint(0, 256, {batch, 128}, gen, at::kLong);
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> gates, gates_linear;
    auto live = model->Forward(ids, CoefficientMode::kLiveRecord, &gates);
    auto live_linear = (*net)->Forward(ids, CoefficientMode::kLiveRecord, &gates_linear, nullptr);
    ASSERT_TRUE(live.ok() && live_linear.ok()) << live.status() << live_linear.status();
    EXPECT_TRUE(at::equal(*live, *live_linear));
    ASSERT_EQ(gates.size(), gates_linear.size());
    for (size_t i = 0; i < gates.size(); ++i) EXPECT_TRUE(at::equal(gates[i], gates_linear[i]));
    std::vector<at::Tensor> other, other_linear;
    for (const at::Tensor& g : gates) other.push_back(g.flip(0) * 0.5);
    other_linear = other;
    auto replay = model->Forward(ids, CoefficientMode::kReplay, &other);
    auto replay_linear = (*net)->Forward(ids, CoefficientMode::kReplay, &other_linear, nullptr);
    ASSERT_TRUE(replay.ok() && replay_linear.ok());
    EXPECT_TRUE(at::equal(*replay, *replay_linear));
  }
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
