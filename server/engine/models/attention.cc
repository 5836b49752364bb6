#include "server/engine/models/attention.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace fca::engine {
namespace {

// Query rows per block: a multiple of every vector width libtorch's kernels
// use (8 to 32 elements), so each shortened row has whole vectors only.
constexpr int64_t kAttentionQueryBlock = 32;

}  // namespace

bool AttentionByBlocksApplies(int64_t batch, bool on_cpu) {
  return on_cpu && batch > 1 && !at::GradMode::is_enabled();
}

at::Tensor CausalAttentionByBlocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const BlockProbabilities& probabilities) {
  const int64_t T = q.size(2);
  at::Tensor ctx = at::empty({q.size(0), T, q.size(1), q.size(3)}, q.options());
  // k^T copied into a contiguous block, as the plain form's matmul copies it
  // (for more than one window), so that the GEMMs see their operands laid
  // out as there: OpenBLAS runs other kernels, which round otherwise, on a
  // transposed operand of some shapes (float32 at T = 100).
  const at::Tensor kt = k.transpose(-2, -1).contiguous();
  for (int64_t r0 = 0; r0 < T; r0 += kAttentionQueryBlock) {
    const int64_t r1 = std::min(T, r0 + kAttentionQueryBlock);
    at::Tensor scores = at::matmul(q.slice(2, r0, r1), kt.slice(3, 0, r1));
    const at::Tensor p = probabilities(scores, r0, r1);
    ctx.slice(1, r0, r1).copy_(at::matmul(p, v.slice(2, 0, r1)).transpose(1, 2));
  }
  return ctx;
}

}  // namespace fca::engine
