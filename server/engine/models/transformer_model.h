// The `dense` and `featuregate` families: creation, random initialisation and
// loading. Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_TRANSFORMER_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_TRANSFORMER_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_config.h"

namespace fca::engine {

// Names and shapes of every weight of a config, in a fixed order. A
// checkpoint must hold exactly these (no more, no fewer).
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  // A linear layer's weight [out, in], which a family that multiplies by it
  // in HostLinear stores in HostGemmLayout (WithHostGemmLayout).
  bool linear = false;
};
std::vector<WeightSpec> TransformerWeightSpecs(const TransformerConfig& config);

struct InitOptions {
  uint64_t seed = 0;
  double init_std = 0.02;  // normal std of matrices and embeddings
  // Std of the controller's output layer W2. The architecture starts it at 0
  // (every gate exactly 1); tests raise it to get input-dependent gates.
  double controller_out_std = 0.0;
};

// Random float32 weights for `config` (deterministic for a seed).
[[nodiscard]] absl::StatusOr<std::vector<TensorData>> InitTransformerWeights(
    const TransformerConfig& config, const InitOptions& options);

// Writes `dir`/config.json and `dir`/model.safetensors (creating `dir`).
[[nodiscard]] absl::Status WriteTransformerModelDir(const std::string& dir,
                                                    const TransformerConfig& config,
                                                    const std::vector<TensorData>& weights);
// The same with InitTransformerWeights(config, init): a random model folder.
[[nodiscard]] absl::Status WriteRandomTransformerModelDir(const std::string& dir,
                                                          const TransformerConfig& config,
                                                          const InitOptions& init);

// Sets the fields of `info` that follow from `config` (family, vocab_size,
// max_seq_len, num_layers) and returns the coefficient sites of such a model
// in sites() order: attn_gate.l and mlp_gate.l per layer for featuregate,
// none for dense. CreateTransformerModel builds its model from the same, so a
// description from config.json alone agrees with the loaded model.
std::vector<CoefficientSite> DescribeTransformer(const TransformerConfig& config, ModelInfo* info);

// Builds a model from validated config and tensors (checked against
// TransformerWeightSpecs: INVALID_ARGUMENT naming the first bad tensor).
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTransformerModel(
    const TransformerConfig& config, const TensorSource& weights, ModelInfo info);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_TRANSFORMER_MODEL_H_
