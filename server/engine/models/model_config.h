// config.json of a model folder, for the `dense` and `featuregate` families.
#ifndef FCA_SERVER_ENGINE_MODELS_MODEL_CONFIG_H_
#define FCA_SERVER_ENGINE_MODELS_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace fca::engine {

// A pre-LN decoder-only transformer with learned positions. `featuregate`
// adds a controller per block producing 2 * n_groups gates (see
// architecture.md); `dense` is the same network without controllers.
struct TransformerConfig {
  std::string family = "featuregate";  // "dense" | "featuregate"
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_groups = 8;           // G: gate groups per branch (featuregate)
  int64_t d_ff = 512;             // MLP hidden width
  int64_t controller_width = 64;  // controller hidden width (featuregate)
  int64_t vocab_size = 256;
  int64_t max_seq_len = 256;  // rows of the position embedding
  double norm_eps = 1e-5;

  bool has_controller() const { return family == "featuregate"; }
};

// INVALID_ARGUMENT "config.json: <what>": the form of every family's config
// errors.
[[nodiscard]] absl::Status InvalidConfig(absl::string_view what);

// Parses and validates config.json text. Every problem is INVALID_ARGUMENT
// starting with "config.json:" and naming the field. Sizes are bounded so a
// hostile config cannot make the server allocate absurd amounts of memory.
[[nodiscard]] absl::StatusOr<TransformerConfig> ParseTransformerConfig(std::string_view json_text);
[[nodiscard]] absl::Status ValidateTransformerConfig(const TransformerConfig& c);
json::Value TransformerConfigToJson(const TransformerConfig& c);

// The model family named by a config.json ("model_type"), without full
// validation; INVALID_ARGUMENT when it is not JSON or has no model_type.
[[nodiscard]] absl::StatusOr<std::string> ReadModelFamily(std::string_view json_text);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MODEL_CONFIG_H_
