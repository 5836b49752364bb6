#include "server/engine/models/moe_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/models/model_config.h"

namespace fca::engine {
namespace {

absl::Status NotImplemented(const MoeConfig& c, const char* key, absl::string_view supported) {
  return InvalidConfig(absl::StrFormat("'%s' other than %s is not implemented for %s", key,
                                       supported, c.model_type));
}

// Typed reads of the keys of one config.json; a key given as JSON null counts
// as absent, as Hugging Face's config classes treat it.
class Reader {
 public:
  explicit Reader(const json::Value& doc) : doc_(doc) {}

  bool Present(const char* key) const {
    const json::Value* v = doc_.Find(key);
    return v != nullptr && !v->is_null();
  }

  absl::Status Int(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
    absl::StatusOr<int64_t> v = json::GetInt(doc_, key);
    if (!v.ok()) return InvalidConfig(v.status().message());
    if (*v < lo || *v > hi) {
      return InvalidConfig(
          absl::StrFormat("field '%s' is %d; it must be in [%d, %d]", key, *v, lo, hi));
    }
    *out = *v;
    return absl::OkStatus();
  }
  absl::Status OptionalInt(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
    return Present(key) ? Int(key, lo, hi, out) : absl::OkStatus();
  }

  absl::Status Number(const char* key, double lo, double hi, double* out) const {
    absl::StatusOr<double> v = json::GetDouble(doc_, key);
    if (!v.ok()) return InvalidConfig(v.status().message());
    if (!(*v > lo && *v < hi)) {
      return InvalidConfig(
          absl::StrFormat("field '%s' is %g; it must be in (%g, %g)", key, *v, lo, hi));
    }
    *out = *v;
    return absl::OkStatus();
  }
  absl::Status OptionalNumber(const char* key, double lo, double hi, double* out) const {
    return Present(key) ? Number(key, lo, hi, out) : absl::OkStatus();
  }

  absl::Status OptionalBool(const char* key, bool* out) const {
    if (!Present(key)) return absl::OkStatus();
    absl::StatusOr<bool> v = json::GetBool(doc_, key);
    if (!v.ok()) return InvalidConfig(v.status().message());
    *out = *v;
    return absl::OkStatus();
  }

  absl::Status OptionalString(const char* key, std::string* out) const {
    if (!Present(key)) return absl::OkStatus();
    absl::StatusOr<std::string> v = json::GetString(doc_, key);
    if (!v.ok()) return InvalidConfig(v.status().message());
    *out = *v;
    return absl::OkStatus();
  }

  // OK when `key` is absent, null, or an empty array.
  bool AbsentOrEmpty(const char* key) const {
    const json::Value* v = doc_.Find(key);
    return v == nullptr || v->is_null() || (v->is_array() && v->as_array().empty());
  }

