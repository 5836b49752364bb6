#include "common/vocabulary.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace fca {
namespace {

// The names of `defs` with `separator` between them.
template <typename Def>
std::string JoinNames(const std::vector<Def>& defs, std::string_view separator) {
  std::string out;
  for (const Def& d : defs) {
    if (!out.empty()) out += separator;
    out += d.name;
  }
  return out;
}

// The names of `defs`, kept for the life of the process.
template <typename Def>
const std::vector<std::string>* NewNames(const std::vector<Def>& defs) {
  auto* out = new std::vector<std::string>;
  for (const Def& d : defs) out->emplace_back(d.name);
  return out;
}

}  // namespace

const std::vector<InterventionDef>& InterventionDefs() {
  static const auto* defs = new std::vector<InterventionDef>{
#define FCA_INTERVENTION_DEF(id, name, static_profile, calibrated, group, description) \
  {InterventionId::id, name, static_profile, calibrated, InterventionGroup::group, description},
      FCA_INTERVENTIONS(FCA_INTERVENTION_DEF)
#undef FCA_INTERVENTION_DEF
  };
  return *defs;
}

const std::vector<InterventionGroupDef>& InterventionGroupDefs() {
  using G = InterventionGroup;
  static const auto* defs = new std::vector<InterventionGroupDef>{
      {G::kInputDependent, "input-dependent", ""},
      {G::kInputIndependent, "input-independent", ""},
      {G::kTokenKeyed, "token-keyed", " (explained by the current token)"},
  };
  return *defs;
}

const InterventionGroupDef& InterventionGroupDefOf(InterventionGroup group) {
  return InterventionGroupDefs()[static_cast<size_t>(group)];
}

const InterventionGroupDef* FindInterventionGroup(std::string_view intervention) {
  const std::optional<InterventionId> id = ParseIntervention(intervention);
  if (!id) return nullptr;
  return &InterventionGroupDefOf(InterventionDefOf(*id).group);
}

std::vector<std::string> InGroupOrder(const std::vector<std::string>& interventions) {
  std::vector<std::string> out = interventions;
  auto rank = [](const std::string& name) {
    const InterventionGroupDef* g = FindInterventionGroup(name);
    return g == nullptr ? InterventionGroupDefs().size() : static_cast<size_t>(g->id);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return out;
}

const InterventionDef& InterventionDefOf(InterventionId id) {
  return InterventionDefs()[static_cast<size_t>(id)];
}

std::optional<InterventionId> ParseIntervention(std::string_view name) {
  for (const InterventionDef& d : InterventionDefs()) {
    if (name == d.name) return d.id;
  }
  return std::nullopt;
}

const char* InterventionName(InterventionId id) { return InterventionDefOf(id).name; }

absl::StatusOr<std::vector<InterventionId>> ParseInterventionList(
    const std::vector<std::string>& names, std::string_view field, bool allow_correct) {
  std::vector<InterventionId> out;
  for (const std::string& name : names) {
    const std::optional<InterventionId> id = ParseIntervention(name);
    if (!id || (!allow_correct && *id == InterventionId::kCorrect)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown %s '%s' (known: %s%s)", field, name.substr(0, 64), InterventionNameList(),
          allow_correct ? "" : "; not correct, the reference"));
    }
    if (std::find(out.begin(), out.end(), *id) != out.end()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s '%s' is listed twice", field, name));
    }
    out.push_back(*id);
  }
  return out;
}

std::vector<std::string> InterventionNamesOf(const std::vector<InterventionId>& ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (InterventionId id : ids) out.emplace_back(InterventionName(id));
  return out;
}

const std::vector<std::string>& InterventionNames() {
  static const auto* names = NewNames(InterventionDefs());
  return *names;
}

std::string InterventionNameList(std::string_view separator) {
  return JoinNames(InterventionDefs(), separator);
}

