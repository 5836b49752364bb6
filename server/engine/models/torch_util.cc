#include "server/engine/models/torch_util.h"

#include <torch/torch.h>

#include <malloc.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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
    return host.to(at::TensorOptions().dtype(*dst).device(c10::Device(compute.device)));
  });
}

absl::Status CheckTokenIds(const at::Tensor& ids, const ModelInfo& info, int64_t max_len,
                           int64_t vocab_size) {
  if (!ids.defined() || ids.dim() != 2 || ids.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError("token ids must be an int64 tensor [batch, length]");
  }
  const int64_t T = ids.size(1);
  if (ids.size(0) < 1 || T < 1 || T > max_len) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model '%s': window length %d is outside [1, %d] (or the batch is empty)",
                        info.name, T, max_len));
  }
  return GuardTorch("model '" + info.name + "' ids", [&]() -> absl::Status {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model '%s': token id %d is outside the vocabulary [0, %d)", info.name,
                          lo < 0 ? lo : hi, vocab_size));
    }
    return absl::OkStatus();
  });
}

absl::Status CheckReplayCoefficients(const at::Tensor& ids, const std::vector<CoefficientSite>& sites,
                                     const std::vector<at::Tensor>& a) {
  if (a.size() != sites.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("replay needs %d coefficient tensors, got %d", sites.size(), a.size()));
  }
  for (size_t s = 0; s < a.size(); ++s) {
    const std::vector<int64_t> want = {ids.size(0), ids.size(1), sites[s].channels};
    if (!a[s].defined() || a[s].sizes().vec() != want) {
      return absl::InvalidArgumentError(
          absl::StrFormat("replay coefficients for site '%s' must have shape [%s]", sites[s].name,
                          absl::StrJoin(want, ", ")));
    }
    if (!at::isFloatingType(a[s].scalar_type())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("replay coefficients for site '%s' must be floating point, not %s",
                          sites[s].name, std::string(c10::toString(a[s].scalar_type()))));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckForwardInputs(const at::Tensor& ids, CoefficientMode mode,
                                const std::vector<at::Tensor>* coefficients,
                                const ModelInfo& info, const std::vector<CoefficientSite>& sites,
                                int64_t max_len, int64_t vocab_size) {
  absl::Status st = CheckTokenIds(ids, info, max_len, vocab_size);
  if (!st.ok()) return st;
  if (mode != CoefficientMode::kLive && coefficients == nullptr) {
    return absl::InvalidArgumentError("record and replay need a coefficient list");
  }
  if (mode == CoefficientMode::kReplay) return CheckReplayCoefficients(ids, sites, *coefficients);
  return absl::OkStatus();
}

namespace {

std::atomic<int> g_audit_threads{1};

// glibc serves blocks above its mmap threshold (dynamic, 128 KiB to 32 MiB)
// with fresh mappings and returns them with munmap on free, and trims the
// heap top above 128 KiB: every forward's activations were then mapped,
// page-faulted and unmapped again (an audit of featuregate-s1 spent 21 s of
// 36 in the kernel, 2.5 million minor faults). Activations up to 64 MiB are
// now reused from the heap; larger blocks (a 1.4B model's logits) still get
// their own mapping, and at most 256 MiB of free heap top is kept.
void KeepActivationsInTheHeap() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace

void ConfigureRuntime(const RuntimeOptions& options) {
  static std::once_flag once;
  std::call_once(once, KeepActivationsInTheHeap);
  int n = options.num_threads;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool across = options.parallelism == Parallelism::kAcrossBatches;
  // One intra-op thread: OpenMP (and OpenBLAS, which uses the same OpenMP
  // runtime in the openblas-openmp build) then never forms a team, so no
  // thread spins waiting for work.
  at::set_num_threads(across ? 1 : n);
  g_audit_threads.store(across ? n : 1);
}

at::Tensor LayerNormInFloat(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            double eps) {
  if (x.scalar_type() == at::kFloat) return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  const auto f = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
  return at::layer_norm(f(x), {x.size(-1)}, f(weight), f(bias), eps).to(x.scalar_type());
}

int AuditThreads() { return g_audit_threads.load(); }

int TorchThreads() { return AuditThreads() * at::get_num_threads(); }

std::string TorchVersion() {
  return absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

}  // namespace fca::engine
