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

// experts [N, k] int64 and weights [N, k] float32 (CPU) -> the N * k routed
// rows grouped as HostGroupByExpert groups the slot-major positions
// p = slot * N + token, in one pass: each row's token in `tokens` [N * k],
// its weight in `grouped_weights` [N * k], each expert's count in `count`,
// and in `rows` [N, k] each token's rows, in increasing order (HostCombine).
void HostGroupRoutes(const at::Tensor& experts, const at::Tensor& weights, int64_t num_experts,
                     at::Tensor* tokens, at::Tensor* grouped_weights, at::Tensor* rows,
                     std::vector<int64_t>* count);

// ys [P, D] float32, weights [P] float32 and rows [N, k] (HostGroupRoutes)
// -> out [N, D], out[n] = ((0 + ys[a] * weights[a]) + ys[b] * weights[b]) ...
// over n's rows a < b < ...: what adding each row into a zero tensor in
// increasing row order gives, each row of out written once.
at::Tensor HostCombine(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& rows);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_HOST_H_
