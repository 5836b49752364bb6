#include "server/engine/models/torchscript_config.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/models/model_config.h"

namespace fca::engine {
namespace {

constexpr int64_t kMaxSites = 4096;
constexpr int64_t kMaxChannels = 1 << 20;
constexpr size_t kMaxNameBytes = 128;

absl::StatusOr<int64_t> IntInRange(const json::Value& obj, absl::string_view where, const char* key,
                                   int64_t lo, int64_t hi) {
  absl::StatusOr<int64_t> v = json::GetInt(obj, key);
  if (!v.ok()) return InvalidConfig(absl::StrCat(where, v.status().message()));
  if (*v < lo || *v > hi) {
    return InvalidConfig(
        absl::StrFormat("%sfield '%s' is %d; it must be in [%d, %d]", where, key, *v, lo, hi));
  }
  return *v;
}

// A site or family name: printable ASCII without spaces, bounded.
absl::StatusOr<std::string> Name(const json::Value& obj, absl::string_view where, const char* key) {
  absl::StatusOr<std::string> v = json::GetString(obj, key);
  if (!v.ok()) return InvalidConfig(absl::StrCat(where, v.status().message()));
  bool printable = !v->empty() && v->size() <= kMaxNameBytes;
  for (char ch : *v) printable = printable && ch > ' ' && ch < 127;
  if (!printable) {
    return InvalidConfig(
        absl::StrFormat("%sfield '%s' must be 1 to %d printable ASCII characters "
                        "without spaces",
                        where, key, kMaxNameBytes));
  }
  return *v;
}

absl::StatusOr<CoefficientSite> ParseSite(const json::Value& v, size_t index, int64_t num_layers) {
  const std::string where = absl::StrFormat("sites[%d]: ", index);
  if (!v.is_object()) return InvalidConfig(absl::StrCat(where, "must be an object"));
  CoefficientSite s;
  FCA_ASSIGN_OR_RETURN(s.name, Name(v, where, "name"));
  FCA_ASSIGN_OR_RETURN(s.family, Name(v, where, "family"));
  FCA_ASSIGN_OR_RETURN(s.layer, IntInRange(v, where, "layer", 0, num_layers - 1));
  FCA_ASSIGN_OR_RETURN(s.channels, IntInRange(v, where, "channels", 1, kMaxChannels));
  return s;
}

absl::StatusOr<std::vector<CoefficientSite>> ParseSites(const json::Value& doc,
                                                        int64_t num_layers) {
  const json::Value* list = doc.Find("sites");
  if (list == nullptr || !list->is_array() || list->as_array().empty()) {
    return InvalidConfig(
        "field 'sites' must be a non-empty array of {name, family, layer, channels}");
  }
  if (list->as_array().size() > static_cast<size_t>(kMaxSites)) {
    return InvalidConfig(absl::StrFormat("more than %d sites", kMaxSites));
  }
  std::vector<CoefficientSite> sites;
  std::set<std::string> names;
  for (const json::Value& v : list->as_array()) {
    FCA_ASSIGN_OR_RETURN(CoefficientSite s, ParseSite(v, sites.size(), num_layers));
    if (!names.insert(s.name).second) {
      return InvalidConfig(absl::StrFormat("site name '%s' appears twice", s.name));
    }
    sites.push_back(std::move(s));
  }
  return sites;
}

absl::StatusOr<ComputeDType> Dtype(const json::Value& doc) {
  absl::StatusOr<std::string> v = json::GetString(doc, "dtype");
  if (!v.ok()) return InvalidConfig(v.status().message());
  const std::optional<ComputeDType> dtype = ParseComputeDType(*v);
  if (!dtype) {
    return InvalidConfig(
        absl::StrFormat("field 'dtype' is '%s'; it must be one of %s", *v, ComputeDTypeNameList()));
  }
  return *dtype;
}

}  // namespace

absl::StatusOr<TorchScriptConfig> ParseTorchScriptConfig(std::string_view json_text) {
  absl::StatusOr<json::Value> doc = json::Parse(json_text);
  if (!doc.ok()) return InvalidConfig(doc.status().message());
  if (!doc->is_object()) return InvalidConfig("the document must be a JSON object");
  absl::StatusOr<std::string> family = json::GetString(*doc, "model_type");
  if (!family.ok()) return InvalidConfig(family.status().message());
  if (*family != "torchscript") {
    return InvalidConfig(absl::StrFormat("model_type '%s' is not torchscript", *family));
  }
  TorchScriptConfig c;
  if (doc->Find("description") != nullptr) {
    absl::StatusOr<std::string> d = json::GetString(*doc, "description");
    if (!d.ok()) return InvalidConfig(d.status().message());
    c.description = *d;
  }
  FCA_ASSIGN_OR_RETURN(c.vocab_size, IntInRange(*doc, "", "vocab_size", 1, 1 << 22));
  FCA_ASSIGN_OR_RETURN(c.max_seq_len, IntInRange(*doc, "", "max_seq_len", 2, 1 << 20));
  FCA_ASSIGN_OR_RETURN(c.num_layers, IntInRange(*doc, "", "num_layers", 1, 1024));
  c.blocks_per_token = c.num_layers;
  if (doc->Find("blocks_per_token") != nullptr) {
    FCA_ASSIGN_OR_RETURN(c.blocks_per_token, IntInRange(*doc, "", "blocks_per_token", 1, 1 << 20));
  }
  FCA_ASSIGN_OR_RETURN(c.dtype, Dtype(*doc));
  FCA_ASSIGN_OR_RETURN(c.sites, ParseSites(*doc, c.num_layers));
  return c;
}

std::vector<CoefficientSite> DescribeTorchScript(const TorchScriptConfig& config, ModelInfo* info) {
  info->family = "torchscript";
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_seq_len;
  info->num_layers = config.num_layers;
  return config.sites;
}

}  // namespace fca::engine
