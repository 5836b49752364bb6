#include "server/core/metric_catalog.h"

namespace fca::core {
namespace {

// True when `metric` is `name`, or `name` is a pattern "prefix.<...>" and
// `metric` is "prefix." followed by something.
bool Matches(const std::string& name, const std::string& metric) {
  const size_t open = name.find(".<");
  if (open == std::string::npos) return name == metric;
  const size_t prefix = open + 1;  // keeps the dot
  return metric.size() > prefix && metric.compare(0, prefix, name, 0, prefix) == 0;
}

}  // namespace

const std::vector<MetricEntry>& MetricCatalog() {
  static const auto* catalog = new std::vector<MetricEntry>{
      {"nll", "", "nats/token",
       "mean next-token negative log-likelihood over the predicted positions of the evaluation "
       "windows"},
      {"penalty", "", "nats/token",
       "NLL(intervention) - NLL(correct), with a paired bootstrap CI over sequences"},
      {"retention_pct", "", "%",
       "gap retention of a static profile P: 100 * (NLL(global_mean) - NLL(P)) / "
       "(NLL(global_mean) - NLL(correct)); undefined when the gap is ~0"},
      {"unseen_token_positions", "static_token", "positions",
       "evaluation positions whose token id never occurs in the calibration set (static_token "
       "uses the site mean mu_s there)"},
      {"unseen_token_ids", "static_token", "ids", "distinct token ids of those positions"},
      {"layer_nll.<layer>", "", "nats/token",
       "NLL with the intervention at one layer's sites and the correct coefficients elsewhere"},
      {"layer_penalty.<layer>", "", "nats/token",
       "layer_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {"site_nll.<site>", "", "nats/token",
       "NLL with the intervention at one site and the correct coefficients elsewhere"},
      {"site_penalty.<site>", "", "nats/token",
       "site_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {"family_nll.<family>", "", "nats/token",
       "NLL with the intervention at one family's sites and the correct coefficients elsewhere"},
      {"family_penalty.<family>", "", "nats/token",
       "family_nll - NLL(correct), with a paired bootstrap CI over sequences"},
      {"eta2.<family>", "variation", "1",
       "variance of the family's coefficients explained by per-(site, channel) means: "
       "1 - SS around mu_{s,c} / SS around the family mean"},
      {"eta2_layer.<family>", "variation", "1",
       "variance explained by layer identity, one mean per site: 1 - SS around mu_s / SS "
       "around the family mean"},
      {"total_variance.<family>", "variation", "coef^2",
       "variance of the family's coefficients around the family mean"},
      {"within_site_variance.<family>", "variation", "coef^2",
       "variance around the per-(site, channel) means"},
      {"between_input_variance.<family>", "variation", "coef^2",
       "part of the within-site variance carried by per-sequence means (varies across inputs)"},
      {"within_input_variance.<family>", "variation", "coef^2",
       "part of the within-site variance within sequences (varies across tokens)"},
      {"site_mean.<site>", "variation", "coef",
       "mean coefficient of one site over sequences, positions and channels"},
      {"site_variance.<site>", "variation", "coef^2",
       "variance of one site's coefficients around its per-channel means"},
      {"parameters", "execution", "parameters",
       "the model's parameters: elements of the tensors in its weights"},
      {"blocks_per_token", "execution", "blocks/token", "blocks executed per token (counted)"},
      {"blocks_executed_fraction", "execution", "1", "blocks executed / blocks present"},
      {"flops_per_token", "execution", "FLOP/token", "counted matmul FLOPs per token, LIVE pass"},
      {"replay_flops_per_token", "execution", "FLOP/token",
       "counted matmul FLOPs per token under REPLAY (controller off)"},
      {"dense_flops_per_token", "execution", "FLOP/token",
       "the dense twin's counted matmul FLOPs per token on the same batch"},
      {"flops_overhead", "execution", "1",
       "FLOPs per token of the model (LIVE) / the dense twin's - 1: the extra work counted"},
      {"latency_us_per_token", "execution", "us/token",
       "median wall-clock LIVE forward latency per token"},
      {"dense_latency_us_per_token", "execution", "us/token",
       "the dense twin's median latency per token, timed in the same pairs as the model"},
      {"slowdown", "execution", "1",
       "geometric mean over interleaved pairs of t_model / t_dense, minus 1, with a bootstrap CI "
       "over pairs; n = pairs timed"},
      {"slowdown_verdict", "execution", "1",
       "+1 slower than the dense twin (CI above 0), -1 faster (CI below 0), 0 no detectable "
       "difference at this precision (CI contains 0)"},
      {"live_nll", "replay", "nats/token", "NLL of the LIVE pass on the evaluation windows"},
      {"max_abs_logit_diff", "replay", "logit",
       "replay fidelity: largest |logit| difference of REPLAY(A(x)) against LIVE"},
      {"fidelity_checked_windows", "replay", "windows",
       "evaluation windows whose correct replay was compared with a LIVE pass (at least the "
       "first batch, even when every window is cached)"},
  };
  return *catalog;
}

const std::vector<InterventionEntry>& InterventionCatalog() {
  static const auto* catalog = new std::vector<InterventionEntry>{
      {"correct", "each input's own coefficients A(x_i): the reference"},
      {"cross_input", "the coefficients of another input, A(x_pi(i)), pi a seeded derangement"},
      {"token_shuffle",
       "each input's coefficients with positions permuted (seeded, one permutation per "
       "sequence unless per-site)"},
      {"static_layer", "per-site, per-channel mean over the calibration set, for every token"},
      {"static_layer_position",
       "per-site, per-position, per-channel mean over the calibration set"},
      {"global_mean",
       "one scalar per family: the calibration mean over sites, positions, channels"},
      {"static_token",
       "per site, the calibration mean of the coefficients at positions with the same current "
       "token id (the site mean for ids unseen in calibration)"},
      {"neutral",
       "the controller removed: FeatureGate gates 1, MUDDPythia the static dense_bs alone"},
  };
  return *catalog;
}

const MetricEntry* FindMetric(const std::string& metric) {
  for (const MetricEntry& e : MetricCatalog()) {
    if (Matches(e.name, metric)) return &e;
  }
  return nullptr;
}

std::string MetricUnit(const std::string& metric) {
  const MetricEntry* e = FindMetric(metric);
  return e == nullptr ? "" : e->unit;
}

}  // namespace fca::core
