#include "server/engine/models/attention.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// Query rows per block: a multiple of every vector width libtorch's kernels
// use (8 to 32 elements), so each shortened row has whole vectors only.
constexpr int64_t kAttentionQueryBlock = 32;

// Whether the blocks give the plain form's bits in `dtype` here, on random
// inputs of several blocks and a part block (T = 100), laid out as the
// families' attention has them: q, k and v views of one projection [B, T, 3,
// H, hd], which the plain form's matmuls copy and the blocks read after one
// copy. They do where the GEMMs sum each dot product in one order whatever
// the operands' shapes; an OpenBLAS whose kernels split some tiles' sums in
// two (Haswell's, which OPENBLAS_CORETYPE=Haswell selects) rounds a
// shortened block otherwise.
bool BlocksKeepTheBits(at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20261206);
  const int64_t B = 2, H = 2, T = 100, hd = 32;
  const at::Tensor qkv = at::randn({B, T, 3, H, hd}, gen).to(dtype).permute({2, 0, 3, 1, 4});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor causal =
      at::full({T, T}, -std::numeric_limits<double>::infinity(), qkv.options()).triu(1);
  at::Tensor scores = at::matmul(qkv[0], qkv[1].transpose(-2, -1));
  ScaleInPlace(scores, scale).add_(causal);
  const at::Tensor plain = at::matmul(at::softmax(scores, -1), qkv[2]).transpose(1, 2);
  const at::Tensor packed = qkv.contiguous();
  const at::Tensor blocks = CausalAttentionByBlocks(
      packed[0], packed[1], packed[2], [&](at::Tensor& s, int64_t r0, int64_t r1) {
        return at::softmax(ScaleInPlace(s, scale).add_(causal.slice(0, r0, r1).slice(1, 0, r1)),
                           -1);
      });
  return at::equal(blocks, plain);
}

}  // namespace

bool AttentionByBlocksApplies(int64_t batch, bool on_cpu, at::ScalarType dtype) {
  if (!on_cpu || batch <= 1 || at::GradMode::is_enabled()) return false;
  static const bool float_blocks = BlocksKeepTheBits(at::kFloat);
  static const bool bfloat16_blocks = BlocksKeepTheBits(at::kBFloat16);
  if (dtype == at::kFloat) return float_blocks;
  return dtype == at::kBFloat16 && bfloat16_blocks;
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
