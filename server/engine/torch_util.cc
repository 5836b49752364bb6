#include "server/engine/torch_util.h"

#include <torch/torch.h>

#include <thread>

#include "absl/strings/str_format.h"

namespace fca::engine {
namespace {

absl::StatusOr<at::ScalarType> ComputeDType(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return absl::InvalidArgumentError(absl::StrFormat(
      "dtype '%s' is not supported (use float32, bfloat16 or float16)", name));
}

absl::StatusOr<at::ScalarType> ViewDType(DType d) {
  switch (d) {
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF64: return at::kDouble;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", std::string(DTypeName(d)), " is not a floating-point weight type"));
  }
}

}  // namespace

absl::Status ValidateCompute(const ComputeOptions& compute) {
  auto dtype = ComputeDType(compute.dtype);
  if (!dtype.ok()) return dtype.status();
  try {
    c10::Device device(compute.device);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      return absl::UnavailableError("device '" + compute.device + "': CUDA is not available");
    }
    if (!device.is_cpu() && !device.is_cuda()) {
      return absl::InvalidArgumentError("device '" + compute.device + "' is not supported");
    }
  } catch (const std::exception&) {
    return absl::InvalidArgumentError("device '" + compute.device + "' is not a device name");
  }
  if (compute.dtype == "float16" && compute.device == "cpu") {
    return absl::InvalidArgumentError("float16 matmul is not implemented on CPU; use bfloat16");
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> TensorFromView(const TensorView& view, const ComputeOptions& compute) {
  auto src = ViewDType(view.dtype);
  if (!src.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", view.name, "': ", src.status().message()));
  }
  auto dst = ComputeDType(compute.dtype);
  if (!dst.ok()) return dst.status();
  return GuardTorch("loading tensor '" + view.name + "'", [&]() -> absl::StatusOr<at::Tensor> {
    // Copy the (possibly unaligned) mapped bytes first: the mapping must not
    // be aliased by a tensor that outlives it.
    at::Tensor host = at::empty(view.shape, at::TensorOptions().dtype(*src));
    if (view.num_bytes > 0) std::memcpy(host.data_ptr(), view.data, view.num_bytes);
    ReleaseMappedPages(view);
    return host.to(at::TensorOptions().dtype(*dst).device(c10::Device(compute.device)));
  });
}

void ConfigureRuntime(const RuntimeOptions& options) {
  int n = options.num_threads;
  if (n <= 0) n = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(n);
}

std::string TorchVersion() {
  return absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

}  // namespace fca::engine
