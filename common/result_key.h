// What one number of an audit is about, typed (docs/fca.md "Result rows"):
// its metric's name and the scope it is computed at (the whole model, one
// layer, one site, one coefficient family, one retention baseline, one
// (layer, expert), a pair of experts of one layer, one (layer, token id,
// expert)) with that scope's key. The engine writes rows by these
// keys and every reader (the report assembly, the CLI, the HTML report, the
// dashboard, Python) reads their fields: none parses a metric name.
//
// A row is stored (SQLite, rows written by 0.2.0 included) and served in
// `Result.metric` under its stored name: the metric's name and the key's
// fields joined by dots ("layer_penalty.3", "expert_share.3.17",
// "site_mean.attn_gate.3"). StoredMetricName and ResultKeyOf here are the
// one encoder and the one decoder of that name.
#ifndef FCA_COMMON_RESULT_KEY_H_
#define FCA_COMMON_RESULT_KEY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fca {

// THE table of scopes: X(enumerator, name, the key's fields in the stored
// name's order). The last field takes the rest of the name (a site's name
// has a dot). Adding a scope is one line here, its value in the proto's
// MetricScope (proto/fca/v1/result_keys.cc maps them), and a new field's
// member below if it needs one.
#define FCA_METRIC_SCOPES(X)                                                             \
  X(kModel, "model", )                                                                   \
  X(kLayer, "layer", KeyField::kLayer)                                                   \
  X(kSite, "site", KeyField::kSite)                                                      \
  X(kFamily, "family", KeyField::kFamily)                                                \
  X(kBaseline, "baseline", KeyField::kBaseline)                                          \
  X(kExpert, "expert", KeyField::kLayer, KeyField::kExpert)                              \
  X(kExpertPair, "expert_pair", KeyField::kLayer, KeyField::kExpert, KeyField::kPartner) \
  X(kTokenExpert, "token_expert", KeyField::kLayer, KeyField::kToken, KeyField::kExpert)

// One field of a key (result_key.cc's KeyFieldDefOf has a row for each).
enum class KeyField : uint8_t { kLayer, kExpert, kSite, kFamily, kBaseline, kPartner, kToken };

enum class MetricScope : uint8_t {
  kUnknown,  // a stored name this vocabulary does not know (a newer engine)
#define FCA_METRIC_SCOPE_ID(id, name, ...) id,
  FCA_METRIC_SCOPES(FCA_METRIC_SCOPE_ID)
#undef FCA_METRIC_SCOPE_ID
};

struct MetricScopeDef {
  MetricScope id;
  const char* name;  // "model", "layer", ...: GetServerInfo's and the docs'
  std::vector<KeyField> fields;
};

// The known scopes, in MetricScope's order (kUnknown is none of them).
const std::vector<MetricScopeDef>& MetricScopeDefs();
// kUnknown: {kUnknown, "unknown", {}}.
const MetricScopeDef& MetricScopeDefOf(MetricScope id);
// "<layer>", "<expert>", ...: how GetServerInfo and docs/fca.md write a
// field in a metric's pattern ("expert_share.<layer>.<expert>").
const char* KeyFieldPlaceholder(KeyField field);

struct ResultKey {
  std::string metric;  // the metric's name alone: "layer_penalty"
  MetricScope scope = MetricScope::kModel;
  std::optional<int64_t> layer;    // kLayer, kExpert; kSite: its layer
  std::optional<int64_t> expert;   // kExpert, kExpertPair, kTokenExpert
  std::optional<int64_t> partner;  // kExpertPair: the pair's second expert
  std::optional<int64_t> token;    // kTokenExpert: a token id
  std::string site;                // kSite: "attn_gate.3"
  std::string family;              // kFamily; kSite: its family
  std::string baseline;            // kBaseline: the intervention B

  friend bool operator==(const ResultKey& a, const ResultKey& b);
  friend bool operator<(const ResultKey& a, const ResultKey& b);  // layers by number
};

// The keys the engine writes.
ResultKey ModelKey(std::string_view metric);
ResultKey LayerKey(std::string_view metric, int64_t layer);
// "attn_gate.3": family "attn_gate", layer 3 (a site named otherwise has
// neither).
ResultKey SiteKey(std::string_view metric, std::string_view site);
ResultKey FamilyKey(std::string_view metric, std::string_view family);
ResultKey BaselineKey(std::string_view metric, std::string_view baseline);
ResultKey ExpertKey(std::string_view metric, int64_t layer, int64_t expert);
// "expert_coactivation.3.1.5": experts 1 and 5 of layer 3.
ResultKey ExpertPairKey(std::string_view metric, int64_t layer, int64_t expert, int64_t partner);
// "token_expert_share.3.101.5": token id 101, expert 5 of layer 3.
ResultKey TokenExpertKey(std::string_view metric, int64_t layer, int64_t token, int64_t expert);

// "layer_penalty.3": what is stored and served as Result.metric.
std::string StoredMetricName(const ResultKey& key);
// The key of a stored name. A name this vocabulary does not know, or whose
// key does not fit its scope ("layer_nll.x"), is kUnknown with the whole
// name as its metric: served as it was stored, in no section of its own.
ResultKey ResultKeyOf(std::string_view stored_name);

}  // namespace fca

#endif  // FCA_COMMON_RESULT_KEY_H_
