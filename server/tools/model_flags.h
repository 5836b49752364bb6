// The model-shape flags of the tools that write model folders
// (fca-local-audit init, fca-train train), defined once here: --family,
// --d_model, --n_layers, --n_heads, --n_groups, --d_ff, --controller_width.
// Each tool keeps its own shape for the flags it is not given (a small
// random folder, the bundled models' shape), so a flag left out, or given
// empty (--d_model=), takes the tool's value.
#ifndef FCA_SERVER_TOOLS_MODEL_FLAGS_H_
#define FCA_SERVER_TOOLS_MODEL_FLAGS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "server/engine/models/model_config.h"

namespace fca::tools {

// `defaults` with every model-shape flag that was given put in.
engine::TransformerConfig ModelConfigFromFlags(const engine::TransformerConfig& defaults);

// "featuregate d_model=192 n_layers=4 ...": a tool's shape in its usage
// text, so --help says what an unset flag means.
std::string ModelShapeText(const engine::TransformerConfig& shape);

// True for the source file that defines the flags: a tool's --help filter
// (ConfigureFlagsUsage) lists them with its own.
bool DefinesModelFlags(absl::string_view file);

}  // namespace fca::tools

#endif  // FCA_SERVER_TOOLS_MODEL_FLAGS_H_
