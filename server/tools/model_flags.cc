#include "server/tools/model_flags.h"

#include <cstdint>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

// Optional: unset means the tool's shape (its usage line says which).
ABSL_FLAG(std::optional<std::string>, family, std::nullopt,
          "dense | featuregate (fca-local-audit init also muddpythia, the 1.4B's switches: "
          "--d_ff is its intermediate_size, --max_seq_len its block_size; fca-train also "
          "olmoe, whose shape is --d_model, --n_layers, --n_heads and fca-train's MoE flags)");
ABSL_FLAG(std::optional<int64_t>, d_model, std::nullopt, "width");
ABSL_FLAG(std::optional<int64_t>, n_layers, std::nullopt, "depth");
ABSL_FLAG(std::optional<int64_t>, n_heads, std::nullopt, "attention heads");
ABSL_FLAG(std::optional<int64_t>, n_groups, std::nullopt, "gate groups G per branch");
ABSL_FLAG(std::optional<int64_t>, d_ff, std::nullopt, "MLP width");
ABSL_FLAG(std::optional<int64_t>, controller_width, std::nullopt, "controller hidden width");

namespace fca::tools {
namespace {

template <typename T>
void Override(const absl::Flag<std::optional<T>>& flag, T* value) {
  if (std::optional<T> given = absl::GetFlag(flag)) *value = *given;
}

}  // namespace

engine::TransformerConfig ModelConfigFromFlags(const engine::TransformerConfig& defaults) {
  engine::TransformerConfig c = defaults;
  Override(FLAGS_family, &c.family);
  Override(FLAGS_d_model, &c.d_model);
  Override(FLAGS_n_layers, &c.n_layers);
  Override(FLAGS_n_heads, &c.n_heads);
  Override(FLAGS_n_groups, &c.n_groups);
  Override(FLAGS_d_ff, &c.d_ff);
  Override(FLAGS_controller_width, &c.controller_width);
  return c;
}

std::string ModelShapeText(const engine::TransformerConfig& s) {
  return absl::StrFormat(
      "%s d_model=%d n_layers=%d n_heads=%d n_groups=%d d_ff=%d controller_width=%d", s.family,
      s.d_model, s.n_layers, s.n_heads, s.n_groups, s.d_ff, s.controller_width);
}

bool DefinesModelFlags(absl::string_view file) {
  return absl::EndsWith(file, "server/tools/model_flags.cc");
}

}  // namespace fca::tools
