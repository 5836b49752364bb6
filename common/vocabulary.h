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

#include "absl/status/statusor.h"
#include "common/result_key.h"

namespace fca {

// ------------------------------------------------------- interventions

// THE table of interventions, in report order (docs/fca.md "Interventions"):
// X(enumerator, name as specified and stored, has a static profile, reads
//   the calibration set, InterventionGroup, one-line description).
// Adding an intervention is one line here: it becomes a kName constant, an
// InterventionId, a row of InterventionDefs() and so a name the spec check,
// the CLI's help and GetServerInfo know; the compiler then asks for its
// case in MakeIntervention (server/engine/audit/coefficients.cc).
// `static_profile`: a table fixed from the calibration set before E is seen,
// so it has a gap retention (fca.md "Gap retention"). `calibrated`: its
// coefficients are estimated on C, so calibration resampling re-estimates
// and replays it (fca.md "Calibration uncertainty"). The group says how
// the reports read it (fca.md "Reading the interventions in groups").
#define FCA_INTERVENTIONS(X)                                                                   \
  X(kCorrect, "correct", false, false, kInputDependent,                                        \
    "each input's own coefficients A(x_i): the reference")                                     \
  X(kCrossInput, "cross_input", false, false, kInputDependent,                                 \
    "the coefficients of another input, A(x_pi(i)), pi a seeded derangement")                  \
  X(kTokenShuffle, "token_shuffle", false, false, kInputDependent,                             \
    "each input's coefficients with positions permuted (seeded, one permutation per sequence " \
    "unless per-site)")                                                                        \
  X(kStaticLayer, "static_layer", true, true, kInputIndependent,                               \
    "per-site, per-channel mean over the calibration set, for every token")                    \
  X(kStaticLayerPosition, "static_layer_position", true, true, kInputIndependent,              \
    "per-site, per-position, per-channel mean over the calibration set")                       \
  X(kGlobalMean, "global_mean", false, true, kInputIndependent,                                \
    "one scalar per family: the calibration mean over sites, positions, channels")             \
  X(kStaticToken, "static_token", true, true, kTokenKeyed,                                     \
    "per site, the calibration mean of the coefficients at positions with the same current "   \
    "token id, shrunk towards the site mean below static_token_min_count positions")           \
  X(kStaticTokenPosition, "static_token_position", true, true, kTokenKeyed,                    \
    "per site, the calibration mean at positions with the same (current token id, position), " \
    "shrunk towards the token's own value below static_token_min_count positions")             \
  X(kNeutral, "neutral", false, false, kInputIndependent,                                      \
    "the controller removed: FeatureGate gates 1, MUDDPythia the static dense_bs alone")       \
  X(kRandomRoute, "random_route", false, false, kInputIndependent,                             \
    "routers only: k experts drawn uniformly per token and layer (seeded), 1/k each")

// kCorrect = "correct", ...
#define FCA_INTERVENTION_NAME(id, name, static_profile, calibrated, group, description) \
  inline constexpr char id[] = name;
FCA_INTERVENTIONS(FCA_INTERVENTION_NAME)
#undef FCA_INTERVENTION_NAME

// In report order.
enum class InterventionId : uint8_t {
#define FCA_INTERVENTION_ID(id, name, static_profile, calibrated, group, description) id,
  FCA_INTERVENTIONS(FCA_INTERVENTION_ID)
#undef FCA_INTERVENTION_ID
};

// How the reports group the interventions (fca.md "Reading the
// interventions in groups"), in report order.
enum class InterventionGroup : uint8_t {
  kInputDependent,    // the reference and the controls built from A(x) itself
  kInputIndependent,  // one table or value for every input
  kTokenKeyed,        // a table read by the current token id
};

struct InterventionGroupDef {
  InterventionGroup id;
  const char* name;  // the heading the reports show
  // How a report reads a gap retention of this group's profiles: "" or
  // " (explained by the current token)".
  const char* retention_reading;
};

// In InterventionGroup's order.
const std::vector<InterventionGroupDef>& InterventionGroupDefs();
const InterventionGroupDef& InterventionGroupDefOf(InterventionGroup group);
// The group of an intervention's name; nullptr for a name that is none.
const InterventionGroupDef* FindInterventionGroup(std::string_view intervention);
// `interventions` by group (InterventionGroup's order), each group in the
// given order; names that are no intervention last.
std::vector<std::string> InGroupOrder(const std::vector<std::string>& interventions);

struct InterventionDef {
  InterventionId id;
  const char* name;  // as specified and stored
  bool static_profile;
  bool calibrated;  // estimated on the calibration set C
  InterventionGroup group;
  const char* description;  // what is substituted, one line
};

// Every intervention, in report order (InterventionId's order).
const std::vector<InterventionDef>& InterventionDefs();
const InterventionDef& InterventionDefOf(InterventionId id);
// nullopt for a name that is no intervention.
std::optional<InterventionId> ParseIntervention(std::string_view name);
const char* InterventionName(InterventionId id);
// The names of `ids`, in their order.
std::vector<std::string> InterventionNamesOf(const std::vector<InterventionId>& ids);
// The ids of a list of names as specified (the spec's interventions and
// per_layer_interventions, fca-local-audit's flags): where a name becomes an
// InterventionId. `field` names the list in messages ("intervention",
// "per-layer intervention"). INVALID_ARGUMENT for an unknown name, a name
// listed twice, or `correct` where it would compare with itself
// (!allow_correct).
absl::StatusOr<std::vector<InterventionId>> ParseInterventionList(
    const std::vector<std::string>& names, std::string_view field, bool allow_correct);
// Every name, in report order.
const std::vector<std::string>& InterventionNames();
// "correct, cross_input, ...": for messages and help texts.
std::string InterventionNameList(std::string_view separator = ", ");
// The static profiles, in report order, and their names.
std::vector<InterventionId> StaticProfiles();
std::vector<std::string> StaticProfileNames();
// The interventions estimated on C (`calibrated`), in report order.
std::vector<InterventionId> CalibratedInterventions();
// The baselines a gap retention is measured against (fca.md "Gap
// retention"), the default first: global_mean, neutral; and their names.
const std::vector<InterventionId>& RetentionBaselines();
const std::vector<std::string>& RetentionBaselineNames();
bool IsRetentionBaseline(InterventionId id);

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

// ------------------------------------------------------ compute dtypes

// The dtypes a model computes in (fca-server's and fca-worker's --dtype,
// engine::ComputeOptions): one row each, X(enumerator, name, bytes per
// element). Adding one is one line here (and its torch type in
// server/engine/models/torch_util.cc's ScalarTypeOf).
#define FCA_COMPUTE_DTYPES(X) \
  X(kFloat32, "float32", 4)   \
  X(kBFloat16, "bfloat16", 2) \
  X(kFloat16, "float16", 2)

enum class ComputeDType : uint8_t {
#define FCA_COMPUTE_DTYPE_ID(id, name, bytes) id,
  FCA_COMPUTE_DTYPES(FCA_COMPUTE_DTYPE_ID)
#undef FCA_COMPUTE_DTYPE_ID
};

struct ComputeDTypeDef {
  ComputeDType id;
  const char* name;       // as the flags, the proto and reports spell it
  int64_t element_bytes;  // of one element
};

// In ComputeDType's order.
const std::vector<ComputeDTypeDef>& ComputeDTypeDefs();
const ComputeDTypeDef& ComputeDTypeDefOf(ComputeDType id);
// nullopt for a name that is no compute dtype.
std::optional<ComputeDType> ParseComputeDType(std::string_view name);
const char* ComputeDTypeName(ComputeDType id);
// "float32, bfloat16, float16".
std::string ComputeDTypeNameList(std::string_view separator = ", ");
// The value of a --dtype flag (fca-server, fca-worker, fca-local-audit, the
// benchmarks); INVALID_ARGUMENT "--dtype='fp8' is not one of: float32,
// bfloat16, float16" for a name that is none.
absl::StatusOr<ComputeDType> ParseComputeDTypeFlag(std::string_view value);

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
inline constexpr char kShrunkIds[] = "shrunk_ids";
inline constexpr char kShrunkCells[] = "shrunk_cells";
inline constexpr char kLayerNll[] = "layer_nll";
inline constexpr char kLayerPenalty[] = "layer_penalty";
inline constexpr char kSiteNll[] = "site_nll";
inline constexpr char kSitePenalty[] = "site_penalty";
inline constexpr char kFamilyNll[] = "family_nll";
inline constexpr char kFamilyPenalty[] = "family_penalty";
inline constexpr char kTopkAgreement[] = "topk_agreement";
inline constexpr char kLayerTopkAgreement[] = "layer_topk_agreement";
// fca.md "Routing agreement", "Routing statistics".
inline constexpr char kTopkOverlap[] = "topk_overlap";
inline constexpr char kLayerTopkOverlap[] = "layer_topk_overlap";
inline constexpr char kExpertCoactivation[] = "expert_coactivation";
inline constexpr char kTokenExpertShare[] = "token_expert_share";
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
inline constexpr char kRouterUsPerToken[] = "router_us_per_token";
inline constexpr char kDispatchUsPerToken[] = "dispatch_us_per_token";
inline constexpr char kExpertsUsPerToken[] = "experts_us_per_token";
inline constexpr char kDenseMlpUsPerToken[] = "dense_mlp_us_per_token";
inline constexpr char kSlowdown[] = "slowdown";
inline constexpr char kSlowdownVerdict[] = "slowdown_verdict";
inline constexpr char kActiveParameters[] = "active_parameters";
inline constexpr char kExpertsPerToken[] = "experts_per_token";
inline constexpr char kExpertLoadEntropy[] = "expert_load_entropy";
inline constexpr char kExpertShare[] = "expert_share";
inline constexpr char kLiveNll[] = "live_nll";
inline constexpr char kMaxAbsLogitDiff[] = "max_abs_logit_diff";
inline constexpr char kFidelityCheckedWindows[] = "fidelity_checked_windows";
// fca.md "Gap retention", "Correlated windows", "Lookup tables".
inline constexpr char kRetentionVs[] = "retention_vs";
inline constexpr char kRetentionDropped[] = "retention_dropped";
inline constexpr char kPenaltyBlock[] = "penalty_block";
inline constexpr char kPenaltyLag1[] = "penalty_lag1";
inline constexpr char kPenaltyPHolm[] = "penalty_p_holm";
inline constexpr char kBootstrapBlockLength[] = "bootstrap_block_length";
inline constexpr char kEta2Token[] = "eta2_token";
inline constexpr char kEta2TokenPosition[] = "eta2_token_position";
inline constexpr char kSiteEta2Token[] = "site_eta2_token";
inline constexpr char kSiteEta2TokenPosition[] = "site_eta2_token_position";
inline constexpr char kEta2TokenOos[] = "eta2_token_oos";
inline constexpr char kEta2TokenPositionOos[] = "eta2_token_position_oos";
inline constexpr char kSiteEta2TokenOos[] = "site_eta2_token_oos";
inline constexpr char kSiteEta2TokenPositionOos[] = "site_eta2_token_position_oos";
inline constexpr char kLookupTable[] = "lookup_table";
inline constexpr char kSlowdownFirstBlock[] = "slowdown_first_block";
inline constexpr char kSlowdownSecondBlock[] = "slowdown_second_block";
inline constexpr char kGroupPenaltySum[] = "group_penalty_sum";
inline constexpr char kGroupAdditivity[] = "group_additivity";
inline constexpr char kGroupAdditivityDropped[] = "group_additivity_dropped";
inline constexpr char kSimplexValued[] = "simplex_valued";
// fca.md "Calibration uncertainty".
inline constexpr char kPenaltyCalib[] = "penalty_calib";
inline constexpr char kPenaltyCalibSd[] = "penalty_calib_sd";
// fca.md "Routing flip rate".
inline constexpr char kRoutingFlipRate[] = "routing_flip_rate";
inline constexpr char kLayerRoutingFlipRate[] = "layer_routing_flip_rate";

// In report order.
enum class MetricId : uint8_t {
  kNll,
  kPenalty,
  kRetentionPct,
  kUnseenTokenPositions,
  kUnseenTokenIds,
  kShrunkIds,
  kShrunkCells,
  kLayerNll,
  kLayerPenalty,
  kSiteNll,
  kSitePenalty,
  kFamilyNll,
  kFamilyPenalty,
  kTopkAgreement,
  kLayerTopkAgreement,
  kTopkOverlap,
  kLayerTopkOverlap,
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
  kRouterUsPerToken,
  kDispatchUsPerToken,
  kExpertsUsPerToken,
  kDenseMlpUsPerToken,
  kSlowdown,
  kSlowdownVerdict,
  kActiveParameters,
  kExpertsPerToken,
  kExpertLoadEntropy,
  kExpertShare,
  kExpertCoactivation,
  kTokenExpertShare,
  kLiveNll,
  kMaxAbsLogitDiff,
  kFidelityCheckedWindows,
  kRetentionVs,
  kRetentionDropped,
  kPenaltyBlock,
  kPenaltyLag1,
  kPenaltyPHolm,
  kBootstrapBlockLength,
  kEta2Token,
  kEta2TokenPosition,
  kSiteEta2Token,
  kSiteEta2TokenPosition,
  kEta2TokenOos,
  kEta2TokenPositionOos,
  kSiteEta2TokenOos,
  kSiteEta2TokenPositionOos,
  kLookupTable,
  kSlowdownFirstBlock,
  kSlowdownSecondBlock,
  kGroupPenaltySum,
  kGroupAdditivity,
  kGroupAdditivityDropped,
  kSimplexValued,
  kPenaltyCalib,
  kPenaltyCalibSd,
  kRoutingFlipRate,
  kLayerRoutingFlipRate,
};

struct MetricDef {
  MetricId id;
  const char* name;   // without a key (common/result_key.h): "eta2"
  MetricScope scope;  // what its rows are keyed by: kFamily, "eta2.attn_gate"
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
// pattern ("eta2.<family>"). nullptr for a name it does not know. Only
// ResultKeyOf (common/result_key.h) reads a stored name's key.
const MetricDef* FindMetric(std::string_view stored_name);
std::optional<MetricId> ParseMetric(std::string_view stored_name);
// The definition of a key's metric name ("eta2"); nullptr when unknown.
const MetricDef* FindMetricByName(std::string_view metric);
// "eta2.<family>": how GetServerInfo and docs/fca.md name a keyed metric.
std::string MetricPattern(const MetricDef& metric);
// The unit of a key's metric name ("layer_penalty"), "" when unknown.
std::string MetricUnit(std::string_view metric);

// A value of a coded metric and the word reports print for it.
struct ValueWord {
  double value;
  const char* word;
};
// The words of a coded metric's values (slowdown_verdict, docs/fca.md
// "Execution": +1 "slower", -1 "faster", 0 "no detectable difference");
// empty for a numeric metric. The CLI prints them and GetServerInfo serves
// them (MetricInfo.value_words) to the dashboard: their one home.
const std::vector<ValueWord>& ValueWordsOf(MetricId metric);
// The word of a slowdown_verdict value, by its sign.
const char* SlowdownVerdictName(double verdict);

}  // namespace fca

#endif  // FCA_COMMON_VOCABULARY_H_
