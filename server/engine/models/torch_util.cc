#include "server/engine/models/torch_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>  // setTensorExprFuserEnabled
#include <torch/cuda.h>     // torch::cuda::is_available, synchronize (declarations only)
#include <torch/version.h>  // TORCH_VERSION_*

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace fca::engine {
at::ScalarType ScalarTypeOf(ComputeDType dtype) {
  // No default: every dtype of FCA_COMPUTE_DTYPES has its case.
  switch (dtype) {
    case ComputeDType::kFloat32:
      return at::kFloat;
    case ComputeDType::kBFloat16:
      return at::kBFloat16;
    case ComputeDType::kFloat16:
      return at::kHalf;
  }
  return at::kFloat;
}

namespace {

absl::StatusOr<at::ScalarType> ViewDType(DType d) {
  switch (d) {
    case DType::kF32:
      return at::kFloat;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF64:
      return at::kDouble;
    default:
      return absl::InvalidArgumentError(absl::StrCat("dtype ", std::string(DTypeName(d)),
                                                     " is not a floating-point weight type"));
  }
}

// c10's alignment of CPU tensors, which vectorized kernels may rely on.
constexpr size_t kTensorAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Anonymous memory for a model's weights, aligned to a huge page so that
// all of it can be backed by huge pages.
class HostBlock {
 public:
  static absl::StatusOr<std::shared_ptr<HostBlock>> Allocate(size_t bytes);
  ~HostBlock() { ::munmap(data_, size_); }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  uint8_t* data() const { return data_; }

 private:
  HostBlock(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

absl::StatusOr<std::shared_ptr<HostBlock>> HostBlock::Allocate(size_t bytes) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1), kHugePage);
  // One huge page more than needed, so that an aligned start exists; the
  // slack on either side goes back at once.
  void* raw =
      ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map %d bytes for the weights: %s", size, std::strerror(errno)));
  }
  auto* begin = static_cast<uint8_t*>(raw);
  auto* data = reinterpret_cast<uint8_t*>(RoundUp(reinterpret_cast<uintptr_t>(begin), kHugePage));
  if (data > begin) ::munmap(begin, data - begin);
  if (begin + kHugePage > data) ::munmap(data + size, begin + kHugePage - data);
  std::shared_ptr<HostBlock> block(new HostBlock(data, size));
  // Hints: refused (EINVAL) by kernels without transparent huge pages or
  // older than 5.14; the block then fills page by page as it is written.
  ::madvise(data, size, MADV_HUGEPAGE);
  if (::madvise(data, size, MADV_POPULATE_WRITE) != 0 && errno == ENOMEM) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("not enough memory for the weights (%d bytes)", size));
  }
  return block;
}

absl::StatusOr<at::ScalarType> CheckedViewDType(const TensorView& view) {
  auto dtype = ViewDType(view.dtype);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", view.name, "': ", dtype.status().message()));
  }
  return dtype;
}

// LoadTensors on a device other than the CPU: through host memory, one
// tensor at a time, dropping each one's mapped pages once copied.
absl::StatusOr<std::vector<at::Tensor>> LoadTensorsViaHost(const TensorSource& src,
                                                           const std::vector<TensorView>& views,
                                                           const ComputeOptions& compute) {
  std::vector<at::Tensor> out;
  for (const TensorView& view : views) {
    absl::StatusOr<at::Tensor> t = TensorFromView(view, compute);
    src.ReleasePages(view);
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  return out;
}

}  // namespace