 private:
  const json::Value& doc_;
};

// The keys both families share (Llama-style names).
absl::Status ReadCommon(const Reader& r, MoeConfig* c) {
  FCA_RETURN_IF_ERROR(r.Int("vocab_size", 1, 1 << 22, &c->vocab_size));
  FCA_RETURN_IF_ERROR(r.Int("hidden_size", 1, 1 << 16, &c->hidden_size));
  FCA_RETURN_IF_ERROR(r.Int("num_hidden_layers", 1, 1024, &c->num_hidden_layers));
  FCA_RETURN_IF_ERROR(r.Int("num_attention_heads", 1, c->hidden_size, &c->num_attention_heads));
  c->num_key_value_heads = c->num_attention_heads;
  // Mixtral's config class defaults it to 8, not to the heads: required there.
  if (c->is_mixtral() || r.Present("num_key_value_heads")) {
    FCA_RETURN_IF_ERROR(
        r.Int("num_key_value_heads", 1, c->num_attention_heads, &c->num_key_value_heads));
  }
  FCA_RETURN_IF_ERROR(r.Int("max_position_embeddings", 2, 1 << 20, &c->max_position_embeddings));
  const char* experts_key = c->is_mixtral() ? "num_local_experts" : "num_experts";
  FCA_RETURN_IF_ERROR(r.Int(experts_key, 1, 4096, &c->num_experts));
  FCA_RETURN_IF_ERROR(r.Int("num_experts_per_tok", 1, 4096, &c->num_experts_per_tok));
  FCA_RETURN_IF_ERROR(r.Number("rms_norm_eps", 0, 1, &c->rms_norm_eps));
  FCA_RETURN_IF_ERROR(r.OptionalNumber("rope_theta", 1, 1e12, &c->rope_theta));
  FCA_RETURN_IF_ERROR(r.OptionalBool("norm_topk_prob", &c->norm_topk_prob));
  FCA_RETURN_IF_ERROR(r.OptionalBool("tie_word_embeddings", &c->tie_word_embeddings));
  if (c->num_experts_per_tok > c->num_experts) {
    return InvalidConfig(absl::StrFormat("num_experts_per_tok %d is larger than %s %d",
                                         c->num_experts_per_tok, experts_key, c->num_experts));
  }
  if (c->hidden_size % c->num_attention_heads != 0) {
    return InvalidConfig(
        absl::StrFormat("hidden_size %d is not divisible by num_attention_heads %d", c->hidden_size,
                        c->num_attention_heads));
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return InvalidConfig(
        absl::StrFormat("num_attention_heads %d is not divisible by num_key_value_heads %d",
                        c->num_attention_heads, c->num_key_value_heads));
  }
  if (c->head_dim() % 2 != 0) {
    return InvalidConfig(absl::StrFormat(
        "head_dim (hidden_size / num_attention_heads) is %d; rotary needs an even number",
        c->head_dim()));
  }
  // Hugging Face's default for both families is "silu".
  std::string act = "silu";
  FCA_RETURN_IF_ERROR(r.OptionalString("hidden_act", &act));
  if (act != "silu") return NotImplemented(*c, "hidden_act", "\"silu\"");
  return absl::OkStatus();
}

// OLMoE: experts of intermediate_size, q_norm/k_norm, optional biases and
// clip_qkv.
absl::Status ReadOlmoe(const Reader& r, MoeConfig* c) {
  FCA_RETURN_IF_ERROR(r.Int("intermediate_size", 1, 1 << 18, &c->expert_intermediate_size));
  FCA_RETURN_IF_ERROR(r.OptionalBool("attention_bias", &c->attention_bias));
  if (r.Present("clip_qkv")) {
    double clip = 0;
    FCA_RETURN_IF_ERROR(r.Number("clip_qkv", 0, 1e30, &clip));
    c->clip_qkv = clip;
  }
  return absl::OkStatus();
}

// Qwen2-MoE: q/k/v biases, experts of moe_intermediate_size, a shared expert;
// every layer sparse and full attention are all the engine implements.
absl::Status ReadQwen2Moe(const Reader& r, MoeConfig* c) {
  c->attention_bias = true;
  FCA_RETURN_IF_ERROR(r.Int("moe_intermediate_size", 1, 1 << 18, &c->expert_intermediate_size));
  FCA_RETURN_IF_ERROR(
      r.Int("shared_expert_intermediate_size", 1, 1 << 18, &c->shared_expert_intermediate_size));
  int64_t step = 1;
  FCA_RETURN_IF_ERROR(r.OptionalInt("decoder_sparse_step", 1, 1024, &step));
  if (step != 1) return NotImplemented(*c, "decoder_sparse_step", "1");
  if (!r.AbsentOrEmpty("mlp_only_layers")) {
    return NotImplemented(*c, "mlp_only_layers", "an empty list");
  }
  bool sliding = false;
  FCA_RETURN_IF_ERROR(r.OptionalBool("use_sliding_window", &sliding));
  if (sliding) return NotImplemented(*c, "use_sliding_window", "false");
  return absl::OkStatus();
}

// Mixtral: experts of intermediate_size, top-k always renormalised, full
// attention only.
absl::Status ReadMixtral(const Reader& r, MoeConfig* c) {
  c->norm_topk_prob = true;
  FCA_RETURN_IF_ERROR(r.Int("intermediate_size", 1, 1 << 18, &c->expert_intermediate_size));
  int64_t window = c->max_position_embeddings;
  FCA_RETURN_IF_ERROR(r.OptionalInt("sliding_window", 1, int64_t{1} << 40, &window));
  if (window < c->max_position_embeddings) {
    return NotImplemented(*c, "sliding_window", "null (or at least max_position_embeddings)");
  }
  if (r.Present("head_dim")) {
    int64_t head_dim = 0;
    FCA_RETURN_IF_ERROR(r.Int("head_dim", 1, c->hidden_size, &head_dim));
    if (head_dim != c->head_dim()) {
      return NotImplemented(*c, "head_dim", "hidden_size / num_attention_heads");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MoeConfig> ParseMoeConfig(std::string_view json_text) {
  absl::StatusOr<json::Value> doc = json::Parse(json_text);
  if (!doc.ok()) return InvalidConfig(doc.status().message());
  if (!doc->is_object()) return InvalidConfig("the document must be a JSON object");
  const Reader r(*doc);
  MoeConfig c;
  absl::StatusOr<std::string> type = json::GetString(*doc, "model_type");
  if (!type.ok()) return InvalidConfig(type.status().message());
  c.model_type = *type;
  if (!IsMoeFamily(c.model_type)) {
    return InvalidConfig(absl::StrFormat(
        "model_type '%s' is not a mixture-of-experts family (olmoe, qwen2_moe, mixtral)",
        c.model_type));
  }
  FCA_RETURN_IF_ERROR(ReadCommon(r, &c));
  if (!r.AbsentOrEmpty("rope_scaling")) return NotImplemented(c, "rope_scaling", "null");
  if (c.is_olmoe()) {
    FCA_RETURN_IF_ERROR(ReadOlmoe(r, &c));
  } else if (c.is_mixtral()) {
    FCA_RETURN_IF_ERROR(ReadMixtral(r, &c));
  } else {
    FCA_RETURN_IF_ERROR(ReadQwen2Moe(r, &c));
  }
  return c;
}

json::Value MoeConfigToJson(const MoeConfig& c) {
  using json::Value;
  const char* architecture = c.is_olmoe()     ? "OlmoeForCausalLM"
                             : c.is_mixtral() ? "MixtralForCausalLM"
                                              : "Qwen2MoeForCausalLM";
  Value v = Value::MakeObject();
  v.Set("architectures", Value::MakeArray({Value::String(architecture)}));
  v.Set("model_type", Value::String(c.model_type));
  v.Set("vocab_size", Value::Int(c.vocab_size));
  v.Set("hidden_size", Value::Int(c.hidden_size));
  v.Set(c.is_qwen2_moe() ? "moe_intermediate_size" : "intermediate_size",
        Value::Int(c.expert_intermediate_size));
  v.Set("num_hidden_layers", Value::Int(c.num_hidden_layers));
  v.Set("num_attention_heads", Value::Int(c.num_attention_heads));
  v.Set("num_key_value_heads", Value::Int(c.num_key_value_heads));
  v.Set("hidden_act", Value::String("silu"));
  v.Set("max_position_embeddings", Value::Int(c.max_position_embeddings));
  v.Set("rms_norm_eps", Value::Number(c.rms_norm_eps));
  v.Set("rope_theta", Value::Number(c.rope_theta));
  v.Set("rope_scaling", Value::Null());
  v.Set(c.is_mixtral() ? "num_local_experts" : "num_experts", Value::Int(c.num_experts));
  v.Set("num_experts_per_tok", Value::Int(c.num_experts_per_tok));
  if (!c.is_mixtral()) v.Set("norm_topk_prob", Value::Bool(c.norm_topk_prob));
  v.Set("tie_word_embeddings", Value::Bool(c.tie_word_embeddings));
  if (c.is_olmoe()) {
    v.Set("attention_bias", Value::Bool(c.attention_bias));
    v.Set("clip_qkv", c.clip_qkv ? Value::Number(*c.clip_qkv) : Value::Null());
  } else if (c.is_mixtral()) {
    v.Set("sliding_window", Value::Null());
  } else {
    v.Set("shared_expert_intermediate_size", Value::Int(c.shared_expert_intermediate_size));
    v.Set("decoder_sparse_step", Value::Int(1));
    v.Set("mlp_only_layers", Value::MakeArray());
    v.Set("use_sliding_window", Value::Bool(false));
  }
  return v;
}

bool IsMoeFamily(std::string_view model_type) {
  return model_type == "olmoe" || model_type == "qwen2_moe" || model_type == "mixtral";
}

}  // namespace fca::engine
