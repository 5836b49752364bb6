// config.json of a `torchscript` model folder (docs/torchscript.md): what the
// server must know about a lab's own TorchScript module before it runs it.
// Torch-free, so the parser is fuzzed and tested without libtorch.
#ifndef FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_CONFIG_H_
#define FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

struct TorchScriptConfig {
  std::string description;  // free text, shown with the model
  int64_t vocab_size = 0;   // logits columns; ids are < vocab_size
  int64_t max_seq_len = 0;  // longest window the module accepts
  int64_t num_layers = 0;   // reported with the model
  // Blocks a token could run (the execution audit's "blocks present");
  // num_layers unless given, e.g. layers x experts for a mixture of experts.
  int64_t blocks_per_token = 0;
  ComputeDType dtype = ComputeDType::kFloat32;  // of the saved module's floating-point weights
  // The coefficient sites, in the order live() returns them; at least one.
  std::vector<CoefficientSite> sites;
};

// Parses and validates config.json text. Every problem is INVALID_ARGUMENT
// starting with "config.json:" and naming the field; sizes are bounded.
[[nodiscard]] absl::StatusOr<TorchScriptConfig> ParseTorchScriptConfig(std::string_view json_text);

// The info a loaded module will report (family "torchscript"), less its
// parameter count and weights hash, and its sites.
std::vector<CoefficientSite> DescribeTorchScript(const TorchScriptConfig& config, ModelInfo* info);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_CONFIG_H_
