// Causal self-attention by blocks of query rows: the CPU form the audit's
// forwards (outside autograd) use in every family, so that a model and its
// dense twin are timed on the same attention code. Torch-free header:
// tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_ATTENTION_H_
#define FCA_SERVER_ENGINE_MODELS_ATTENTION_H_

#include <cstdint>
#include <functional>

namespace at {
class Tensor;
}  // namespace at
namespace c10 {
enum class ScalarType : int8_t;
}  // namespace c10

namespace fca::engine {

// A block's attention probabilities from its raw scores q k^T [B, H, rows,
// keys] (a fresh tensor the function may overwrite) for query rows
// [first, last): the family's scale, causal mask and softmax, in v's dtype.
using BlockProbabilities =
    std::function<at::Tensor(at::Tensor& scores, int64_t first, int64_t last)>;

// The context softmax(scale(q k^T) + causal) v, [B, T, H, hd], for q, k, v
// [B, H, T, hd], computed kAttentionQueryBlock query rows at a time against
// the keys up to the block's last row only. The keys left out are masked for
// every row of the block: in the full product each would add exp(-inf) (or
// exp of the lowest finite value) = 0 to its row's softmax sum, leave its
// maximum, and add 0 * v to the context, so dropping them leaves every sum as
// it was; at T = 128 the blocks compute 10/16 of the full score matrix. The
// bits are the full product's where libtorch's softmax sums a row lane by lane
// in whole vectors and its GEMMs sum each dot product in one order whatever
// the operands' shapes, as on the processors measured (AttentionByBlocksApplies
// probes it; model_test.cc and moe_test.cc check it per family). Not for a batch of one window (its
// plain matmuls read q, k^T and v in place, and OpenBLAS rounds those strided operands otherwise)
// nor off the CPU (cuBLAS picks its algorithm, and so its rounding, by shape).
at::Tensor CausalAttentionByBlocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const BlockProbabilities& probabilities);

// Whether CausalAttentionByBlocks applies to a forward of `batch` windows of
// `dtype` on `on_cpu` outside autograd (the backward needs the plain form's
// tensors): where a probe at first use finds that the blocks keep the plain
// form's bits in that dtype.
bool AttentionByBlocksApplies(int64_t batch, bool on_cpu, c10::ScalarType dtype);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_ATTENTION_H_
