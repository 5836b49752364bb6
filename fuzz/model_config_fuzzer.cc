// Fuzzes the config.json parsers of model folders (server/engine/models:
// dense/featuregate, torchscript, olmoe/qwen2_moe), which read files a user
// supplies. A config that parses must satisfy what its loader relies on: sizes
// in their ranges, torchscript sites non-empty with unique names and layers
// below num_layers; a transformer config must validate and survive its own
// JSON; an MoE config has 1 <= top-k <= experts and heads that divide.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/torchscript_config.h"

namespace {

void CheckTorchScript(std::string_view text) {
  auto c = fca::engine::ParseTorchScriptConfig(text);
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(c.status().message().substr(0, 13) == "config.json: ");
    return;
  }
  FUZZ_CHECK(c->vocab_size >= 1 && c->max_seq_len >= 2 && c->num_layers >= 1);
  FUZZ_CHECK(c->blocks_per_token >= 1);
  FUZZ_CHECK(!c->sites.empty());
  std::set<std::string> names;
  for (const fca::engine::CoefficientSite& s : c->sites) {
    FUZZ_CHECK(s.layer >= 0 && s.layer < c->num_layers);
    FUZZ_CHECK(s.channels >= 1);
    FUZZ_CHECK(!s.name.empty() && !s.family.empty());
    FUZZ_CHECK(names.insert(s.name).second);
  }
}

void CheckTransformer(std::string_view text) {
  auto c = fca::engine::ParseTransformerConfig(text);
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(fca::engine::ValidateTransformerConfig(*c).ok());
  const std::string again = fca::json::Write(fca::engine::TransformerConfigToJson(*c));
  auto round = fca::engine::ParseTransformerConfig(again);
  FUZZ_CHECK(round.ok());
  FUZZ_CHECK(round->d_model == c->d_model && round->n_layers == c->n_layers);
  FUZZ_CHECK(round->vocab_size == c->vocab_size && round->family == c->family);
}

void CheckMoe(std::string_view text) {
  auto c = fca::engine::ParseMoeConfig(text);
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(c.status().message().substr(0, 13) == "config.json: ");
    return;
  }
  FUZZ_CHECK(fca::engine::IsMoeFamily(c->model_type));
  FUZZ_CHECK(c->num_experts_per_tok >= 1 && c->num_experts_per_tok <= c->num_experts);
  FUZZ_CHECK(c->hidden_size % c->num_attention_heads == 0);
  FUZZ_CHECK(c->num_attention_heads % c->num_key_value_heads == 0);
  FUZZ_CHECK(c->head_dim() % 2 == 0 && c->expert_intermediate_size >= 1);
  FUZZ_CHECK(c->rms_norm_eps > 0 && c->rms_norm_eps < 1);
  FUZZ_CHECK(c->has_shared_expert() == (c->model_type == "qwen2_moe"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto family = fca::engine::ReadModelFamily(text);
  CheckTorchScript(text);
  CheckTransformer(text);
  CheckMoe(text);
  if (family.ok() && *family == "torchscript") {
    FUZZ_CHECK(!fca::engine::ParseTransformerConfig(text).ok());
  }
  return 0;
}
