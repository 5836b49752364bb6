// The mixture-of-experts forward's loops over the host's memory: on the CPU
// MoeNet runs its top-k and grouping by expert here, and in float32 outside
// autograd its rotary embedding and weighted combine, instead of as torch
// kernels (which dispatch per row or take several passes over small tensors:
// 11% of olmoe-s1's forward). In bfloat16 the loops measured no faster than
// torch's vectorised conversions (bench: 0.7-1.4x), so torch runs them. Each computes what the
// torch path computes, with each product and sum rounded to the dtype as the kernels round them
// (this unit is compiled without contracted multiply-adds), so the logits are bitwise the same
// either way (moe_test: HostLoopsRoundAsTheTorchKernels). Torch-free header: tensors are
// forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_MOE_HOST_H_
#define FCA_SERVER_ENGINE_MODELS_MOE_HOST_H_

#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// Whether the rotary and combine loops apply to `t`: a contiguous float32
// CPU tensor, outside autograd (the loops record no gradient).
bool HostLoopsApply(const at::Tensor& t);

// The experts of each row of `probs` [N, E] float32 (CPU) that a stable
// descending sort puts first: [N, k] int64, largest first, ties to the lower
// expert index, NaN before any number (as torch's sort).
at::Tensor HostTopKExperts(const at::Tensor& probs, int64_t k);

// flat [P] int64 expert ids (CPU) -> the positions 0..P-1 stably sorted by
// expert (a counting sort), and each of the E experts' count in `count`.
at::Tensor HostGroupByExpert(const at::Tensor& flat, int64_t num_experts,
                             std::vector<int64_t>* count);

// x [B, T, heads, hd] float32 -> x * cos + cat(x2, x1) * sin_signed, cos
// and sin_signed [1, T, 1, hd] float32.
at::Tensor HostRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin_signed);

// ys [P, D] float32 -> out [N, D], out[tokens[p]] += ys[p] * weights[p] for
// p in increasing order, starting from zeros.
at::Tensor HostCombine(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& tokens,
                       int64_t num_tokens);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_HOST_H_
