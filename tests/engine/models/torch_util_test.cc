// GuardTorch: torch's exceptions become statuses that name the step and
// send the reader to the server's log, where torch's whole text is.
#include "server/engine/models/torch_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/testing/test_models.h"

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

// Out of memory is the device's state: another worker may run the task.
// A TorchScript module's interpreter rethrows torch's OutOfMemoryError as a
// std::runtime_error with the text only, so the text must be enough.
TEST(GuardTorchTest, OutOfMemoryInTheTextIsResourceExhausted) {
  ::testing::internal::CaptureStderr();
  const absl::Status st = GuardTorch("running the test forward", []() -> absl::Status {
    throw std::runtime_error(
        "The following operation failed in the TorchScript interpreter.\nRuntimeError: CUDA out "
        "of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)");
  });
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(), "running the test forward ran out of memory");
}

TEST(IsOutOfMemoryTest, TorchsTypesAndCudasMessages) {
  EXPECT_TRUE(IsOutOfMemory(std::bad_alloc()));
  for (const char* text :
       {"CUDA out of memory. Tried to allocate 20.00 MiB", "CUDA error: out of memory",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: not enough memory: you "
        "tried to allocate 1099511627776 bytes."}) {
    EXPECT_TRUE(IsOutOfMemory(std::runtime_error(text))) << text;
  }
  for (const char* text : {"", "this module always fails", "CUDA error: device-side assert",
                           "mat1 and mat2 shapes cannot be multiplied"}) {
    EXPECT_FALSE(IsOutOfMemory(std::runtime_error(text))) << text;
  }
  try {
    BadProduct();
    ADD_FAILURE() << "a 2x3 by 2x3 product no longer throws";
  } catch (const c10::Error& e) {
    EXPECT_FALSE(IsOutOfMemory(e));
  }
}

TEST(DeviceTest, TheCpuIsNamedCpuAndNeedsNoSynchronisation) {
  EXPECT_EQ(DeviceName("cpu"), "cpu");
  EXPECT_TRUE(IsCpuDevice("cpu"));
  EXPECT_FALSE(IsCpuDevice("cuda:0"));
  EXPECT_FALSE(IsCpuDevice("banana"));
  SynchronizeDevice("cpu");  // a no-op that must not throw
}

// The device the engine suites run on (FCA_TEST_DEVICE): a tensor loaded for
// it lands there, and its name is recorded.
TEST(DeviceTest, ATensorLoadedForTheTestDeviceLandsThere) {
  const ComputeOptions compute = testing::TestCompute();
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f};
  TensorView view;
  view.name = "w";
  view.shape = {2, 2};
  view.data = reinterpret_cast<const uint8_t*>(values.data());
  view.num_bytes = values.size() * sizeof(float);
  const absl::StatusOr<at::Tensor> t = TensorFromView(view, compute);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->device(), c10::Device(compute.device));
  EXPECT_TRUE(at::equal(t->cpu(), at::tensor(values).view({2, 2})));
  SynchronizeDevice(compute.device);
  EXPECT_FALSE(DeviceName(compute.device).empty());
  if (IsCpuDevice(compute.device)) {
    EXPECT_EQ(DeviceName(compute.device), "cpu");
  }
}

// Coefficients of sites of different widths, as a model records them.
std::vector<at::Tensor> SiteCoefficients(at::ScalarType dtype) {
  at::manual_seed(3);
  return {at::rand({2, 5, 4}).to(dtype), at::rand({2, 5, 1}).to(dtype),
          at::rand({2, 5, 8}).to(dtype), at::empty({2, 5, 0}, dtype)};
}

