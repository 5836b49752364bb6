// The mixture-of-experts families read from Hugging Face folders: `olmoe` and
// `qwen2_moe` (docs/moe.md). A decoder of RMSNorm, rotary attention and a
// sparse MoE MLP per layer whose router is the controller: its probabilities
// (after the softmax, before the top-k) are the coefficient sites
// "router.<layer>" with one channel per expert, kept in float32 whatever the
// compute dtype; Qwen's shared-expert gate is a second site
// "shared_gate.<layer>" of one channel. Only the routed experts run: tokens
// are grouped per expert and each expert runs over its tokens at once.
// Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_MOE_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_MOE_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/moe_net.h"  // MoeWeightSpecs

namespace fca::engine {

// Sets the fields of `info` that follow from `config` and returns the sites
// in sites() order: router.l (and shared_gate.l for qwen2_moe) per layer.
std::vector<CoefficientSite> DescribeMoe(const MoeConfig& config, ModelInfo* info);

// Builds a model from a parsed config and a checkpoint (F32 or BF16 tensors,
// exactly MoeWeightSpecs). INVALID_ARGUMENT naming the first missing, extra,
// mistyped or misshapen tensor; compute in float32 or bfloat16.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> CreateMoeModel(
    const MoeConfig& config, const TensorSource& weights, ModelInfo info);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_MODEL_H_
