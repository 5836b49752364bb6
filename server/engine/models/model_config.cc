#include "server/engine/models/model_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace fca::engine {

absl::Status InvalidConfig(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", what));
}

namespace {

// Reads an integer field into *out when present; keeps the default otherwise
// only for `optional` fields.
absl::Status ReadInt(const json::Value& obj, const char* key, bool optional, int64_t* out) {
  if (optional && obj.Find(key) == nullptr) return absl::OkStatus();
  auto v = json::GetInt(obj, key);
  if (!v.ok()) return InvalidConfig(v.status().message());
  *out = *v;
  return absl::OkStatus();
}

absl::Status CheckRange(const char* key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return InvalidConfig(
        absl::StrFormat("field '%s' is %d; it must be in [%d, %d]", key, v, lo, hi));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadModelFamily(std::string_view json_text) {
  auto doc = json::Parse(json_text);
  if (!doc.ok()) return InvalidConfig(doc.status().message());
  if (!doc->is_object()) return InvalidConfig("the document must be a JSON object");
  auto family = json::GetString(*doc, "model_type");
  if (!family.ok()) return InvalidConfig(family.status().message());
  return *family;
}

absl::Status ValidateTransformerConfig(const TransformerConfig& c) {
  if (c.family != "dense" && c.family != "featuregate") {
    return InvalidConfig(absl::StrFormat(
        "model_type '%s' is not a transformer family (expected dense or featuregate)", c.family));
  }
  FCA_RETURN_IF_ERROR(CheckRange("d_model", c.d_model, 1, 1 << 16));
  FCA_RETURN_IF_ERROR(CheckRange("n_layers", c.n_layers, 1, 1024));
  FCA_RETURN_IF_ERROR(CheckRange("n_heads", c.n_heads, 1, c.d_model));
  FCA_RETURN_IF_ERROR(CheckRange("d_ff", c.d_ff, 1, 1 << 18));
  FCA_RETURN_IF_ERROR(CheckRange("vocab_size", c.vocab_size, 1, 1 << 22));
  FCA_RETURN_IF_ERROR(CheckRange("max_seq_len", c.max_seq_len, 2, 1 << 20));
  if (c.d_model % c.n_heads != 0) {
    return InvalidConfig(
        absl::StrFormat("d_model %d is not divisible by n_heads %d", c.d_model, c.n_heads));
  }
  if (c.has_controller()) {
    FCA_RETURN_IF_ERROR(CheckRange("n_groups", c.n_groups, 1, c.d_model));
    FCA_RETURN_IF_ERROR(CheckRange("controller_width", c.controller_width, 1, 1 << 16));
    if (c.d_model % c.n_groups != 0) {
      return InvalidConfig(
          absl::StrFormat("d_model %d is not divisible by n_groups %d", c.d_model, c.n_groups));
    }
  }
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) {
    return InvalidConfig(
        absl::StrFormat("field 'norm_eps' is %g; it must be in (0, 1)", c.norm_eps));
  }
  return absl::OkStatus();
}

absl::StatusOr<TransformerConfig> ParseTransformerConfig(std::string_view json_text) {
  auto doc = json::Parse(json_text);
  if (!doc.ok()) return InvalidConfig(doc.status().message());
  if (!doc->is_object()) return InvalidConfig("the document must be a JSON object");
  TransformerConfig c;
  auto family = json::GetString(*doc, "model_type");
  if (!family.ok()) return InvalidConfig(family.status().message());
  c.family = *family;
  const bool gated = c.family == "featuregate";
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "d_model", false, &c.d_model));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "n_layers", false, &c.n_layers));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "n_heads", false, &c.n_heads));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "d_ff", false, &c.d_ff));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "vocab_size", false, &c.vocab_size));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "max_seq_len", false, &c.max_seq_len));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "n_groups", !gated, &c.n_groups));
  FCA_RETURN_IF_ERROR(ReadInt(*doc, "controller_width", !gated, &c.controller_width));
  if (doc->Find("norm_eps") != nullptr) {
    auto eps = json::GetDouble(*doc, "norm_eps");
    if (!eps.ok()) return InvalidConfig(eps.status().message());
    c.norm_eps = *eps;
  }
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(c));
  return c;
}

json::Value TransformerConfigToJson(const TransformerConfig& c) {
  json::Value v = json::Value::MakeObject();
  v.Set("model_type", json::Value::String(c.family));
  v.Set("d_model", json::Value::Int(c.d_model));
  v.Set("n_layers", json::Value::Int(c.n_layers));
  v.Set("n_heads", json::Value::Int(c.n_heads));
  v.Set("d_ff", json::Value::Int(c.d_ff));
  if (c.has_controller()) {
    v.Set("n_groups", json::Value::Int(c.n_groups));
    v.Set("controller_width", json::Value::Int(c.controller_width));
  }
  v.Set("vocab_size", json::Value::Int(c.vocab_size));
  v.Set("max_seq_len", json::Value::Int(c.max_seq_len));
  v.Set("norm_eps", json::Value::Number(c.norm_eps));
  return v;
}

}  // namespace fca::engine
