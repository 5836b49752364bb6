#include "common/vocabulary.h"

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

const char* KeyPlaceholder(MetricKey key) {
  switch (key) {
    case MetricKey::kNone:
      return "";
    case MetricKey::kLayer:
      return "<layer>";
    case MetricKey::kSite:
      return "<site>";
    case MetricKey::kFamily:
      return "<family>";
    case MetricKey::kLayerExpert:
      return "<layer>.<expert>";
  }
  return "";
}

}  // namespace

const std::vector<InterventionDef>& InterventionDefs() {
  using I = InterventionId;
  static const auto* defs = new std::vector<InterventionDef>{
      {I::kCorrect, kCorrect, false, "each input's own coefficients A(x_i): the reference"},
      {I::kCrossInput, kCrossInput, false,
       "the coefficients of another input, A(x_pi(i)), pi a seeded derangement"},
      {I::kTokenShuffle, kTokenShuffle, false,
       "each input's coefficients with positions permuted (seeded, one permutation per "
       "sequence unless per-site)"},
      {I::kStaticLayer, kStaticLayer, true,
       "per-site, per-channel mean over the calibration set, for every token"},
      {I::kStaticLayerPosition, kStaticLayerPosition, true,
       "per-site, per-position, per-channel mean over the calibration set"},
      {I::kGlobalMean, kGlobalMean, false,
       "one scalar per family: the calibration mean over sites, positions, channels"},
      {I::kStaticToken, kStaticToken, true,
       "per site, the calibration mean of the coefficients at positions with the same current "
       "token id (the site mean for ids unseen in calibration)"},
      {I::kNeutral, kNeutral, false,
       "the controller removed: FeatureGate gates 1, MUDDPythia the static dense_bs alone"},
  };
  return *defs;
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

const std::vector<std::string>& InterventionNames() {
  static const auto* names = NewNames(InterventionDefs());
  return *names;
}

std::string InterventionNameList(std::string_view separator) {
  return JoinNames(InterventionDefs(), separator);
}

std::vector<std::string> StaticProfileNames() {
  std::vector<std::string> out;
  for (const InterventionDef& d : InterventionDefs()) {
    if (d.static_profile) out.emplace_back(d.name);
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

const std::vector<MetricDef>& MetricDefs() {
  using M = MetricId;
  using K = MetricKey;
  static const auto* defs = new std::vector<MetricDef>{
      {M::kNll, kNll, K::kNone, "", "nats/token", "NLL",
       "mean next-token negative log-likelihood over the predicted positions of the evaluation "
       "windows"},
      {M::kPenalty, kPenalty, K::kNone, "", "nats/token", "penalty",
       "NLL(intervention) - NLL(correct), with a paired bootstrap CI over sequences"},
      {M::kRetentionPct, kRetentionPct, K::kNone, "", "%", "gap retention",
       "gap retention of a static profile P: 100 * (NLL(global_mean) - NLL(P)) / "
       "(NLL(global_mean) - NLL(correct)); undefined when the gap is ~0"},
      {M::kUnseenTokenPositions, kUnseenTokenPositions, K::kNone, kStaticToken, "positions",
       "unseen token positions",
       "evaluation positions whose token id never occurs in the calibration set (static_token "
       "uses the site mean mu_s there)"},
      {M::kUnseenTokenIds, kUnseenTokenIds, K::kNone, kStaticToken, "ids", "unseen token ids",
       "distinct token ids of those positions"},
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
      {M::kParameters, kParameters, K::kNone, kExecution, "parameters", "parameters",
       "the model's parameters: elements of the tensors in its weights"},
      {M::kBlocksPerToken, kBlocksPerToken, K::kNone, kExecution, "blocks/token",
       "blocks per token", "blocks executed per token (counted)"},
      {M::kBlocksExecutedFraction, kBlocksExecutedFraction, K::kNone, kExecution, "1",
       "blocks executed (fraction)", "blocks executed / blocks present"},
      {M::kFlopsPerToken, kFlopsPerToken, K::kNone, kExecution, "FLOP/token", "FLOPs per token",
       "counted matmul FLOPs per token, LIVE pass"},
      {M::kReplayFlopsPerToken, kReplayFlopsPerToken, K::kNone, kExecution, "FLOP/token",
       "replay FLOPs per token", "counted matmul FLOPs per token under REPLAY (controller off)"},
      {M::kDenseFlopsPerToken, kDenseFlopsPerToken, K::kNone, kExecution, "FLOP/token",
       "dense twin FLOPs per token",
       "the dense twin's counted matmul FLOPs per token on the same batch"},
      {M::kFlopsOverhead, kFlopsOverhead, K::kNone, kExecution, "1", "FLOPs vs dense twin",
       "FLOPs per token of the model (LIVE) / the dense twin's - 1: the extra work counted"},
      {M::kLatencyUsPerToken, kLatencyUsPerToken, K::kNone, kExecution, "us/token",
       "latency (us/token)", "median wall-clock LIVE forward latency per token"},
      {M::kDenseLatencyUsPerToken, kDenseLatencyUsPerToken, K::kNone, kExecution, "us/token",
       "dense twin latency (us/token)",
       "the dense twin's median latency per token, timed in the same pairs as the model"},
      {M::kSlowdown, kSlowdown, K::kNone, kExecution, "1", "slowdown vs dense twin (CI)",
       "geometric mean over interleaved pairs of t_model / t_dense, minus 1, with a bootstrap CI "
       "over pairs; n = pairs timed"},
      {M::kSlowdownVerdict, kSlowdownVerdict, K::kNone, kExecution, "1",
       "verdict: +1 slower, \u22121 faster, 0 no detectable difference",
       "+1 slower than the dense twin (CI above 0), -1 faster (CI below 0), 0 no detectable "
       "difference at this precision (CI contains 0)"},
      {M::kActiveParameters, kActiveParameters, K::kNone, kExecution, "parameters",
       "active parameters",
       "parameters a token's LIVE forward reads, averaged over tokens (a "
       "mixture of experts reads its routed experts only)"},
      {M::kExpertsPerToken, kExpertsPerToken, K::kLayer, kExecution, "experts/token",
       "experts per token, one layer", "routed experts executed per token at one layer, LIVE"},
      {M::kExpertLoadEntropy, kExpertLoadEntropy, K::kLayer, kExecution, "nats",
       "expert load entropy, one layer",
       "entropy of the expert shares of one layer, LIVE: ln(experts) when balanced, 0 when one "
       "expert takes every token"},
      {M::kExpertShare, kExpertShare, K::kLayerExpert, kExecution, "1", "expert share",
       "share of one layer's (token, expert) assignments that went to one expert, LIVE"},
      {M::kLiveNll, kLiveNll, K::kNone, kReplay, "nats/token", "live NLL",
       "NLL of the LIVE pass on the evaluation windows"},
      {M::kMaxAbsLogitDiff, kMaxAbsLogitDiff, K::kNone, kReplay, "logit",
       "replay max |\u0394logit|",
       "replay fidelity: largest |logit| difference of REPLAY(A(x)) against LIVE"},
      {M::kFidelityCheckedWindows, kFidelityCheckedWindows, K::kNone, kReplay, "windows",
       "fidelity-checked windows",
       "evaluation windows whose correct replay was compared with a LIVE pass (at least the "
       "first batch, even when every window is cached)"},
  };
  return *defs;
}

const MetricDef& MetricDefOf(MetricId id) { return MetricDefs()[static_cast<size_t>(id)]; }

const MetricDef* FindMetric(std::string_view stored_name) {
  for (const MetricDef& d : MetricDefs()) {
    const std::string_view name = d.name;
    if (d.key == MetricKey::kNone) {
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

std::string MetricPattern(const MetricDef& metric) {
  if (metric.key == MetricKey::kNone) return metric.name;
  return KeyedMetric(metric.name, KeyPlaceholder(metric.key));
}

std::string KeyedMetric(std::string_view metric, std::string_view key) {
  std::string out(metric);
  out += '.';
  out += key;
  return out;
}

std::string MetricUnit(std::string_view stored_name) {
  const MetricDef* d = FindMetric(stored_name);
  return d == nullptr ? "" : d->unit;
}

}  // namespace fca