absl::Status ValidateCompute(const ComputeOptions& compute) {
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
  if (compute.dtype == ComputeDType::kFloat16 && compute.device == "cpu") {
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
  const at::ScalarType dst = ScalarTypeOf(compute.dtype);
  return GuardTorch("loading tensor '" + view.name + "'", [&]() -> absl::StatusOr<at::Tensor> {
    // Copy the (possibly unaligned) mapped bytes first: the mapping must not
    // be aliased by a tensor that outlives it.
    at::Tensor host = at::empty(view.shape, at::TensorOptions().dtype(*src));
    if (view.num_bytes > 0) std::memcpy(host.data_ptr(), view.data, view.num_bytes);
    return host.to(at::TensorOptions().dtype(dst).device(c10::Device(compute.device)));
  });
}

absl::StatusOr<std::vector<at::Tensor>> LoadTensors(const TensorSource& src,
                                                    const std::vector<TensorView>& views,
                                                    const ComputeOptions& compute) {
  const bool on_cpu = [&] {
    try {
      return c10::Device(compute.device).is_cpu();
    } catch (const std::exception&) {
      return false;  // TensorFromView reports the bad name
    }
  }();
  if (!on_cpu) return LoadTensorsViaHost(src, views, compute);
  const at::ScalarType dst = ScalarTypeOf(compute.dtype);
  const size_t element_bytes = c10::elementSize(dst);
  std::vector<size_t> offsets;
  size_t total = 0, scratch_bytes = 0;
  for (const TensorView& view : views) {
    FCA_ASSIGN_OR_RETURN(const at::ScalarType stored, CheckedViewDType(view));
    offsets.push_back(total);
    total += RoundUp(static_cast<size_t>(view.numel()) * element_bytes, kTensorAlignment);
    if (stored != dst) scratch_bytes = std::max(scratch_bytes, view.num_bytes);
  }
  FCA_ASSIGN_OR_RETURN(std::shared_ptr<HostBlock> block, HostBlock::Allocate(total));
  return GuardTorch("loading weights", [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
    // Views stored in another dtype are read here, then converted into place.
    const at::Tensor scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, at::kByte);
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < views.size(); ++i) {
      const TensorView& view = views[i];
      uint8_t* data = block->data() + offsets[i];
      // Each tensor keeps the block alive; the last one frees it.
      at::Tensor t = at::from_blob(
          data, view.shape, [block](void*) {}, at::TensorOptions(dst));
      const at::ScalarType stored = *ViewDType(view.dtype);
      if (stored == dst) {
        FCA_RETURN_IF_ERROR(src.ReadInto(view, data));
      } else {
        FCA_RETURN_IF_ERROR(src.ReadInto(view, scratch.data_ptr()));
        t.copy_(at::from_blob(scratch.data_ptr(), view.shape, at::TensorOptions(stored)));
      }
      out.push_back(std::move(t));
    }
    return out;
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

absl::Status CheckReplayCoefficients(const at::Tensor& ids,
                                     const std::vector<CoefficientSite>& sites,
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
                                const std::vector<at::Tensor>* coefficients, const ModelInfo& info,
                                const std::vector<CoefficientSite>& sites, int64_t max_len,
                                int64_t vocab_size) {
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

// OpenBLAS picks its kernels by the processor's model number, and Debian 12's
// 0.3.21 does not know processors newer than it (an Intel Xeon of model 207,
// Emerald Rapids, with AVX-512 and AMX): it then runs its generic SSE3
// "Prescott" kernels. A float32 audit of featuregate-s1 spent 81% of its
// time in sgemm_kernel_PRESCOTT and took 3.2x as long as with the AVX-512
// kernels (bench/audit_vs_eager.sh). When OpenBLAS chose Prescott on a
// processor with AVX-512 (or AVX2 and FMA) and OPENBLAS_CORETYPE is unset,
// the kernels are chosen again as if OPENBLAS_CORETYPE named them. float32
// results then round as the AVX-512 kernels do (docs/fca.md, "Numerics").
// Looked up at run time: a libtorch on another BLAS has no such symbols.
const char* BlasCoreForThisProcessor() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SKYLAKEX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "HASWELL";
  return nullptr;
}

void UseThisProcessorsBlasKernels() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  using CoreName = const char* (*)();
  using Hook = void (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const auto quit = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  const auto init = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (core_name == nullptr || quit == nullptr || init == nullptr) return;
  if (std::strcmp(core_name(), "Prescott") != 0) return;
  const char* core = BlasCoreForThisProcessor();
  if (core == nullptr) return;
  // Child processes (workers) inherit the choice and make it at their start.
  setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
  quit();
  init();
}

}  // namespace

void ConfigureRuntime(const RuntimeOptions& options) {
  static std::once_flag once;
  std::call_once(once, [] {
    KeepActivationsInTheHeap();
    UseThisProcessorsBlasKernels();
  });
  int n = options.num_threads;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool across = options.parallelism == Parallelism::kAcrossBatches;
  // One intra-op thread: OpenMP (and OpenBLAS, which uses the same OpenMP
  // runtime in the openblas-openmp build) then never forms a team, so no
  // thread spins waiting for work.
  at::set_num_threads(across ? 1 : n);
  g_audit_threads.store(across ? n : 1);
}

void KeepTorchScriptUnfused() {
  // Once: the flag is a plain global, which concurrent loads would write.
  static const bool unfused = [] {
    torch::jit::setTensorExprFuserEnabled(false);
    return true;
  }();
  (void)unfused;
}

at::Tensor LayerNormInFloat(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            double eps) {
  if (x.scalar_type() == at::kFloat) return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  const auto f = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
  return at::layer_norm(f(x), {x.size(-1)}, f(weight), f(bias), eps).to(x.scalar_type());
}

at::Tensor& ScaleInPlace(at::Tensor& x, double s) {
  return x.mul_(at::scalar_tensor(s, at::TensorOptions().dtype(at::kDouble)));
}

int AuditThreads() { return g_audit_threads.load(); }

std::string BlasKernels() {
  using CoreName = const char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return core_name == nullptr ? "" : core_name();
}

int TorchThreads() { return AuditThreads() * at::get_num_threads(); }

std::string TorchVersion() {
  return absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH);
}

