// Small helpers shared by the engine's torch code, and the process's torch
// runtime settings (torch_util.cc). Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_TORCH_UTIL_H_
#define FCA_SERVER_ENGINE_MODELS_TORCH_UTIL_H_

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"

namespace c10 {
enum class ScalarType : int8_t;  // c10/core/ScalarType.h, which this header keeps out
}  // namespace c10

namespace fca::engine {

// The torch dtype of a compute dtype.
c10::ScalarType ScalarTypeOf(ComputeDType dtype);

// Validates a ComputeOptions (a parseable device that supports the dtype);
// INVALID_ARGUMENT otherwise. UNAVAILABLE when the device is CUDA and none is present.
[[nodiscard]] absl::Status ValidateCompute(const ComputeOptions& compute);

// Copies a safetensors view into a new tensor of the compute dtype/device.
// Only floating-point views are accepted.
[[nodiscard]] absl::StatusOr<at::Tensor> TensorFromView(const TensorView& view,
                                                        const ComputeOptions& compute);

// A model's weights: the tensors `views` of `src` (floating-point, as for
// TensorFromView) copied into new tensors of the compute dtype and device,
// in order.
//
// On the CPU the tensors share one block of memory the size of their sum,
// filled straight from the files (TensorSource::ReadInto) and freed with the
// last of them, so a model costs its weights once in RSS (plus, when a view
// must be converted to the compute dtype, the largest such view while it
// is). The block asks the kernel for transparent huge pages and for all its
// page tables at once (MADV_HUGEPAGE, MADV_POPULATE_WRITE; hints, ignored
// where unsupported): page faults, about 7e5 for 2.8 GB of 4 KiB pages,
// took most of the time of copying a large model here. RESOURCE_EXHAUSTED when the
// block cannot be had. Elsewhere (CUDA) each tensor goes through host
// memory, as TensorFromView.
[[nodiscard]] absl::StatusOr<std::vector<at::Tensor>> LoadTensors(
    const TensorSource& src, const std::vector<TensorView>& views, const ComputeOptions& compute);

// The input checks every family's Forward makes, with messages naming the
// model. INVALID_ARGUMENT unless `ids` is int64 [B >= 1, 1 <= T <= max_len]
// with every id in [0, vocab_size).
[[nodiscard]] absl::Status CheckTokenIds(const at::Tensor& ids, const ModelInfo& info,
                                         int64_t max_len, int64_t vocab_size);
// INVALID_ARGUMENT unless `a` holds one floating-point [B, T, d_s] tensor per
// site, in sites order (B and T from `ids`).
[[nodiscard]] absl::Status CheckReplayCoefficients(const at::Tensor& ids,
                                                   const std::vector<CoefficientSite>& sites,
                                                   const std::vector<at::Tensor>& a);
// What ControlledModel::Forward promises to refuse: bad ids, a missing
// coefficient list for record/replay, and replay coefficients of the wrong
// number or shape.
[[nodiscard]] absl::Status CheckForwardInputs(const at::Tensor& ids, CoefficientMode mode,
                                              const std::vector<at::Tensor>* coefficients,
                                              const ModelInfo& info,
                                              const std::vector<CoefficientSite>& sites,
                                              int64_t max_len, int64_t vocab_size);

// The counters of a model whose Forward may run on several threads at once:
// each call counts into its own ExecutionCounters and adds them here.
class SharedCounters {
 public:
  void Add(const ExecutionCounters& c) {
    absl::MutexLock lock(&mu_);
    total_ += c;
  }
  ExecutionCounters Get() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }
  void Reset() {
    absl::MutexLock lock(&mu_);
    total_ = ExecutionCounters();
  }

 private:
  mutable absl::Mutex mu_;
  ExecutionCounters total_ ABSL_GUARDED_BY(mu_);
};

// layer_norm over the last dimension, computed in float32 and returned in
// x's dtype: libtorch 1.13's bfloat16 layer_norm on CPU is ~15x slower than
// the float32 one on a model's activations (2.3 ms against 0.15 ms for
// [8, 128, 192]), which made it most of a bfloat16 forward.
at::Tensor LayerNormInFloat(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            double eps);

// x *= s in place, with the bits of x * s on either libtorch line. 2.x's
// mul_ with a Scalar rounds s to bfloat16 on a bfloat16 x, where x * s keeps
// it in float (1.13 rounds both); a 0-dim double tensor takes the path of
// x * s on both.
at::Tensor& ScaleInPlace(at::Tensor& x, double s);

// Whether `mode` runs the controller and hands its coefficients back.
inline bool Records(CoefficientMode mode) {
  return mode == CoefficientMode::kLiveRecord || mode == CoefficientMode::kRecordOnly;
}

