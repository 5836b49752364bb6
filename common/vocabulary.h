// The audit's vocabulary (docs/fca.md): every intervention, the scopes of
// per-group dependence, the pseudo-interventions that model-level rows are
// stored under, and every metric, each named once here with what the
// service says of it (unit, label, description).
//
// Everything that lists them derives from these tables: the engine's
// interventions and result rows, spec checks and report order in the
// service, GetServerInfo (server/core/metric_catalog.h maps the tables to
// the proto, which carries names as strings), the CLI's help and reports,
// and through GetServerInfo the dashboard. In common/ because the CLI and
// the service use it without torch.
#ifndef FCA_COMMON_VOCABULARY_H_
#define FCA_COMMON_VOCABULARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fca {

// ------------------------------------------------------- interventions

inline constexpr char kCorrect[] = "correct";
inline constexpr char kCrossInput[] = "cross_input";
inline constexpr char kTokenShuffle[] = "token_shuffle";
inline constexpr char kStaticLayer[] = "static_layer";
inline constexpr char kStaticLayerPosition[] = "static_layer_position";
inline constexpr char kGlobalMean[] = "global_mean";
inline constexpr char kStaticToken[] = "static_token";
inline constexpr char kNeutral[] = "neutral";

// In report order.
enum class InterventionId : uint8_t {
  kCorrect,
  kCrossInput,
  kTokenShuffle,
  kStaticLayer,
  kStaticLayerPosition,
  kGlobalMean,
  kStaticToken,
  kNeutral,
};

struct InterventionDef {
  InterventionId id;
  const char* name;  // as specified and stored
  // A table fixed from the calibration set before E is seen: it has a gap
  // retention (fca.md "Gap retention").
  bool static_profile;
  const char* description;  // what is substituted, one line
};

// Every intervention, in report order (InterventionId's order).
const std::vector<InterventionDef>& InterventionDefs();
const InterventionDef& InterventionDefOf(InterventionId id);
// nullopt for a name that is no intervention.
std::optional<InterventionId> ParseIntervention(std::string_view name);
const char* InterventionName(InterventionId id);
// Every name, in report order.
const std::vector<std::string>& InterventionNames();
// "correct, cross_input, ...": for messages and help texts.
std::string InterventionNameList(std::string_view separator = ", ");
// The static profiles' names, in report order.
std::vector<std::string> StaticProfileNames();

// ------------------------------------------------ per-group dependence

inline constexpr char kScopeLayer[] = "layer";
inline constexpr char kScopeSite[] = "site";
inline constexpr char kScopeFamily[] = "family";

enum class ScopeId : uint8_t { kLayer, kSite, kFamily };

// A way to group sites (AuditOptions::per_layer_scope) and the two metrics
// its replays are stored as, "<nll_metric>.<group>" and
// "<penalty_metric>.<group>".
struct ScopeDef {
  ScopeId id;
  const char* name;
  const char* nll_metric;
  const char* penalty_metric;
};

// In ScopeId's order.
const std::vector<ScopeDef>& ScopeDefs();
// nullptr for a name that is no scope.
const ScopeDef* FindScope(std::string_view name);
const ScopeDef& ScopeDefOf(ScopeId id);
// nullopt for a name that is no scope.
std::optional<ScopeId> ParseScope(std::string_view name);
const char* ScopeName(ScopeId id);
// Every name, in order.
const std::vector<std::string>& ScopeNames();
// "layer, site, family".
std::string ScopeNameList(std::string_view separator = ", ");

// ------------------------- where model-level rows are stored (pseudo-interventions)

inline constexpr char kVariation[] = "variation";
inline constexpr char kExecution[] = "execution";
inline constexpr char kReplay[] = "replay";

// ------------------------------------------------------------- metrics

