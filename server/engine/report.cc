// The flat result rows of a report and their aggregation across models.
#include <map>
#include <utility>

#include "server/engine/auditor.h"

namespace fca::engine {
namespace {

class RowWriter {
 public:
  RowWriter(std::string model, std::vector<ResultRow>* out) : model_(std::move(model)), out_(out) {}

  void Add(const std::string& intervention, const std::string& metric, double value, int64_t n) {
    ResultRow r;
    r.model = model_;
    r.intervention = intervention;
    r.metric = metric;
    r.value = value;
    r.n = n;
    out_->push_back(std::move(r));
  }
  void AddCI(const std::string& intervention, const std::string& metric, double value,
             Interval ci, int64_t n) {
    Add(intervention, metric, value, n);
    out_->back().ci_low = ci.low;
    out_->back().ci_high = ci.high;
  }
  // An undefined value is still a row, so a query shows it as undefined.
  void AddOptional(const std::string& intervention, const std::string& metric,
                   const std::optional<double>& value, int64_t n) {
    Add(intervention, metric, value.value_or(0.0), n);
    out_->back().defined = value.has_value();
  }

 private:
  std::string model_;
  std::vector<ResultRow>* out_;
};

}  // namespace

std::vector<ResultRow> ResultRows(const ModelReport& r) {
  std::vector<ResultRow> rows;
  RowWriter w(r.model.name, &rows);
  const int64_t n = r.eval_windows;
  w.Add("replay", "live_nll", r.live_nll, n);
  w.Add("replay", "max_abs_logit_diff", r.replay_max_abs_diff, n);
  for (const InterventionResult& i : r.interventions) {
    w.Add(i.name, "nll", i.nll, n);
    if (i.name != kCorrect) w.AddCI(i.name, "penalty", i.penalty, i.penalty_ci, n);
  }
  bool has_global = false, has_layer = false, has_position = false;
  for (const InterventionResult& i : r.interventions) {
    has_global = has_global || i.name == kGlobalMean;
    has_layer = has_layer || i.name == kStaticLayer;
    has_position = has_position || i.name == kStaticLayerPosition;
  }
  if (has_global && has_layer) {
    w.AddOptional(kStaticLayer, "retention_pct", r.retention_static_layer, n);
  }
  if (has_global && has_position) {
    w.AddOptional(kStaticLayerPosition, "retention_pct", r.retention_static_layer_position, n);
  }
  for (const FamilyVariation& f : r.variation) {
    w.AddOptional("variation", "eta2." + f.family, f.eta2, f.count);
    w.Add("variation", "total_variance." + f.family, f.total_variance, f.count);
    w.Add("variation", "within_site_variance." + f.family, f.within_site_variance, f.count);
    w.Add("variation", "between_input_variance." + f.family, f.between_input_variance, f.count);
    w.Add("variation", "within_input_variance." + f.family, f.within_input_variance, f.count);
  }
  const ExecutionResult& x = r.execution;
  const int64_t reps = x.timing_repeats;
  w.Add("execution", "blocks_per_token", x.blocks_per_token, 0);
  w.Add("execution", "blocks_executed_fraction", x.blocks_executed_fraction, 0);
  w.Add("execution", "flops_per_token", x.flops_per_token, 0);
  w.Add("execution", "replay_flops_per_token", x.replay_flops_per_token, 0);
  w.Add("execution", "latency_us_per_token", x.latency_us_per_token, reps);
  if (x.dense_latency_us_per_token) {
    w.Add("execution", "dense_latency_us_per_token", *x.dense_latency_us_per_token, reps);
  }
  if (x.slowdown) w.Add("execution", "slowdown", *x.slowdown, reps);
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

}  // namespace fca::engine