// Whether `e` says that memory ran out: c10::OutOfMemoryError (torch's
// allocators), std::bad_alloc, or a message of CUDA's or torch's that says
// so. The text matters because a TorchScript module's interpreter rethrows
// torch's errors as std::runtime_error carrying their message only, and
// cuBLAS reports a failed allocation as a status, not as a torch type.
bool IsOutOfMemory(const std::exception& e);

// The status GuardTorch returns for an exception `e` thrown while doing
// `what`: INTERNAL "<what> failed (see the server log)", or
// RESOURCE_EXHAUSTED "<what> ran out of memory" when IsOutOfMemory(e) (the
// worker's state: server/runtime/worker.h refuses the task rather than
// failing it). The full text of
// e.what() (torch's message, its source paths and C++ frames) is logged as
// an ERROR naming `what`, and kept out of the status, which reaches clients.
[[nodiscard]] absl::Status TorchFailure(const std::string& what, const std::exception& e);

// Runs `fn` (returning absl::Status or StatusOr) and turns any exception
// thrown by torch into TorchFailure(what, e), so no exception crosses a
// library boundary.
template <typename Fn>
[[nodiscard]] auto GuardTorch(const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return TorchFailure(what, e);
  }
}

// ------------------------------------------------------------------ devices
//
// Where tensors live (docs/architecture.md, "Where tensors live"): a model's
// weights and activations on its compute device; recorded coefficients, the
// coefficient cache, the audit's stores and statistics on the host, moved in
// one packed transfer per batch each way.

// Whether `device` ("cpu", "cuda:0") names the CPU; false for a name torch
// cannot parse.
bool IsCpuDevice(const std::string& device);

// Waits until `device` has finished the work queued on it: a no-op on the
// CPU, whose operators return when done; on CUDA, whose kernels run
// asynchronously, what a clock around a forward needs. Throws what torch
// throws (a CUDA error of an earlier kernel surfaces here).
void SynchronizeDevice(const std::string& device);

// The name recorded with results: "cpu" for the CPU, the GPU's name for a
// CUDA device ("NVIDIA H100 80GB HBM3"; "unknown CUDA device" when nothing
// says), else the device string.
std::string DeviceName(const std::string& device);

// `tensors` (each of any shape) on the host / on `device`, in one copy
// when they share a dtype and a device: packed into one flat buffer (in
// pinned host memory when going to CUDA, so the copy is asynchronous on the
// current stream and needs no synchronisation), copied, and split back into
// views of the copy. Tensors already there come back as they are (no copy);
// tensors of mixed dtypes or devices are moved one by one. ToHost waits for
// its copy: its result is read at once.
std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors);
std::vector<at::Tensor> ToDevice(const std::vector<at::Tensor>& tensors, const std::string& device);

// ------------------------------------------------- the process's torch runtime

// How a process spends its cores on torch.
enum class Parallelism {
  // Inference (the audit): independent batches run at once, each forward on
  // one thread. A small model's operators are too short to split across
  // threads without the threads waiting on each other (and spinning, which
  // on a shared machine costs a busy neighbour's time).
  kAcrossBatches,
  // Training: one forward/backward at a time, each operator split across
  // the threads (torch intra-op parallelism).
  kWithinOps,
};

// Process-wide settings; call at start-up and from each worker thread
// before it audits. Also keeps glibc from returning activation-sized blocks
// to the kernel after every forward (torch_util.cc says why).
struct RuntimeOptions {
  int num_threads = 0;  // cores to compute on; 0: one per hardware core
  Parallelism parallelism = Parallelism::kAcrossBatches;
};
void ConfigureRuntime(const RuntimeOptions& options);
// Turns TorchScript's TensorExpr fuser off, so that a module's elementwise
// ops run unfused, as in its Python code. From libtorch 2.x the profiling
// executor fuses them on the CPU too, from a module's third call on, and
// the fused kernels round otherwise: one window's logits would change from
// call to call and with the batch around it. Process-wide, set once; called
// before each load.
void KeepTorchScriptUnfused();
// "1.13.1": recorded with results.
std::string TorchVersion();
// The libtorch line fca is built with: 1 (Debian 12's 1.13) or 2 (2.x).
int TorchMajorVersion();
// Threads an audit computes on: concurrent forwards times torch intra-op
// threads of the calling thread (set by ConfigureRuntime).
int TorchThreads();
// Forwards an audit runs at once (kAcrossBatches: num_threads; else 1).
int AuditThreads();
// The kernels OpenBLAS runs ("SkylakeX"; ConfigureRuntime may choose them
// again, torch_util.cc says why); "" when libtorch's BLAS is not OpenBLAS.
std::string BlasKernels();

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_TORCH_UTIL_H_