// Stored names, or the prefix before ".<key>" of the keyed ones.
inline constexpr char kNll[] = "nll";
inline constexpr char kPenalty[] = "penalty";
inline constexpr char kRetentionPct[] = "retention_pct";
inline constexpr char kUnseenTokenPositions[] = "unseen_token_positions";
inline constexpr char kUnseenTokenIds[] = "unseen_token_ids";
inline constexpr char kLayerNll[] = "layer_nll";
inline constexpr char kLayerPenalty[] = "layer_penalty";
inline constexpr char kSiteNll[] = "site_nll";
inline constexpr char kSitePenalty[] = "site_penalty";
inline constexpr char kFamilyNll[] = "family_nll";
inline constexpr char kFamilyPenalty[] = "family_penalty";
inline constexpr char kEta2[] = "eta2";
inline constexpr char kEta2Layer[] = "eta2_layer";
inline constexpr char kTotalVariance[] = "total_variance";
inline constexpr char kWithinSiteVariance[] = "within_site_variance";
inline constexpr char kBetweenInputVariance[] = "between_input_variance";
inline constexpr char kWithinInputVariance[] = "within_input_variance";
inline constexpr char kSiteMean[] = "site_mean";
inline constexpr char kSiteVariance[] = "site_variance";
inline constexpr char kParameters[] = "parameters";
inline constexpr char kBlocksPerToken[] = "blocks_per_token";
inline constexpr char kBlocksExecutedFraction[] = "blocks_executed_fraction";
inline constexpr char kFlopsPerToken[] = "flops_per_token";
inline constexpr char kReplayFlopsPerToken[] = "replay_flops_per_token";
inline constexpr char kDenseFlopsPerToken[] = "dense_flops_per_token";
inline constexpr char kFlopsOverhead[] = "flops_overhead";
inline constexpr char kLatencyUsPerToken[] = "latency_us_per_token";
inline constexpr char kDenseLatencyUsPerToken[] = "dense_latency_us_per_token";
inline constexpr char kSlowdown[] = "slowdown";
inline constexpr char kSlowdownVerdict[] = "slowdown_verdict";
inline constexpr char kActiveParameters[] = "active_parameters";
inline constexpr char kExpertsPerToken[] = "experts_per_token";
inline constexpr char kExpertLoadEntropy[] = "expert_load_entropy";
inline constexpr char kExpertShare[] = "expert_share";
inline constexpr char kLiveNll[] = "live_nll";
inline constexpr char kMaxAbsLogitDiff[] = "max_abs_logit_diff";
inline constexpr char kFidelityCheckedWindows[] = "fidelity_checked_windows";

// In report order.
enum class MetricId : uint8_t {
  kNll,
  kPenalty,
  kRetentionPct,
  kUnseenTokenPositions,
  kUnseenTokenIds,
  kLayerNll,
  kLayerPenalty,
  kSiteNll,
  kSitePenalty,
  kFamilyNll,
  kFamilyPenalty,
  kEta2,
  kEta2Layer,
  kTotalVariance,
  kWithinSiteVariance,
  kBetweenInputVariance,
  kWithinInputVariance,
  kSiteMean,
  kSiteVariance,
  kParameters,
  kBlocksPerToken,
  kBlocksExecutedFraction,
  kFlopsPerToken,
  kReplayFlopsPerToken,
  kDenseFlopsPerToken,
  kFlopsOverhead,
  kLatencyUsPerToken,
  kDenseLatencyUsPerToken,
  kSlowdown,
  kSlowdownVerdict,
  kActiveParameters,
  kExpertsPerToken,
  kExpertLoadEntropy,
  kExpertShare,
  kLiveNll,
  kMaxAbsLogitDiff,
  kFidelityCheckedWindows,
};

// What follows a keyed metric's name after a dot: "eta2.attn_gate".
// kLayerExpert: "<layer>.<expert>" ("expert_share.3.17").
enum class MetricKey : uint8_t { kNone, kLayer, kSite, kFamily, kLayerExpert };

struct MetricDef {
  MetricId id;
  const char* name;  // the stored name, or its prefix before ".<key>"
  MetricKey key;
  // What its rows are stored under: "" for each intervention, else an
  // intervention or kVariation / kExecution / kReplay.
  const char* stored_under;
  const char* unit;         // "nats/token", "%", "1" (a ratio), "coef^2", ...
  const char* label;        // short, for legends and table rows
  const char* description;  // one line
};

// Every metric, in report order (MetricId's order).
const std::vector<MetricDef>& MetricDefs();
const MetricDef& MetricDefOf(MetricId id);
// The definition of a stored metric name: "eta2.attn_gate" is kEta2 (a
// keyed name needs a non-empty key, a plain one none); also takes the
// pattern ("eta2.<family>"). nullptr for a name it does not know.
const MetricDef* FindMetric(std::string_view stored_name);
std::optional<MetricId> ParseMetric(std::string_view stored_name);
// "eta2.<family>": how GetServerInfo and docs/fca.md name a keyed metric.
std::string MetricPattern(const MetricDef& metric);
// "eta2" and "attn_gate" as stored: "eta2.attn_gate".
std::string KeyedMetric(std::string_view metric, std::string_view key);
// The unit of a stored metric name, "" when unknown.
std::string MetricUnit(std::string_view stored_name);

}  // namespace fca

#endif  // FCA_COMMON_VOCABULARY_H_