// ToHost/ToDevice on tensors already there hand them back as they are; to
// the test device and back gives the same bits, shapes and dtypes (on a
// GPU through one packed, pinned copy each way).
TEST(PackedTransferTest, RoundTripsKeepBitsShapesAndDtypes) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::vector<at::Tensor> host = SiteCoefficients(dtype);
    const std::vector<at::Tensor> same = ToHost(host);
    ASSERT_EQ(same.size(), host.size());
    for (size_t s = 0; s < host.size(); ++s) EXPECT_TRUE(same[s].is_same(host[s])) << s;
    const std::vector<at::Tensor> cpu = ToDevice(host, "cpu");
    for (size_t s = 0; s < host.size(); ++s) EXPECT_TRUE(cpu[s].is_same(host[s])) << s;

    const std::string device = testing::TestCompute().device;
    const std::vector<at::Tensor> there = ToDevice(host, device);
    const std::vector<at::Tensor> back = ToHost(there);
    ASSERT_EQ(there.size(), host.size());
    ASSERT_EQ(back.size(), host.size());
    for (size_t s = 0; s < host.size(); ++s) {
      EXPECT_EQ(there[s].device(), c10::Device(device)) << s;
      EXPECT_TRUE(back[s].is_cpu()) << s;
      EXPECT_EQ(back[s].scalar_type(), dtype) << s;
      EXPECT_EQ(back[s].sizes(), host[s].sizes()) << s;
      EXPECT_TRUE(at::equal(back[s], host[s])) << s;
    }
  }
  EXPECT_TRUE(ToHost({}).empty());
}

// LayerNormInFloat against libtorch's own bfloat16 layer_norm on random rows
// of the models' widths (FeatureGate 128/192, the tiny MUDDPythia 64,
// MUDDPythia-1.4B 2048, and a width that is no multiple of the vector size).
// libtorch 1.13's CPU kernel keeps the row's moments in bfloat16, so no
// float32 computation equals it: about half the elements differ, by up to
// 0.05. That is why muddpythia, whose reference runs LayerNorm natively in
// bfloat16, calls at::layer_norm, and LayerNormInFloat stays FeatureGate's own
// (documented) numerics (docs/fca.md, "bfloat16 numerics"). The 2.x line's
// kernel accumulates in float: the two then differ in a few elements only
// (one rounding of the moments apart).
TEST(LayerNormInFloatTest, DiffersFromLibtorchBf16LayerNorm) {
  at::manual_seed(7);
  double differ_total = 0;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {8, 128, 128}, {8, 128, 192}, {2, 16, 64}, {1, 64, 2048}, {3, 5, 100}}) {
    const int64_t d = shape.back();
    const at::Tensor x = (at::randn(shape) * 3 + 0.5).to(at::kBFloat16);
    const at::Tensor w = (at::randn({d}) * 0.2 + 1).to(at::kBFloat16);
    const at::Tensor b = (at::randn({d}) * 0.1).to(at::kBFloat16);
    const at::Tensor native = at::layer_norm(x, {d}, w, b, 1e-5);
    const at::Tensor ours = LayerNormInFloat(x, w, b, 1e-5);
    const double differ = native.ne(ours).to(at::kDouble).mean().item<double>();
    std::printf("[ measured ] width %ld: %.2e of the elements differ\n", static_cast<long>(d),
                differ);
    differ_total += differ;
    if (TorchMajorVersion() < 2) {  // 1.13 keeps the moments in bfloat16
      EXPECT_GT(differ, 0.1) << "width " << d;
    } else {
      EXPECT_LT(differ, 1e-3) << "width " << d;
    }
    // Both are LayerNorms: within about 2^-6 of each other, relative to
    // |y| + 1 (measured: at most 0.0104).
    const at::Tensor f = ours.to(at::kFloat);
    const at::Tensor gap = (native.to(at::kFloat) - f).abs() / (f.abs() + 1);
    EXPECT_LE(gap.max().item<double>(), 1.0 / 64) << "width " << d;
  }
  // Still not the same LayerNorm (2.6: 7.6e-6 to 4.6e-5 of the elements at
  // three of the widths): should they become equal, muddpythia can take
  // the faster one.
  EXPECT_GT(differ_total, 0);
}

// ScaleInPlace gives the bits of x * s in both dtypes, at the attention's
// scales 1/sqrt(head width): on libtorch 2.x an in-place mul_ by the double
// rounds it to bfloat16 first, where x * s does not.
TEST(ScaleInPlaceTest, HasTheBitsOfTheProduct) {
  at::manual_seed(11);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const double hd : {8.0, 12.0, 32.0, 128.0}) {
      const double s = 1.0 / std::sqrt(hd);
      const at::Tensor x = (at::randn({2, 3, 37, 37}) * 3).to(dtype);
      at::Tensor scaled = x.clone();
      ScaleInPlace(scaled, s);
      EXPECT_TRUE(at::equal(scaled, x * s)) << c10::toString(dtype) << " 1/sqrt(" << hd << ")";
    }
  }
}

}  // namespace
}  // namespace fca::engine
