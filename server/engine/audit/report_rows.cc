#include "server/engine/audit/report_rows.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "server/engine/audit/provenance.h"

namespace fca::engine {
namespace {

// A row's metric: a model-level metric's name, or a keyed ResultKey
// (common/result_key.h), stored under its stored name.
struct RowKey {
  RowKey(const char* metric) : key(ModelKey(metric)) {}  // NOLINT(google-explicit-constructor)
  RowKey(ResultKey k) : key(std::move(k)) {}             // NOLINT(google-explicit-constructor)
  ResultKey key;
};

class RowWriter {
 public:
  RowWriter(std::string model, std::vector<ResultRow>* out) : model_(std::move(model)), out_(out) {}

  void Add(const std::string& intervention, const RowKey& metric, double value, int64_t n) {
    ResultRow r;
    r.model = model_;
    r.intervention = intervention;
    r.metric = StoredMetricName(metric.key);
    r.value = value;
    r.n = n;
    out_->push_back(std::move(r));
  }
  void AddCI(const std::string& intervention, const RowKey& metric, double value, Interval ci,
             int64_t n) {
    Add(intervention, metric, value, n);
    out_->back().ci_low = ci.low;
    out_->back().ci_high = ci.high;
  }
  // An undefined value is still a row, so a query shows it as undefined.
  void AddOptional(const std::string& intervention, const RowKey& metric,
                   const std::optional<double>& value, int64_t n,
                   const std::optional<Interval>& ci = std::nullopt) {
    Add(intervention, metric, value.value_or(0.0), n);
    out_->back().defined = value.has_value();
    if (value && ci) {
      out_->back().ci_low = ci->low;
      out_->back().ci_high = ci->high;
    }
  }