int TorchMajorVersion() { return TORCH_VERSION_MAJOR; }

bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr ||
      dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return true;
  }
  const char* text = e.what();
  if (text == nullptr) return false;
  // The caching allocator's "CUDA out of memory. Tried to allocate ...", a
  // kernel's "CUDA error: out of memory", cuBLAS's failed workspace, and
  // the CPU allocator's "DefaultCPUAllocator: not enough memory".
  for (const char* needle : {"CUDA out of memory", "CUDA error: out of memory",
                             "CUBLAS_STATUS_ALLOC_FAILED", "not enough memory"}) {
    if (std::strstr(text, needle) != nullptr) return true;
  }
  return false;
}

absl::Status TorchFailure(const std::string& what, const std::exception& e) {
  LogError(absl::StrCat(what, " failed: ", e.what()));
  // Out of memory is the device's state, not the request's: another device
  // (a worker with more memory) may run it.
  if (IsOutOfMemory(e)) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " ran out of memory"));
  }
  return absl::InternalError(absl::StrCat(what, " failed (see the server log)"));
}

bool IsCpuDevice(const std::string& device) {
  try {
    return c10::Device(device).is_cpu();
  } catch (const std::exception&) {
    return false;
  }
}

void SynchronizeDevice(const std::string& device) {
  const c10::Device d(device);
  if (d.is_cuda()) torch::cuda::synchronize(d.has_index() ? d.index() : -1);
}