std::vector<InterventionId> StaticProfiles() {
  std::vector<InterventionId> out;
  for (const InterventionDef& d : InterventionDefs()) {
    if (d.static_profile) out.push_back(d.id);
  }
  return out;
}

std::vector<std::string> StaticProfileNames() { return InterventionNamesOf(StaticProfiles()); }

std::vector<InterventionId> CalibratedInterventions() {
  std::vector<InterventionId> out;
  for (const InterventionDef& d : InterventionDefs()) {
    if (d.calibrated) out.push_back(d.id);
  }
  return out;
}

const std::vector<ScopeDef>& ScopeDefs() {
  static const auto* defs = new std::vector<ScopeDef>{
      {ScopeId::kLayer, kScopeLayer, kLayerNll, kLayerPenalty},
      {ScopeId::kSite, kScopeSite, kSiteNll, kSitePenalty},
      {ScopeId::kFamily, kScopeFamily, kFamilyNll, kFamilyPenalty},
  };
  return *defs;
}

const ScopeDef* FindScope(std::string_view name) {
  for (const ScopeDef& d : ScopeDefs()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const ScopeDef& ScopeDefOf(ScopeId id) { return ScopeDefs()[static_cast<size_t>(id)]; }

std::optional<ScopeId> ParseScope(std::string_view name) {
  const ScopeDef* def = FindScope(name);
  if (def == nullptr) return std::nullopt;
  return def->id;
}

const char* ScopeName(ScopeId id) { return ScopeDefOf(id).name; }

const std::vector<std::string>& ScopeNames() {
  static const auto* names = NewNames(ScopeDefs());
  return *names;
}

std::string ScopeNameList(std::string_view separator) { return JoinNames(ScopeDefs(), separator); }

const std::vector<ComputeDTypeDef>& ComputeDTypeDefs() {
  static const auto* defs = new std::vector<ComputeDTypeDef>{
#define FCA_COMPUTE_DTYPE_DEF(id, name, bytes) {ComputeDType::id, name, bytes},
      FCA_COMPUTE_DTYPES(FCA_COMPUTE_DTYPE_DEF)
#undef FCA_COMPUTE_DTYPE_DEF
  };
  return *defs;
}

const ComputeDTypeDef& ComputeDTypeDefOf(ComputeDType id) {
  return ComputeDTypeDefs()[static_cast<size_t>(id)];
}

std::optional<ComputeDType> ParseComputeDType(std::string_view name) {
  for (const ComputeDTypeDef& d : ComputeDTypeDefs()) {
    if (name == d.name) return d.id;
  }
  return std::nullopt;
}

const char* ComputeDTypeName(ComputeDType id) { return ComputeDTypeDefOf(id).name; }

std::string ComputeDTypeNameList(std::string_view separator) {
  return JoinNames(ComputeDTypeDefs(), separator);
}

absl::StatusOr<ComputeDType> ParseComputeDTypeFlag(std::string_view value) {
  const std::optional<ComputeDType> dtype = ParseComputeDType(value);
  if (dtype) return *dtype;
  return absl::InvalidArgumentError(absl::StrFormat("--dtype='%s' is not one of: %s",
                                                    value.substr(0, 64), ComputeDTypeNameList()));
}

const std::vector<InterventionId>& RetentionBaselines() {
  static const auto* ids =
      new std::vector<InterventionId>{InterventionId::kGlobalMean, InterventionId::kNeutral};
  return *ids;
}

bool IsRetentionBaseline(InterventionId id) {
  const std::vector<InterventionId>& ids = RetentionBaselines();
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

const std::vector<std::string>& RetentionBaselineNames() {
  static const auto* names =
      new std::vector<std::string>(InterventionNamesOf(RetentionBaselines()));
  return *names;
}

const std::vector<MetricDef>& MetricDefs() {
  using M = MetricId;
  using K = MetricScope;
  static const auto* defs = new std::vector<MetricDef>{
      {M::kNll, kNll, K::kModel, "", "nats/token", "NLL",
       "mean next-token negative log-likelihood over the predicted positions of the evaluation "
       "windows"},
      {M::kPenalty, kPenalty, K::kModel, "", "nats/token", "penalty",
       "NLL(intervention) - NLL(correct), with a paired bootstrap CI over sequences"},
      {M::kRetentionPct, kRetentionPct, K::kModel, "", "%", "gap retention",
       "gap retention of a static profile P against the job's retention_baseline B (default "
       "global_mean): 100 * (NLL(B) - NLL(P)) / (NLL(B) - NLL(correct)); undefined unless the "
       "gap's CI lies above 0"},
      {M::kUnseenTokenPositions, kUnseenTokenPositions, K::kModel, kStaticToken, "positions",
       "unseen token positions",
       "scored evaluation positions (0..T-2) whose token id never occurs in the calibration set "
       "(static_token "
       "uses the site mean mu_s there)"},
      {M::kUnseenTokenIds, kUnseenTokenIds, K::kModel, kStaticToken, "ids", "unseen token ids",
       "distinct token ids of those positions"},
      {M::kShrunkIds, kShrunkIds, K::kModel, kStaticToken, "ids", "shrunk token ids",
       "token ids seen in calibration fewer than static_token_min_count times: their mean is "
       "shrunk towards the site mean with weight n / (n + static_token_min_count)"},
      {M::kShrunkCells, kShrunkCells, K::kModel, kStaticTokenPosition, "cells",
       "shrunk (token id, position) cells",
       "(token id, position) cells seen in calibration fewer than static_token_min_count times: "
       "their mean is shrunk towards their token id's value with weight n / (n + "
       "static_token_min_count)"},
      {M::kLayerNll, kLayerNll, K::kLayer, "", "nats/token", "NLL, intervention at one layer",
       "NLL with the intervention at one layer's sites and the correct coefficients elsewhere"},
      {M::kLayerPenalty, kLayerPenalty, K::kLayer, "", "nats/token",
       "penalty, intervention at one layer",
       "layer_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {M::kSiteNll, kSiteNll, K::kSite, "", "nats/token", "NLL, intervention at one site",
       "NLL with the intervention at one site and the correct coefficients elsewhere"},
      {M::kSitePenalty, kSitePenalty, K::kSite, "", "nats/token",
       "penalty, intervention at one site",
       "site_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {M::kFamilyNll, kFamilyNll, K::kFamily, "", "nats/token", "NLL, intervention at one family",
       "NLL with the intervention at one family's sites and the correct coefficients elsewhere"},
      {M::kFamilyPenalty, kFamilyPenalty, K::kFamily, "", "nats/token",
       "penalty, intervention at one family",
       "family_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {M::kTopkAgreement, kTopkAgreement, K::kModel, "", "1", "top-k agreement with LIVE",
       "mixture of experts: fraction of (token, router layer) whose chosen expert set under the "
       "intervention equals LIVE's"},
      {M::kLayerTopkAgreement, kLayerTopkAgreement, K::kLayer, "", "1",
       "top-k agreement with LIVE, one layer",
       "mixture of experts: fraction of one layer's tokens whose chosen expert set under the "
       "intervention equals LIVE's"},
      {M::kTopkOverlap, kTopkOverlap, K::kModel, "", "1", "top-k overlap with LIVE",
       "mixture of experts: mean over (token, router layer) of |S \u2229 S_live| / k, the share "
       "of LIVE's k experts the intervention still chooses"},
      {M::kLayerTopkOverlap, kLayerTopkOverlap, K::kLayer, "", "1",
       "top-k overlap with LIVE, one layer",
       "mixture of experts: mean over one layer's tokens of |S \u2229 S_live| / k"},
      {M::kEta2, kEta2, K::kFamily, kVariation, "1", "eta2 (per site and channel)",
       "variance of the family's coefficients explained by per-(site, channel) means: "
       "1 - SS around mu_{s,c} / SS around the family mean"},
      {M::kEta2Layer, kEta2Layer, K::kFamily, kVariation, "1", "eta2 layer (one mean per site)",
       "variance explained by layer identity, one mean per site: 1 - SS around mu_s / SS "
       "around the family mean"},
      {M::kTotalVariance, kTotalVariance, K::kFamily, kVariation, "coef^2", "total variance",
       "variance of the family's coefficients around the family mean"},
      {M::kWithinSiteVariance, kWithinSiteVariance, K::kFamily, kVariation, "coef^2",
       "within-site variance", "variance around the per-(site, channel) means"},
      {M::kBetweenInputVariance, kBetweenInputVariance, K::kFamily, kVariation, "coef^2",
       "between-input variance",
       "part of the within-site variance carried by per-sequence means (varies across inputs)"},
      {M::kWithinInputVariance, kWithinInputVariance, K::kFamily, kVariation, "coef^2",
       "within-input variance",
       "part of the within-site variance within sequences (varies across tokens)"},
      {M::kSiteMean, kSiteMean, K::kSite, kVariation, "coef", "site mean",
       "mean coefficient of one site over sequences, positions and channels"},
      {M::kSiteVariance, kSiteVariance, K::kSite, kVariation, "coef^2", "site variance",
       "variance of one site's coefficients around its per-channel means"},
      {M::kParameters, kParameters, K::kModel, kExecution, "parameters", "parameters",
       "the model's parameters: elements of the tensors in its weights"},
      {M::kBlocksPerToken, kBlocksPerToken, K::kModel, kExecution, "blocks/token",
       "blocks per token", "blocks executed per token (counted)"},
      {M::kBlocksExecutedFraction, kBlocksExecutedFraction, K::kModel, kExecution, "1",
       "blocks executed (fraction)", "blocks executed / blocks present"},
      {M::kFlopsPerToken, kFlopsPerToken, K::kModel, kExecution, "FLOP/token", "FLOPs per token",
       "counted matmul FLOPs per token, LIVE pass"},
      {M::kReplayFlopsPerToken, kReplayFlopsPerToken, K::kModel, kExecution, "FLOP/token",
       "replay FLOPs per token", "counted matmul FLOPs per token under REPLAY (controller off)"},
      {M::kDenseFlopsPerToken, kDenseFlopsPerToken, K::kModel, kExecution, "FLOP/token",
       "dense twin FLOPs per token",
       "the dense twin's counted matmul FLOPs per token on the same batch"},
      {M::kFlopsOverhead, kFlopsOverhead, K::kModel, kExecution, "1", "FLOPs vs dense twin",
       "FLOPs per token of the model (LIVE) / the dense twin's - 1: the extra work counted"},
      {M::kLatencyUsPerToken, kLatencyUsPerToken, K::kModel, kExecution, "us/token",
       "latency (us/token)", "median wall-clock LIVE forward latency per token"},
      {M::kDenseLatencyUsPerToken, kDenseLatencyUsPerToken, K::kModel, kExecution, "us/token",
       "dense twin latency (us/token)",
       "the dense twin's median latency per token, timed in the same pairs as the model"},
      {M::kRouterUsPerToken, kRouterUsPerToken, K::kModel, kExecution, "us/token",
       "router (us/token)",
       "a mixture of experts' routers (logits and softmax), mean over the timing's LIVE "
       "forwards, CPU only"},
      {M::kDispatchUsPerToken, kDispatchUsPerToken, K::kModel, kExecution, "us/token",
       "dispatch (us/token)",
       "top-k, grouping tokens by expert, gathering them and the weighted combine: the data "
       "movement of routing; mean over the timing's LIVE forwards, CPU only"},
      {M::kExpertsUsPerToken, kExpertsUsPerToken, K::kModel, kExecution, "us/token",
       "experts (us/token)",
       "the routed (and shared) experts' MLPs, mean over the timing's LIVE forwards, CPU only"},
      {M::kDenseMlpUsPerToken, kDenseMlpUsPerToken, K::kModel, kExecution, "us/token",
       "dense twin MLP (us/token)",
       "the dense twin's MLP branches (the MLP after its norm) in the same pairs, beside a mixture "
       "of "
       "experts' parts; CPU only"},
      {M::kSlowdown, kSlowdown, K::kModel, kExecution, "1", "slowdown vs dense twin (CI)",
       "geometric mean over interleaved pairs of t_model / t_dense, minus 1, with a t-interval "
       "over the pairs of both timing blocks; n = pairs timed"},
      {M::kSlowdownVerdict, kSlowdownVerdict, K::kModel, kExecution, "1",
       "verdict: +1 slower, \u22121 faster, 0 no detectable difference",
       "+1 slower than the dense twin (both timing blocks' CIs above 0), -1 faster (both below "
       "0), 0 no detectable difference (the blocks disagree or a CI contains 0)"},
      {M::kActiveParameters, kActiveParameters, K::kModel, kExecution, "parameters",
       "active parameters",
       "parameters a token's LIVE forward reads, averaged over tokens (a "
       "mixture of experts reads its routed experts only)"},
      {M::kExpertsPerToken, kExpertsPerToken, K::kLayer, kExecution, "experts/token",
       "experts per token, one layer", "routed experts executed per token at one layer, LIVE"},
      {M::kExpertLoadEntropy, kExpertLoadEntropy, K::kLayer, kExecution, "nats",
       "expert load entropy, one layer",
       "entropy of the expert shares of one layer, LIVE: ln(experts) when balanced, 0 when one "
       "expert takes every token"},
      {M::kExpertShare, kExpertShare, K::kExpert, kExecution, "1", "expert share",
       "share of one layer's (token, expert) assignments that went to one expert, LIVE"},
      {M::kExpertCoactivation, kExpertCoactivation, K::kExpertPair, kExecution, "1",
       "expert co-activation",
       "fraction of the evaluation tokens whose LIVE top-k at one layer holds both experts of "
       "the pair (expert < partner)"},
      {M::kTokenExpertShare, kTokenExpertShare, K::kTokenExpert, kExecution, "1",
       "expert share of a token id",
       "one of the most frequent token ids: the share of its (token, expert) assignments at one "
       "layer that went to one of its k most chosen experts, LIVE; n = its positions"},
      {M::kLiveNll, kLiveNll, K::kModel, kReplay, "nats/token", "live NLL",
       "NLL of the LIVE pass on the evaluation windows"},
      {M::kMaxAbsLogitDiff, kMaxAbsLogitDiff, K::kModel, kReplay, "logit",
       "replay max |\u0394logit|",
       "replay fidelity: largest |logit| difference of REPLAY(A(x)) against LIVE"},
      {M::kFidelityCheckedWindows, kFidelityCheckedWindows, K::kModel, kReplay, "windows",
       "fidelity-checked windows",
       "evaluation windows whose correct replay was compared with a LIVE pass (at least the "
       "first batch, even when every window is cached)"},
      {M::kRetentionVs, kRetentionVs, K::kBaseline, "", "%", "gap retention vs baseline",
       "100 * (NLL(B) - NLL(P)) / (NLL(B) - NLL(correct)) against the baseline B named in the "
       "row; undefined unless the gap's CI (B's block CI, penalty_block) lies above 0"},
      {M::kRetentionDropped, kRetentionDropped, K::kBaseline, "", "resamples",
       "retention resamples dropped",
       "bootstrap resamples of the retention against B whose gap was not positive (no R)"},
      {M::kPenaltyBlock, kPenaltyBlock, K::kModel, "", "nats/token", "penalty (block CI)",
       "the penalty with a circular block bootstrap CI over consecutive evaluation windows (block "
       "length: replay/bootstrap_block_length)"},
      {M::kPenaltyLag1, kPenaltyLag1, K::kModel, "", "1", "lag-1 autocorrelation",
       "lag-1 autocorrelation of the per-window NLL differences (intervention - correct) in "
       "window order"},
      {M::kPenaltyPHolm, kPenaltyPHolm, K::kModel, "", "1", "penalty p (Holm)",
       "bootstrap p-value of penalty = 0 on the block CI's resamples, Holm-adjusted over the "
       "model's penalties"},
      {M::kBootstrapBlockLength, kBootstrapBlockLength, K::kModel, kReplay, "windows",
       "bootstrap block length", "the circular block bootstrap's block length in windows"},
      {M::kEta2Token, kEta2Token, K::kFamily, kVariation, "1", "eta2 token",
       "share of the family's within-site variance explained by the current token id (in "
       "sample on E, positions whose token occurs at least twice: high by chance with few "
       "repeats per token); n = those positions"},
      {M::kEta2TokenPosition, kEta2TokenPosition, K::kFamily, kVariation, "1",
       "eta2 (token, position)",
       "share of the family's within-site variance explained by (token id, position); n = "
       "positions whose pair occurs at least twice"},
      {M::kSiteEta2Token, kSiteEta2Token, K::kSite, kVariation, "1", "site eta2 token",
       "share of one site's variance explained by the current token id"},
      {M::kSiteEta2TokenPosition, kSiteEta2TokenPosition, K::kSite, kVariation, "1",
       "site eta2 (token, position)",
       "share of one site's variance explained by (token id, position)"},
      {M::kEta2TokenOos, kEta2TokenOos, K::kFamily, kVariation, "1", "eta2 token (out of sample)",
       "share of the family's within-site variance on E that C's static_token table explains "
       "(E's scored positions; negative when it predicts worse than E's mean); n = positions"},
      {M::kEta2TokenPositionOos, kEta2TokenPositionOos, K::kFamily, kVariation, "1",
       "eta2 (token, position) (out of sample)",
       "the same for C's static_token_position table; n = positions"},
      {M::kSiteEta2TokenOos, kSiteEta2TokenOos, K::kSite, kVariation, "1",
       "site eta2 token (out of sample)",
       "share of one site's variance on E that C's static_token table explains"},
      {M::kSiteEta2TokenPositionOos, kSiteEta2TokenPositionOos, K::kSite, kVariation, "1",
       "site eta2 (token, position) (out of sample)",
       "share of one site's variance on E that C's static_token_position table explains"},
      {M::kLookupTable, kLookupTable, K::kSite, kVariation, "1", "lookup table",
       "1 when the site's coefficients on E are an exact function of (token id, position) "
       "(site eta2 (token, position) >= 1 - 1e-9), else 0; expected from the architecture where "
       "the controller sees only the current token's embedding and its position"},
      {M::kSlowdownFirstBlock, kSlowdownFirstBlock, K::kModel, kExecution, "1",
       "slowdown, first timing block (CI)",
       "the slowdown and its t-interval over the first timing block's pairs (adaptive stop); n = "
       "its pairs"},
      {M::kSlowdownSecondBlock, kSlowdownSecondBlock, K::kModel, kExecution, "1",
       "slowdown, second timing block (CI)",
       "the slowdown and its t-interval over the second block: as many pairs as the first, fixed "
       "before it ran; n = its pairs"},
      {M::kGroupPenaltySum, kGroupPenaltySum, K::kModel, "", "nats/token",
       "sum of the per-group penalties",
       "the sum over the groups of per_layer_scope of the intervention's per-group penalties; n = "
       "groups"},
      {M::kGroupAdditivity, kGroupAdditivity, K::kModel, "", "1", "additivity of the groups",
       "group_penalty_sum / the whole-model penalty (1: the groups' penalties add up to the "
       "joint one), with its block bootstrap CI; undefined unless the joint penalty's block CI "
       "lies above 0"},
      {M::kGroupAdditivityDropped, kGroupAdditivityDropped, K::kModel, "", "resamples",
       "additivity resamples dropped",
       "bootstrap resamples of group_additivity whose joint penalty mean was not positive (no "
       "ratio); n = groups"},
      {M::kSimplexValued, kSimplexValued, K::kFamily, kVariation, "1", "simplex-valued",
       "1 when every site of the family has coefficients on the simplex (a softmax router): "
       "eta2_layer is then not applicable (undefined)"},
      {M::kPenaltyCalib, kPenaltyCalib, K::kModel, "", "nats/token",
       "penalty (CI with calibration)",
       "the penalty with a CI that also covers calibration uncertainty: each bootstrap resample "
       "of the evaluation windows (circular blocks) replays a profile re-estimated on a "
       "circular block resample of the calibration windows; n = calibration resamples"},
      {M::kPenaltyCalibSd, kPenaltyCalibSd, K::kModel, "", "nats/token",
       "penalty sd over calibration resamples",
       "sample sd of the penalty over the calibration resamples (the evaluation windows fixed): "
       "the calibration part of the uncertainty alone; n = calibration resamples"},
      {M::kRoutingFlipRate, kRoutingFlipRate, K::kModel, kReplay, "1", "routing flip rate",
       "routers audited in bfloat16 or float16: the fraction of (token, router layer) of E whose "
       "chosen expert set differs from the one chosen in a float32 recording of the same "
       "windows (precision alone); n = (token, layer) pairs"},
      {M::kLayerRoutingFlipRate, kLayerRoutingFlipRate, K::kLayer, kReplay, "1",
       "routing flip rate, one layer", "the routing flip rate at one router layer; n = its tokens"},
  };
  return *defs;
}

const MetricDef& MetricDefOf(MetricId id) { return MetricDefs()[static_cast<size_t>(id)]; }

const std::vector<ValueWord>& ValueWordsOf(MetricId metric) {
  static const auto* const kVerdicts =
      new std::vector<ValueWord>{{1, "slower"}, {-1, "faster"}, {0, "no detectable difference"}};
  static const auto* const kNone = new std::vector<ValueWord>();
  return metric == MetricId::kSlowdownVerdict ? *kVerdicts : *kNone;
}

const char* SlowdownVerdictName(double verdict) {
  const double sign = verdict > 0 ? 1 : verdict < 0 ? -1 : 0;
  for (const ValueWord& w : ValueWordsOf(MetricId::kSlowdownVerdict)) {
    if (w.value == sign) return w.word;
  }
  return "";  // unreachable: every sign has its word
}

const MetricDef* FindMetric(std::string_view stored_name) {
  for (const MetricDef& d : MetricDefs()) {
    const std::string_view name = d.name;
    if (d.scope == MetricScope::kModel) {
      if (stored_name == name) return &d;
      continue;
    }
    // "name." and a non-empty key.
    if (stored_name.size() > name.size() + 1 && stored_name.substr(0, name.size()) == name &&
        stored_name[name.size()] == '.') {
      return &d;
    }
  }
  return nullptr;
}

std::optional<MetricId> ParseMetric(std::string_view stored_name) {
  const MetricDef* d = FindMetric(stored_name);
  if (d == nullptr) return std::nullopt;
  return d->id;
}

const MetricDef* FindMetricByName(std::string_view metric) {
  for (const MetricDef& d : MetricDefs()) {
    if (metric == d.name) return &d;
  }
  return nullptr;
}

std::string MetricPattern(const MetricDef& metric) {
  std::string out = metric.name;
  for (KeyField field : MetricScopeDefOf(metric.scope).fields) {
    out += '.';
    out += KeyFieldPlaceholder(field);
  }
  return out;
}

std::string MetricUnit(std::string_view metric) {
  const MetricDef* d = FindMetricByName(metric);
  return d == nullptr ? "" : d->unit;
}

}  // namespace fca
