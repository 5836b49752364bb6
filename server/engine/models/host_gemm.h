// A float32 projection y = x W^T on the host with the bits libtorch gets from
// OpenBLAS, without OpenBLAS's per-call packing of W. at::linear hands
// OpenBLAS a row-major W, which it transposes into panels on every call; for
// the 180-310-row GEMMs of a mixture of experts that repacking made the
// experts 7-11% slower per FLOP than their dense twin's MLP
// (docs/results/host_gemm.txt). Here W is stored column-major once at load
// (the same logical [out, in] tensor, no extra memory) and an AVX-512 kernel
// reads it in place, 32 outputs by 12 rows at a time.
//
// The bits: OpenBLAS 0.3.21's sgemm sums each output over the input width in
// blocks (driver/level3: blocks of SGEMM_DEFAULT_Q, the last two split in
// halves rounded up to SGEMM_DEFAULT_UNROLL_M), each block a chain of fused
// multiply-adds from 0 in increasing index, the blocks added to the output in
// order: y = ((0 + chain_1) + chain_2) + ... The kernel computes exactly that,
// with the blocking of the kernels OpenBLAS runs here: SkylakeX's (blocks of
// 448, halves to 16), Cooperlake's (the same kernels in blocks of 320, which
// OpenBLAS picks on an AMD EPYC with AVX-512 BF16) or Haswell's (blocks of
// 320, halves to 8, which OPENBLAS_CORETYPE=Haswell selects on any
// processor; these kernels also split the sums of some tiles of 8 outputs by
// 6 or 4 rows in two, by where the tile lies in OpenBLAS's chunks, and the
// kernel recomputes those tiles so). Below 100^3 multiply-adds SkylakeX's and
// Cooperlake's small-matrix kernels run, and the projection goes to
// at::linear on a row-major copy instead. These are OpenBLAS's bits at one
// thread, as an audit's forwards run (one intra-op thread each,
// ConfigureRuntime); threaded, OpenBLAS halves the last blocks otherwise. A
// probe at first use compares the kernel under each rule with at::linear on
// shapes that cover the blocking and the tails and keeps the one that
// matches. On a processor without AVX-512, where the BLAS rounds otherwise
// (other kernels, another library), or in a process that multiplies on
// several intra-op threads (fca-train), none does, HostGemmAvailable() is
// false and the weights stay row-major (host_gemm_test sweeps 1-300 rows;
// ctest engine_haswell_blas_test runs it under Haswell's kernels).
// Torch-free header: tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_HOST_GEMM_H_
#define FCA_SERVER_ENGINE_MODELS_HOST_GEMM_H_

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// Whether the kernel runs here and matched at::linear bitwise on the probe
// (decided once per process).
bool HostGemmAvailable();

// The OpenBLAS kernels whose summation the probe matched ("SkylakeX",
// "Cooperlake", "Haswell"), or "none".
const char* HostGemmSummation();

// w [out, in] -> the same values stored column-major (strides [1, out]), the
// layout HostLinear reads, where the kernel suits it: float32 on the CPU, at
// most 1 MiB (wider weights ran slower than OpenBLAS), HostGemmAvailable();
// else w itself. For inference: at::linear and its gradients take either
// layout, but HostLinear runs outside autograd only.
at::Tensor HostGemmLayout(const at::Tensor& w);

// Whether HostLinear applies to x [..., in] and w: float32 CPU tensors
// outside autograd, w column-major (HostGemmLayout).
bool HostLinearApplies(const at::Tensor& x, const at::Tensor& w);

// x [..., in], w column-major [out, in], bias [out] (or undefined) ->
// x W^T + bias [..., out], with the bits of at::linear(x, w, bias) on the
// row-major w (which adds the bias first for a matrix or a contiguous 3-d x,
// as addmm does, and last otherwise).
at::Tensor HostLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
at::Tensor HostLinear(const at::Tensor& x, const at::Tensor& w);  // no bias

// x W^T (no bias) into `out` [rows, out] float32 (its rows contiguous, e.g. a
// row slice of a larger tensor).
void HostLinearInto(const at::Tensor& x, const at::Tensor& w, const at::Tensor& out);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_HOST_GEMM_H_
