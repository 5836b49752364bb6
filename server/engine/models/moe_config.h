// config.json of the mixture-of-experts families read from Hugging Face
// folders: `olmoe` (OLMoE-1B-7B), `qwen2_moe` (Qwen1.5-MoE / Qwen2-MoE) and
// `mixtral` (Mixtral-8x7B).
// The keys are Hugging Face's (docs/moe.md pins each one and what the engine
// makes of it). Torch-free, so the fuzz target links it without torch.
#ifndef FCA_SERVER_ENGINE_MODELS_MOE_CONFIG_H_
#define FCA_SERVER_ENGINE_MODELS_MOE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace fca::engine {

struct MoeConfig {
  std::string model_type;  // "olmoe" | "qwen2_moe" | "mixtral"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // absent: num_attention_heads
  int64_t max_position_embeddings = 0;
  int64_t num_experts = 0;          // mixtral's num_local_experts
  int64_t num_experts_per_tok = 0;  // k of the top-k
  // Width of each routed expert: olmoe's and mixtral's intermediate_size,
  // qwen2_moe's moe_intermediate_size.
  int64_t expert_intermediate_size = 0;
  // qwen2_moe: width of the shared expert (0 for olmoe: none).
  int64_t shared_expert_intermediate_size = 0;
  double rms_norm_eps = 0;
  double rope_theta = 10000.0;
  bool norm_topk_prob = false;  // mixtral: always true
  bool tie_word_embeddings = false;
  // olmoe: q/k/v/o biases when attention_bias is true. qwen2_moe: q/k/v
  // biases always, o_proj none.
  bool attention_bias = false;
  std::optional<double> clip_qkv;  // olmoe only: clamp of q, k, v after the norms

  bool is_olmoe() const { return model_type == "olmoe"; }
  bool is_mixtral() const { return model_type == "mixtral"; }
  bool is_qwen2_moe() const { return model_type == "qwen2_moe"; }
  bool has_qk_norm() const { return is_olmoe(); }
  bool has_shared_expert() const { return shared_expert_intermediate_size > 0; }
  // One routed expert and no shared one: the router's softmax over one logit
  // gives every token weight exactly 1, so the network is dense and has no
  // controller (a mixture of experts' matched twin, fca.md "A matched twin").
  bool is_dense() const { return num_experts == 1 && !has_shared_expert(); }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t kv_width() const { return num_key_value_heads * head_dim(); }
};

// Whether `model_type` names a family ParseMoeConfig reads.
bool IsMoeFamily(std::string_view model_type);

// Parses and validates a config.json of an MoE family. Every problem is
// INVALID_ARGUMENT starting with "config.json:" and naming the key: a
// missing or ill-typed key, a size out of range, top-k larger than the
// experts, heads that do not divide hidden_size or each other, an unknown
// model_type or hidden_act, and settings the engine does not implement
// (rope_scaling, sliding windows, dense layers between the sparse ones).
[[nodiscard]] absl::StatusOr<MoeConfig> ParseMoeConfig(std::string_view json_text);

// The config.json of `config` in its family's Hugging Face keys, which
// ParseMoeConfig reads back to `config` (fca-train writes it).
json::Value MoeConfigToJson(const MoeConfig& config);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MOE_CONFIG_H_