 private:
  std::string model_;
  std::vector<ResultRow>* out_;
};

// The per-group dependence keys of a scope (fca.md "Dependence per layer"):
// a layer's number, a site's or a family's name.
ResultKey GroupKey(const ScopeDef& scope, const char* metric, const GroupDependence& d) {
  switch (scope.id) {
    case ScopeId::kLayer:
      return LayerKey(metric, d.layer.value_or(-1));
    case ScopeId::kSite:
      return SiteKey(metric, d.group);
    case ScopeId::kFamily:
      return FamilyKey(metric, d.group);
  }
  return ModelKey(metric);
}

}  // namespace

const RetentionResult* ModelReport::FindRetention(const std::string& profile,
                                                  const std::string& baseline) const {
  for (const RetentionResult& r : retention) {
    if (r.profile == profile && r.baseline == baseline) return &r;
  }
  return nullptr;
}

std::vector<ResultRow> ResultRows(const ModelReport& r) {
  std::vector<ResultRow> rows;
  RowWriter w(r.model.name, &rows);
  const int64_t n = r.eval_windows;
  w.Add(kReplay, kLiveNll, r.live_nll, n);
  w.Add(kReplay, kMaxAbsLogitDiff, r.replay_max_abs_diff, n);
  w.Add(kReplay, kFidelityCheckedWindows, static_cast<double>(r.fidelity_checked_windows),
        r.fidelity_checked_windows);
  for (const InterventionResult& i : r.interventions) {
    w.Add(i.name, kNll, i.nll, n);
    if (i.topk_agreement) {
      const TopkAgreement& a = *i.topk_agreement;
      w.Add(i.name, kTopkAgreement, a.fraction, a.positions);
      w.Add(i.name, kTopkOverlap, a.overlap, a.positions);
      for (const LayerTopkAgreement& l : a.layers) {
        w.Add(i.name, LayerKey(kLayerTopkAgreement, l.layer), l.fraction, l.positions);
        w.Add(i.name, LayerKey(kLayerTopkOverlap, l.layer), l.overlap, l.positions);
      }
    }
    if (i.name == kCorrect) continue;
    w.AddCI(i.name, kPenalty, i.penalty, i.penalty_ci, n);
    w.AddCI(i.name, kPenaltyBlock, i.penalty, i.windows.block_ci, n);
    w.AddOptional(i.name, kPenaltyLag1, i.windows.lag1, n);
    w.Add(i.name, kPenaltyPHolm, i.windows.p_holm, n);
    if (i.calib) {
      w.AddCI(i.name, kPenaltyCalib, i.penalty, i.calib->ci, i.calib->resamples);
      w.Add(i.name, kPenaltyCalibSd, i.calib->sd, i.calib->resamples);
    }
  }
  w.Add(kReplay, kBootstrapBlockLength, static_cast<double>(r.bootstrap_block_length), n);
  if (r.float32_agreement) {
    const TopkAgreement& a = *r.float32_agreement;
    w.Add(kReplay, kRoutingFlipRate, 1 - a.fraction, a.positions);
    for (const LayerTopkAgreement& l : a.layers) {
      w.Add(kReplay, LayerKey(kLayerRoutingFlipRate, l.layer), 1 - l.fraction, l.positions);
    }
  }
  for (const RetentionResult& x : r.retention) {
    const RetentionEstimate& e = x.estimate;
    if (x.baseline == r.retention_baseline) {
      w.AddOptional(x.profile, kRetentionPct, e.value, n, e.ci);
    }
    w.AddOptional(x.profile, BaselineKey(kRetentionVs, x.baseline), e.value, n, e.ci);
    w.Add(x.profile, BaselineKey(kRetentionDropped, x.baseline),
          static_cast<double>(e.dropped_resamples), n);
  }
  if (r.static_token_coverage) {
    const TokenCoverage& c = *r.static_token_coverage;
    w.Add(kStaticToken, kUnseenTokenPositions, static_cast<double>(c.unseen_positions),
          n * (r.window_length - 1));
    w.Add(kStaticToken, kUnseenTokenIds, static_cast<double>(c.unseen_ids), n);
  }
  // n: the table's cells (distinct ids or (id, position) pairs of C).
  if (r.static_token_cells) {
    const TokenCells& c = *r.static_token_cells;
    w.Add(kStaticToken, kShrunkIds, static_cast<double>(c.shrunk), c.cells);
  }
  if (r.static_token_position_cells) {
    const TokenCells& c = *r.static_token_position_cells;
    w.Add(kStaticTokenPosition, kShrunkCells, static_cast<double>(c.shrunk), c.cells);
  }
  for (const GroupDependence& d : r.dependence) {
    // The scope names its two metrics; an unknown one (refused by the
    // options' validation) writes nothing.
    const ScopeDef* scope = FindScope(d.scope);
    if (scope == nullptr) continue;
    w.Add(d.intervention, GroupKey(*scope, scope->nll_metric, d), d.nll, n);
    w.AddCI(d.intervention, GroupKey(*scope, scope->penalty_metric, d), d.penalty, d.penalty_ci, n);
  }
  for (const GroupAdditivity& a : r.additivity) {
    w.Add(a.intervention, kGroupPenaltySum, a.penalty_sum, a.groups);
    w.AddOptional(a.intervention, kGroupAdditivity, a.ratio, a.groups, a.ci);
    w.Add(a.intervention, kGroupAdditivityDropped, static_cast<double>(a.dropped_resamples),
          a.groups);
  }
  for (const FamilyVariation& f : r.variation) {
    w.Add(kVariation, FamilyKey(kSimplexValued, f.family), f.simplex ? 1.0 : 0.0, f.count);
    w.AddOptional(kVariation, FamilyKey(kEta2, f.family), f.eta2, f.count);
    w.AddOptional(kVariation, FamilyKey(kEta2Layer, f.family), f.eta2_layer, f.count);
    w.Add(kVariation, FamilyKey(kTotalVariance, f.family), f.total_variance, f.count);
    w.Add(kVariation, FamilyKey(kWithinSiteVariance, f.family), f.within_site_variance, f.count);
    w.Add(kVariation, FamilyKey(kBetweenInputVariance, f.family), f.between_input_variance,
          f.count);
    w.Add(kVariation, FamilyKey(kWithinInputVariance, f.family), f.within_input_variance, f.count);
    w.AddOptional(kVariation, FamilyKey(kEta2Token, f.family), f.token.eta2, f.token.positions);
    w.AddOptional(kVariation, FamilyKey(kEta2TokenPosition, f.family), f.token_position.eta2,
                  f.token_position.positions);
    w.AddOptional(kVariation, FamilyKey(kEta2TokenOos, f.family), f.token_oos.eta2,
                  f.token_oos.positions);
    w.AddOptional(kVariation, FamilyKey(kEta2TokenPositionOos, f.family), f.token_position_oos.eta2,
                  f.token_position_oos.positions);
  }
  // Per-site rows feed a report's per-layer plots.
  for (const SiteVariation& s : r.site_variation) {
    w.Add(kVariation, SiteKey(kSiteMean, s.site), s.mean, n);
    w.Add(kVariation, SiteKey(kSiteVariance, s.site), s.variance, n);
    w.AddOptional(kVariation, SiteKey(kSiteEta2Token, s.site), s.token.eta2, s.token.positions);
    w.AddOptional(kVariation, SiteKey(kSiteEta2TokenPosition, s.site), s.token_position.eta2,
                  s.token_position.positions);
    w.AddOptional(kVariation, SiteKey(kSiteEta2TokenOos, s.site), s.token_oos.eta2,
                  s.token_oos.positions);
    w.AddOptional(kVariation, SiteKey(kSiteEta2TokenPositionOos, s.site), s.token_position_oos.eta2,
                  s.token_position_oos.positions);
    std::optional<double> table;
    if (s.lookup_table) table = *s.lookup_table ? 1.0 : 0.0;
    w.AddOptional(kVariation, SiteKey(kLookupTable, s.site), table, s.token_position.positions);
  }
  for (ResultRow& row : ExecutionRows(r.execution)) {
    row.model = r.model.name;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ResultRow> ExecutionRows(const ExecutionResult& x) {
  std::vector<ResultRow> rows;
  RowWriter w(x.model, &rows);
  const int64_t reps = x.timing_repeats;
  // The size axis of a comparison across models (the demo's size trend).
  if (x.parameters > 0) w.Add(kExecution, kParameters, double(x.parameters), 0);
  w.Add(kExecution, kBlocksPerToken, x.blocks_per_token, 0);
  w.Add(kExecution, kBlocksExecutedFraction, x.blocks_executed_fraction, 0);
  w.Add(kExecution, kFlopsPerToken, x.flops_per_token, 0);
  w.Add(kExecution, kReplayFlopsPerToken, x.replay_flops_per_token, 0);
  if (x.dense_flops_per_token) {
    w.Add(kExecution, kDenseFlopsPerToken, *x.dense_flops_per_token, 0);
  }
  if (x.flops_overhead) w.Add(kExecution, kFlopsOverhead, *x.flops_overhead, 0);
  // Without timed repeats there is no latency to report (not a zero).
  if (reps > 0) w.Add(kExecution, kLatencyUsPerToken, x.latency_us_per_token, reps);
  if (x.dense_latency_us_per_token) {
    w.Add(kExecution, kDenseLatencyUsPerToken, *x.dense_latency_us_per_token, reps);
  }
  const std::pair<const char*, std::optional<double>> parts[] = {
      {kRouterUsPerToken, x.router_us_per_token},
      {kDispatchUsPerToken, x.dispatch_us_per_token},
      {kExpertsUsPerToken, x.experts_us_per_token},
      {kDenseMlpUsPerToken, x.dense_mlp_us_per_token}};
  for (const auto& [metric, value] : parts) {
    if (value) w.Add(kExecution, metric, *value, reps);
  }
  if (x.slowdown) {
    w.AddOptional(kExecution, kSlowdown, x.slowdown, reps, x.slowdown_ci);
  }
  if (x.slowdown_verdict) w.Add(kExecution, kSlowdownVerdict, *x.slowdown_verdict, reps);
  if (x.first_block) {
    w.AddCI(kExecution, kSlowdownFirstBlock, x.first_block->slowdown, x.first_block->ci,
            x.first_block->pairs);
  }
  if (x.second_block) {
    w.AddCI(kExecution, kSlowdownSecondBlock, x.second_block->slowdown, x.second_block->ci,
            x.second_block->pairs);
  }
  if (x.active_parameters) w.Add(kExecution, kActiveParameters, *x.active_parameters, 0);
  // n: the tokens the routing was counted over.
  for (const ExecutionResult::ExpertLoad& load : x.expert_load) {
    w.Add(kExecution, LayerKey(kExpertsPerToken, load.layer), load.experts_per_token, load.tokens);
    w.Add(kExecution, LayerKey(kExpertLoadEntropy, load.layer), load.entropy, load.tokens);
    for (size_t e = 0; e < load.share.size(); ++e) {
      w.Add(kExecution, ExpertKey(kExpertShare, load.layer, static_cast<int64_t>(e)), load.share[e],
            load.tokens);
    }
  }
  for (const ExecutionResult::ExpertPair& p : x.coactivation) {
    w.Add(kExecution, ExpertPairKey(kExpertCoactivation, p.layer, p.expert, p.partner), p.fraction,
          p.tokens);
  }
  for (const ExecutionResult::TokenExpertShare& t : x.token_experts) {
    w.Add(kExecution, TokenExpertKey(kTokenExpertShare, t.layer, t.token, t.expert), t.share,
          t.positions);
  }
  return rows;
}

std::vector<AggregateRow> Aggregate(const std::vector<ModelReport>& reports) {
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::vector<double>> values;
  std::map<std::pair<std::string, std::string>, int64_t> undefined;
  for (const ModelReport& r : reports) {
    for (const ResultRow& row : ResultRows(r)) {
      const auto key = std::make_pair(row.intervention, row.metric);
      if (!values.count(key) && !undefined.count(key)) order.push_back(key);
      if (row.defined) {
        values[key].push_back(row.value);
      } else {
        ++undefined[key];
      }
    }
  }
  std::vector<AggregateRow> out;
  for (const auto& key : order) {
    AggregateRow a;
    a.intervention = key.first;
    a.metric = key.second;
    a.summary = Summarize(values[key]);
    a.undefined = undefined.count(key) ? undefined[key] : 0;
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

json::Value Num(double v) { return json::Value::Number(v); }
json::Value Str(const std::string& v) { return json::Value::String(v); }

json::Value RowToJson(const ResultRow& r) {
  json::Value v = json::Value::MakeObject();
  v.Set("intervention", Str(r.intervention));
  v.Set("metric", Str(r.metric));
  v.Set("value", r.defined ? Num(r.value) : json::Value::Null());
  if (r.ci_low) v.Set("ci_low", Num(*r.ci_low));
  if (r.ci_high) v.Set("ci_high", Num(*r.ci_high));
  v.Set("n", json::Value::Int(r.n));
  return v;
}

json::Value ModelToJson(const ModelReport& r) {
  json::Value v = json::Value::MakeObject();
  v.Set("model", Str(r.model.name));
  v.Set("family", Str(r.model.family));
  v.Set("weights_sha256", Str(r.model.weights_sha256));
  v.Set("num_parameters", json::Value::Int(r.model.num_parameters));
  v.Set("device", Str(r.model.compute.device));
  v.Set("dtype", Str(ComputeDTypeName(r.model.compute.dtype)));
  v.Set("eval_windows", json::Value::Int(r.eval_windows));
  v.Set("calib_windows", json::Value::Int(r.calib_windows));
  v.Set("cached_eval_windows", json::Value::Int(r.cached_eval_windows));
  v.Set("cached_calib_windows", json::Value::Int(r.cached_calib_windows));
  v.Set("window_length", json::Value::Int(r.window_length));
  v.Set("seconds", Num(r.seconds));
  v.Set("pass_seconds", Num(r.pass_seconds));
  v.Set("pass_flops", Num(r.pass_flops));
  v.Set("cache_read_seconds", Num(r.cache_read_seconds));
  v.Set("cache_write_seconds", Num(r.cache_write_seconds));
  json::Value rows = json::Value::MakeArray();
  for (const ResultRow& row : ResultRows(r)) rows.mutable_array().push_back(RowToJson(row));
  v.Set("results", std::move(rows));
  json::Value sites = json::Value::MakeArray();
  for (const SiteVariation& s : r.site_variation) {
    json::Value o = json::Value::MakeObject();
    o.Set("site", Str(s.site));
    o.Set("family", Str(s.family));
    o.Set("layer", json::Value::Int(s.layer));
    o.Set("mean", Num(s.mean));
    o.Set("variance", Num(s.variance));
    sites.mutable_array().push_back(std::move(o));
  }
  v.Set("sites", std::move(sites));
  return v;
}

}  // namespace

json::Value AuditOptionsToJson(const AuditOptions& o) {
  json::Value v = json::Value::MakeObject();
  json::Value names = json::Value::MakeArray();
  for (InterventionId id : o.interventions)
    names.mutable_array().push_back(Str(InterventionName(id)));
  v.Set("interventions", std::move(names));
  v.Set("window_length", json::Value::Int(o.window_length));
  v.Set("max_eval_windows", json::Value::Int(o.max_eval_windows));
  v.Set("max_calib_windows", json::Value::Int(o.max_calib_windows));
  v.Set("batch_size", json::Value::Int(o.batch_size));
  v.Set("seed", json::Value::Int(static_cast<int64_t>(o.seed)));
  v.Set("per_site_shuffle", json::Value::Bool(o.per_site_shuffle));
  v.Set("bootstrap_resamples", json::Value::Int(o.bootstrap_resamples));
  v.Set("ci_level", Num(o.ci_level));
  v.Set("allow_overlap", json::Value::Bool(o.allow_overlap));
  v.Set("fidelity_tolerance", Num(o.fidelity_tolerance));
  v.Set("fidelity_check_every", json::Value::Int(o.fidelity_check_every));
  v.Set("retention_min_gap", Num(o.retention_min_gap));
  v.Set("retention_baseline", Str(InterventionName(o.retention_baseline)));
  v.Set("bootstrap_block_length", json::Value::Int(o.bootstrap_block_length));
  v.Set("static_token_min_count", json::Value::Int(o.static_token_min_count));
  v.Set("calib_resamples", json::Value::Int(o.calib_resamples));
  v.Set("timing_repeats", json::Value::Int(o.timing_repeats));
  v.Set("timing_max_repeats", json::Value::Int(o.timing_max_repeats));
  v.Set("timing_budget_seconds", Num(o.timing_budget_seconds));
  v.Set("timing_warmup", json::Value::Int(o.timing_warmup));
  v.Set("dense_twin_mismatch", Str(o.dense_twin_mismatch));
  json::Value per_layer = json::Value::MakeArray();
  for (InterventionId id : o.per_layer_interventions) {
    per_layer.mutable_array().push_back(Str(InterventionName(id)));
  }
  v.Set("per_layer_interventions", std::move(per_layer));
  v.Set("per_layer_scope", Str(ScopeName(o.per_layer_scope)));
  return v;
}

json::Value ReportToJson(const AuditReport& report) {
  json::Value v = json::Value::MakeObject();
  // The runtime's fields at the top (as the service's report.json has
  // them, the device among them), the dtype from the models (one compute
  // setting per run).
  const json::Value runtime = RuntimeToJson(report.runtime);
  for (const auto& [key, value] : runtime.as_object()) v.Set(key, value);
  if (!report.models.empty()) {
    v.Set("dtype", Str(ComputeDTypeName(report.models[0].model.compute.dtype)));
  }
  v.Set("eval_dataset_sha256", Str(report.eval_dataset_sha256));
  v.Set("calib_dataset_sha256", Str(report.calib_dataset_sha256));
  v.Set("options", AuditOptionsToJson(report.options));
  json::Value models = json::Value::MakeArray();
  for (const ModelReport& m : report.models) models.mutable_array().push_back(ModelToJson(m));
  v.Set("models", std::move(models));
  if (report.dense_twin) {
    json::Value d = json::Value::MakeObject();
    d.Set("model", Str(report.dense_twin->model));
    d.Set("blocks_per_token", Num(report.dense_twin->blocks_per_token));
    d.Set("blocks_executed_fraction", Num(report.dense_twin->blocks_executed_fraction));
    d.Set("flops_per_token", Num(report.dense_twin->flops_per_token));
    v.Set("dense_twin", std::move(d));
  }
  json::Value agg = json::Value::MakeArray();
  for (const AggregateRow& a : report.aggregate) {
    json::Value o = json::Value::MakeObject();
    o.Set("intervention", Str(a.intervention));
    o.Set("metric", Str(a.metric));
    o.Set("n_models", json::Value::Int(a.summary.n));
    o.Set("undefined", json::Value::Int(a.undefined));
    const bool any = a.summary.n > 0;
    o.Set("mean", any ? Num(a.summary.mean) : json::Value::Null());
    o.Set("sd", any ? Num(a.summary.sd) : json::Value::Null());
    o.Set("min", any ? Num(a.summary.min) : json::Value::Null());
    o.Set("max", any ? Num(a.summary.max) : json::Value::Null());
    agg.mutable_array().push_back(std::move(o));
  }
  v.Set("aggregate", std::move(agg));
  return v;
}

}  // namespace fca::engine
