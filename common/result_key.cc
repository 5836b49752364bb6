#include "common/result_key.h"

#include <tuple>

#include "absl/strings/numbers.h"
#include "common/vocabulary.h"

namespace fca {
namespace {

// A non-negative integer written as StoredMetricName writes it (no sign, no
// leading zero: so a decoded name encodes back to itself), or nullopt.
std::optional<int64_t> Index(std::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v) || v < 0 ||
      std::to_string(v) != text) {
    return std::nullopt;
  }
  return v;
}

// A site's family and layer from its name, "<family>.<layer>".
void SetSite(ResultKey* key, std::string_view site) {
  key->site = std::string(site);
  const size_t dot = site.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return;
  const std::optional<int64_t> layer = Index(site.substr(dot + 1));
  if (!layer) return;
  key->family = std::string(site.substr(0, dot));
  key->layer = layer;
}

// THE table of key fields: each one's placeholder and its member, an index
// (a layer, an expert) or a name. A new field is a member of ResultKey, a
// row here, and a field of the proto's ResultKey.
struct KeyFieldDef {
  KeyField id;
  const char* placeholder;
  std::optional<int64_t> ResultKey::*index;  // or nullptr
  std::string ResultKey::*name;              // or nullptr
};

const KeyFieldDef& KeyFieldDefOf(KeyField field) {
  static const auto* defs = new std::vector<KeyFieldDef>{
      {KeyField::kLayer, "<layer>", &ResultKey::layer, nullptr},
      {KeyField::kExpert, "<expert>", &ResultKey::expert, nullptr},
      {KeyField::kSite, "<site>", nullptr, &ResultKey::site},
      {KeyField::kFamily, "<family>", nullptr, &ResultKey::family},
      {KeyField::kBaseline, "<baseline>", nullptr, &ResultKey::baseline},
      {KeyField::kPartner, "<partner>", &ResultKey::partner, nullptr},
      {KeyField::kToken, "<token>", &ResultKey::token, nullptr},
  };
  return (*defs)[static_cast<size_t>(field)];
}

std::string FieldText(const ResultKey& key, KeyField field) {
  const KeyFieldDef& def = KeyFieldDefOf(field);
  if (def.name != nullptr) return key.*def.name;
  const std::optional<int64_t>& index = key.*def.index;
  return index ? std::to_string(*index) : "";
}

// Sets `field` of `key` from its text; false when the text does not fit.
bool SetField(ResultKey* key, KeyField field, std::string_view text) {
  if (text.empty()) return false;
  const KeyFieldDef& def = KeyFieldDefOf(field);
  if (field == KeyField::kSite) {
    SetSite(key, text);
  } else if (def.name != nullptr) {
    key->*def.name = std::string(text);
  } else {
    key->*def.index = Index(text);
    return (key->*def.index).has_value();
  }
  return true;
}

ResultKey KeyOf(std::string_view metric, MetricScope scope) {
  ResultKey key;
  key.metric = std::string(metric);
  key.scope = scope;
  return key;
}

ResultKey Unknown(std::string_view stored_name) {
  return KeyOf(stored_name, MetricScope::kUnknown);
}

}  // namespace

const std::vector<MetricScopeDef>& MetricScopeDefs() {
  static const auto* defs = new std::vector<MetricScopeDef>{
#define FCA_METRIC_SCOPE_DEF(id, name, ...) {MetricScope::id, name, {__VA_ARGS__}},
      FCA_METRIC_SCOPES(FCA_METRIC_SCOPE_DEF)
#undef FCA_METRIC_SCOPE_DEF
  };
  return *defs;
}

const MetricScopeDef& MetricScopeDefOf(MetricScope id) {
  static const auto* unknown = new MetricScopeDef{MetricScope::kUnknown, "unknown", {}};
  if (id == MetricScope::kUnknown) return *unknown;
  return MetricScopeDefs()[static_cast<size_t>(id) - 1];
}

const char* KeyFieldPlaceholder(KeyField field) { return KeyFieldDefOf(field).placeholder; }

bool operator==(const ResultKey& a, const ResultKey& b) {
  return std::tie(a.metric, a.scope, a.layer, a.expert, a.partner, a.token, a.site, a.family,
                  a.baseline) == std::tie(b.metric, b.scope, b.layer, b.expert, b.partner, b.token,
                                          b.site, b.family, b.baseline);
}

bool operator<(const ResultKey& a, const ResultKey& b) {
  return std::tie(a.metric, a.scope, a.family, a.layer, a.token, a.expert, a.partner, a.site,
                  a.baseline) < std::tie(b.metric, b.scope, b.family, b.layer, b.token, b.expert,
                                         b.partner, b.site, b.baseline);
}

ResultKey ModelKey(std::string_view metric) { return KeyOf(metric, MetricScope::kModel); }

ResultKey LayerKey(std::string_view metric, int64_t layer) {
  ResultKey key = KeyOf(metric, MetricScope::kLayer);
  key.layer = layer;
  return key;
}

ResultKey SiteKey(std::string_view metric, std::string_view site) {
  ResultKey key = KeyOf(metric, MetricScope::kSite);
  SetSite(&key, site);
  return key;
}

ResultKey FamilyKey(std::string_view metric, std::string_view family) {
  ResultKey key = KeyOf(metric, MetricScope::kFamily);
  key.family = std::string(family);
  return key;
}

ResultKey BaselineKey(std::string_view metric, std::string_view baseline) {
  ResultKey key = KeyOf(metric, MetricScope::kBaseline);
  key.baseline = std::string(baseline);
  return key;
}

ResultKey ExpertKey(std::string_view metric, int64_t layer, int64_t expert) {
  ResultKey key = KeyOf(metric, MetricScope::kExpert);
  key.layer = layer;
  key.expert = expert;
  return key;
}

ResultKey ExpertPairKey(std::string_view metric, int64_t layer, int64_t expert, int64_t partner) {
  ResultKey key = KeyOf(metric, MetricScope::kExpertPair);
  key.layer = layer;
  key.expert = expert;
  key.partner = partner;
  return key;
}

ResultKey TokenExpertKey(std::string_view metric, int64_t layer, int64_t token, int64_t expert) {
  ResultKey key = KeyOf(metric, MetricScope::kTokenExpert);
  key.layer = layer;
  key.token = token;
  key.expert = expert;
  return key;
}

std::string StoredMetricName(const ResultKey& key) {
  std::string out = key.metric;
  for (KeyField field : MetricScopeDefOf(key.scope).fields) {
    out += '.';
    out += FieldText(key, field);
  }
  return out;
}

ResultKey ResultKeyOf(std::string_view stored_name) {
  const MetricDef* def = FindMetric(stored_name);
  if (def == nullptr) return Unknown(stored_name);
  ResultKey key = KeyOf(def->name, def->scope);
  const std::vector<KeyField>& fields = MetricScopeDefOf(def->scope).fields;
  std::string_view rest = stored_name.substr(key.metric.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    rest.remove_prefix(1);  // the dot before the field (FindMetric checked the first)
    const bool last = i + 1 == fields.size();
    const size_t dot = last ? std::string_view::npos : rest.find('.');
    if (!last && dot == std::string_view::npos) return Unknown(stored_name);
    if (!SetField(&key, fields[i], rest.substr(0, dot))) return Unknown(stored_name);
    rest = last ? std::string_view() : rest.substr(dot);
  }
  return key;
}

}  // namespace fca