namespace {

// libtorch's CPU headers have no call for a GPU's name (at::cuda's
// getDeviceProperties needs the CUDA headers, which a CPU build of the
// engine lacks), so the name comes from the driver: nvidia-smi first, then
// /proc/driver/nvidia. Both number GPUs in PCI order, CUDA by default
// fastest first (CUDA_DEVICE_ORDER): the two agree on a machine of one kind
// of GPU, the case that matters for a name. CUDA_VISIBLE_DEVICES' entries
// (indices or UUIDs) are what nvidia-smi -i takes.
std::string NvidiaSmiName(const std::string& id) {
  absl::StatusOr<CommandOutput> out =
      RunCommand({"nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", id}, 5000);
  if (!out.ok() || out->exit_code != 0) return "";
  const std::vector<std::string> lines = absl::StrSplit(out->out, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(absl::StripAsciiWhitespace(lines[0]));
}

// The "Model:" line of the index-th GPU under /proc/driver/nvidia/gpus
// (one folder per PCI address, in PCI order when sorted).
std::string ProcGpuName(int index) {
  std::error_code ec;
  std::vector<std::filesystem::path> gpus;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    gpus.push_back(entry.path());
  }
  std::sort(gpus.begin(), gpus.end());
  if (index < 0 || index >= static_cast<int>(gpus.size())) return "";
  std::ifstream in(gpus[index] / "information");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Model:")) return std::string(absl::StripAsciiWhitespace(rest));
  }
  return "";
}

std::string CudaDeviceName(int index) {
  std::string id = std::to_string(index);
  bool renumbered = false;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    const std::vector<std::string> ids = absl::StrSplit(visible, ',', absl::SkipWhitespace());
    if (index >= static_cast<int>(ids.size())) return "unknown CUDA device";
    id = std::string(absl::StripAsciiWhitespace(ids[index]));
    renumbered = true;
  }
  std::string name = NvidiaSmiName(id);
  // /proc numbers every GPU of the machine, so it serves only when CUDA
  // does too.
  if (name.empty() && !renumbered) name = ProcGpuName(index);
  return name.empty() ? "unknown CUDA device" : name;
}

}  // namespace

std::string DeviceName(const std::string& device) {
  c10::Device d(c10::kCPU);
  try {
    d = c10::Device(device);
  } catch (const std::exception&) {
    return device;
  }
  if (d.is_cpu()) return "cpu";
  if (!d.is_cuda()) return d.str();
  // Asked once per task; the driver is asked once per GPU and process.
  static absl::Mutex mu(absl::kConstInit);
  static auto* names = new std::map<int, std::string>();
  const int index = d.has_index() ? d.index() : 0;
  absl::MutexLock lock(&mu);
  auto it = names->find(index);
  if (it == names->end()) it = names->emplace(index, CudaDeviceName(index)).first;
  return it->second;
}

namespace {

std::vector<at::Tensor> PackedTo(const std::vector<at::Tensor>& tensors, const c10::Device& to) {
  if (tensors.empty()) return tensors;
  bool there = true, uniform = true;
  for (const at::Tensor& t : tensors) {
    there = there && t.device() == to;
    uniform =
        uniform && t.device() == tensors[0].device() && t.scalar_type() == tensors[0].scalar_type();
  }
  if (there) return tensors;
  // Pinned host memory exists only with CUDA (asking for it without throws).
  const bool async = to.is_cuda() && tensors[0].is_cpu();
  if (!uniform) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : tensors) out.push_back(t.to(to));
    return out;
  }
  std::vector<at::Tensor> flat;
  std::vector<int64_t> numels;
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    flat.push_back(t.reshape(-1));
    numels.push_back(t.numel());
    total += t.numel();
  }
  at::Tensor packed;
  if (async) {
    packed = at::empty({total}, tensors[0].options().pinned_memory(true));
    at::cat_out(packed, flat);
  } else {
    packed = at::cat(flat);
  }
  // From pinned memory the copy is queued on the current stream; torch's
  // host allocator keeps the buffer until the copy has run.
  const at::Tensor copy = packed.to(to, /*non_blocking=*/async);
  const std::vector<at::Tensor> parts = copy.split_with_sizes(numels);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) out.push_back(parts[i].view(tensors[i].sizes()));
  return out;
}

}  // namespace

std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors) {
  return PackedTo(tensors, c10::Device(c10::kCPU));
}

std::vector<at::Tensor> ToDevice(const std::vector<at::Tensor>& tensors,
                                 const std::string& device) {
  return PackedTo(tensors, c10::Device(device));
}

}  // namespace fca::engine
