// Random checkpoints of the mixture-of-experts families (olmoe, qwen2_moe,
// mixtral) in MoeWeightSpecs order, and the Hugging Face folders they are
// written to: fca-train starts from them, and tests and the OLMoE-1B-7B bench
// build models from them. Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_MOE_INIT_H_
#define FCA_SERVER_ENGINE_MODELS_MOE_INIT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/transformer_model.h"  // InitOptions

namespace fca::engine {

// Random weights for `config` in MoeWeightSpecs order, float32: normal(0,
// init_std) for embeddings and projections (router included), ones for the
// RMSNorm weights, zeros for biases; deterministic in options.seed.
[[nodiscard]] absl::StatusOr<std::vector<TensorData>> InitMoeWeights(const MoeConfig& config,
                                                                     const InitOptions& options);

// Writes `dir`/config.json (MoeConfigToJson) and `dir`/model.safetensors
// (creating `dir`): a Hugging Face folder the loader reads back.
[[nodiscard]] absl::Status WriteMoeModelDir(const std::string& dir, const MoeConfig& config,
                                            const std::vector<TensorData>& weights);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_INIT_H_
