#include "server/core/report_assembly.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "common/result_key.h"
#include "common/spec_fields.h"
#include "common/vocabulary.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/statistics.h"

namespace fca::core {
namespace {

// A row's identity within a model: its intervention and its stored metric
// name. What a row is about is read from its typed key (Result.key).
using Key = std::pair<std::string, std::string>;  // intervention, metric
using ModelRows = std::map<Key, v1::Result>;

// The per-site variation rows (site_mean, ..., lookup_table of one site)
// become SiteRow messages, not report metrics; nullptr for other rows.
const MetricDef* SiteMetric(const v1::Result& row) {
  if (row.intervention() != kVariation || row.key().scope() != v1::METRIC_SCOPE_SITE) {
    return nullptr;
  }
  return FindMetricByName(row.key().metric());
}

// The variation metrics kept per family ("eta2.<family>", ...), in report
// order.
std::vector<const MetricDef*> FamilyVariationMetrics() {
  std::vector<const MetricDef*> out;
  for (const MetricDef& d : MetricDefs()) {
    if (d.scope == MetricScope::kFamily && std::string(d.stored_under) == kVariation) {
      out.push_back(&d);
    }
  }
  return out;
}

// The rows of one job, split by model; rows of models the job does not
// name are dropped.
struct JobRows {
  std::map<std::string, ModelRows> audited;  // by model name
  ModelRows twin;
};

JobRows SplitRows(const v1::AuditSpec& spec, const std::vector<v1::Result>& rows) {
  const std::set<std::string> audited(spec.models().begin(), spec.models().end());
  JobRows out;
  for (const v1::Result& r : rows) {
    const Key key(r.intervention(), r.metric());
    if (audited.count(r.model())) {
      out.audited[r.model()][key] = r;
    } else if (!spec.dense_twin().empty() && r.model() == spec.dense_twin()) {
      out.twin[key] = r;
    }
  }
  return out;
}

// Interventions with an "nll" row: the vocabulary's order, then unknown ones
// by name (an engine newer than this server).
std::vector<std::string> ReportInterventions(const JobRows& rows) {
  std::set<std::string> present;
  for (const auto& [model, by_key] : rows.audited) {
    for (const auto& [key, r] : by_key) {
      if (key.second == kNll) present.insert(key.first);
    }
  }
  std::vector<std::string> out;
  for (const std::string& name : InterventionNames()) {
    if (present.erase(name)) out.push_back(name);
  }
  out.insert(out.end(), present.begin(), present.end());
  return out;
}

// Families named by any per-family variation row, sorted.
std::vector<std::string> ReportFamilies(const JobRows& rows) {
  std::set<std::string> metrics;
  for (const MetricDef* d : FamilyVariationMetrics()) metrics.insert(d->name);
  std::set<std::string> families;
  for (const auto& [model, by_key] : rows.audited) {
    for (const auto& [key, r] : by_key) {
      if (key.first == kVariation && r.key().scope() == v1::METRIC_SCOPE_FAMILY &&
          metrics.count(r.key().metric())) {
        families.insert(r.key().family());
      }
    }
  }
  return std::vector<std::string>(families.begin(), families.end());
}

// Every key a report may show, in report order: per intervention its NLL
// and penalty, then retentions, variation per family, execution, replay.
std::vector<Key> KnownOrder(const std::vector<std::string>& interventions,
                            const std::vector<std::string>& families) {
  std::vector<Key> order;
  for (const std::string& i : interventions) {
    order.emplace_back(i, kNll);
    order.emplace_back(i, kPenalty);
  }
  for (const std::string& i : interventions) order.emplace_back(i, kRetentionPct);
  for (const std::string& f : families) {
    for (const MetricDef* d : FamilyVariationMetrics()) {
      order.emplace_back(kVariation, StoredMetricName(FamilyKey(d->name, f)));
    }
  }
  for (const char* section : {kExecution, kReplay}) {
    for (const MetricDef& d : MetricDefs()) {
      if (std::string(d.stored_under) == section) order.emplace_back(section, d.name);
    }
  }
  return order;
}

// The per-group dependence rows (a scope's nll and penalty metrics at one
// group) of `present`, right after the interventions' own rows: by
// intervention, scope and group (layers by number), nll before penalty, so
// a report reads them as per-layer tables.
std::vector<Key> GroupOrder(const std::map<Key, v1::ResultKey>& present,
                            const std::vector<std::string>& interventions) {
  using Rank = std::tuple<size_t, std::string, int64_t, std::string, int>;
  std::vector<std::pair<Rank, Key>> ranked;
  for (const auto& [key, typed] : present) {
    const auto at = std::find(interventions.begin(), interventions.end(), key.first);
    if (at == interventions.end()) continue;
    for (const ScopeDef& scope : ScopeDefs()) {
      for (int kind = 0; kind < 2; ++kind) {
        if (typed.metric() != (kind == 0 ? scope.nll_metric : scope.penalty_metric)) continue;
        // Layers by number; sites and families by name.
        const bool layer = typed.scope() == v1::METRIC_SCOPE_LAYER;
        ranked.push_back(
            {{size_t(at - interventions.begin()), scope.name, layer ? typed.layer() : -1,
              typed.scope() == v1::METRIC_SCOPE_SITE ? typed.site() : typed.family(), kind},
             key});
      }
    }
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<Key> out;
  for (auto& [rank, key] : ranked) out.push_back(std::move(key));
  return out;
}

// The keys of `present` in KnownOrder, then the others sorted.
std::vector<Key> OrderKeys(std::set<Key> present, const std::vector<Key>& known) {
  std::vector<Key> out;
  for (const Key& key : known) {
    if (present.erase(key)) out.push_back(key);
  }
  out.insert(out.end(), present.begin(), present.end());
  return out;
}

// The report metrics' keys (the site rows are not), with their typed keys.
std::map<Key, v1::ResultKey> AuditedKeys(const JobRows& rows) {
  std::map<Key, v1::ResultKey> keys;
  for (const auto& [model, by_key] : rows.audited) {
    for (const auto& [key, r] : by_key) {
      if (SiteMetric(r) == nullptr) keys.emplace(key, r.key());
    }
  }
  return keys;
}

std::set<Key> KeysOf(const std::map<Key, v1::ResultKey>& keys) {
  std::set<Key> out;
  for (const auto& [key, typed] : keys) out.insert(key);
  return out;
}

v1::ReportMetric MakeMetric(const Key& key, const v1::ResultKey& typed,
                            const std::vector<std::string>& models, const JobRows& rows,
                            double ci_level) {
  v1::ReportMetric m;
  m.set_intervention(key.first);
  m.set_metric(key.second);
  *m.mutable_key() = typed;
  m.set_unit(MetricUnit(typed.metric()));
  std::vector<const v1::Result*> found;
  for (const std::string& model : models) {
    const ModelRows& by_key = rows.audited.at(model);
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    *m.add_per_model() = it->second;
    found.push_back(&it->second);
  }
  *m.mutable_across_models() = SummarizeAcross(found, ci_level);
  return m;
}

// One model's sites from its per-site variation rows (site_mean,
// site_variance, ...), by family then layer. A site whose name has no layer
// ("<family>.<layer>") is left out: the tables are per layer.
std::vector<v1::SiteRow> ModelSites(const std::string& model, const ModelRows& rows) {
  std::map<std::string, v1::SiteRow> by_site;
  for (const auto& [key, r] : rows) {
    const MetricDef* metric = SiteMetric(r);
    if (metric == nullptr || !r.key().has_layer()) continue;
    v1::SiteRow& s = by_site[r.key().site()];
    s.set_model(model);
    s.set_site(r.key().site());
    s.set_family(r.key().family());
    s.set_layer(r.key().layer());
    switch (metric->id) {
      case MetricId::kSiteMean:
        s.set_mean(r.value());
        break;
      case MetricId::kSiteVariance:
        s.set_variance(r.value());
        break;
      case MetricId::kSiteEta2Token:
        if (r.defined()) s.set_eta2_token(r.value());
        break;
      case MetricId::kSiteEta2TokenPosition:
        if (r.defined()) s.set_eta2_token_position(r.value());
        break;
      case MetricId::kSiteEta2TokenOos:
        if (r.defined()) s.set_eta2_token_oos(r.value());
        break;
      case MetricId::kSiteEta2TokenPositionOos:
        if (r.defined()) s.set_eta2_token_position_oos(r.value());
        break;
      case MetricId::kLookupTable:
        if (r.defined()) s.set_lookup_table(r.value() != 0);
        break;
      default:
        break;
    }
  }
  std::vector<v1::SiteRow> out;
  for (auto& [site, row] : by_site) out.push_back(std::move(row));
  std::sort(out.begin(), out.end(), [](const v1::SiteRow& a, const v1::SiteRow& b) {
    return std::make_tuple(a.family(), a.layer(), a.site()) <
           std::make_tuple(b.family(), b.layer(), b.site());
  });
  return out;
}

std::string EvalSha256(const std::vector<std::string>& models, const JobRows& rows) {
  for (const std::string& m : models) {
    for (const auto& [key, r] : rows.audited.at(m)) {
      if (!r.dataset_sha256().empty()) return r.dataset_sha256();
    }
  }
  return "";
}

}  // namespace

v1::AcrossModels SummarizeAcross(const std::vector<const v1::Result*>& rows, double ci_level) {
  std::vector<double> values;
  int64_t undefined = 0;
  for (const v1::Result* r : rows) {
    if (r->defined()) {
      values.push_back(r->value());
    } else {
      ++undefined;
    }
  }
  // The engine's formula (docs/fca.md, "Multi-model aggregation").
  const engine::Summary s = engine::Summarize(values);
  v1::AcrossModels out;
  out.set_n(s.n);
  out.set_undefined(undefined);
  out.set_mean(s.mean);
  out.set_sd(s.sd);
  out.set_min(s.min);
  out.set_max(s.max);
  if (const std::optional<engine::Interval> ci = engine::MeanTInterval(s, ci_level)) {
    out.set_ci_low(ci->low);
    out.set_ci_high(ci->high);
    out.set_ci_level(ci_level);
  }
  return out;
}

namespace {

// A stored spec has its ci_level normalized; an older one without it gets
// the default.
double CiLevel(const v1::AuditSpec& spec) {
  return spec.ci_level() > 0 && spec.ci_level() < 1 ? spec.ci_level()
                                                    : spec_fields::kCiLevel.Default<double>();
}

}  // namespace

namespace {

// The rows of `jobs` together, and in `models` the audited models with
// rows, job by job in spec order (a model of an earlier job kept from it).
JobRows MergeRows(const std::vector<JobInput>& jobs, std::vector<std::string>* models) {
  JobRows split;
  for (const JobInput& in : jobs) {
    JobRows one = SplitRows(in.job->spec(), *in.rows);
    for (const std::string& m : in.job->spec().models()) {
      if (one.audited.count(m) && !split.audited.count(m)) models->push_back(m);
    }
    split.audited.merge(one.audited);
    // A twin's rows are its own job's timing: a report over several jobs has none.
    if (jobs.size() == 1) split.twin = std::move(one.twin);
  }
  return split;
}

}  // namespace

v1::GetReportResponse BuildReportOver(const std::vector<JobInput>& jobs, const v1::Job& as_job) {
  std::vector<std::string> models;
  const JobRows split = MergeRows(jobs, &models);
  v1::GetReportResponse out;
  *out.mutable_job() = as_job;
  out.mutable_models()->Assign(models.begin(), models.end());
  if (!split.twin.empty()) out.set_dense_twin(as_job.spec().dense_twin());
  const std::vector<std::string> interventions = ReportInterventions(split);
  const std::vector<std::string> families = ReportFamilies(split);
  out.mutable_interventions()->Assign(interventions.begin(), interventions.end());
  out.mutable_families()->Assign(families.begin(), families.end());
  out.set_eval_sha256(EvalSha256(models, split));
  std::vector<Key> known = KnownOrder(interventions, families);
  const std::map<Key, v1::ResultKey> audited_keys = AuditedKeys(split);
  const std::vector<Key> groups = GroupOrder(audited_keys, interventions);
  known.insert(known.begin() + 2 * interventions.size(), groups.begin(), groups.end());
  for (const Key& key : OrderKeys(KeysOf(audited_keys), known)) {
    *out.add_metrics() =
        MakeMetric(key, audited_keys.at(key), models, split, CiLevel(as_job.spec()));
  }
  for (const std::string& m : models) {
    for (v1::SiteRow& s : ModelSites(m, split.audited.at(m))) *out.add_sites() = std::move(s);
  }
  std::set<Key> twin_keys;
  for (const auto& [key, r] : split.twin) twin_keys.insert(key);
  for (const Key& key : OrderKeys(std::move(twin_keys), known)) {
    *out.add_dense_twin_rows() = split.twin.at(key);
  }
  return out;
}

v1::GetReportResponse BuildReport(const v1::Job& job, const std::vector<v1::Result>& rows) {
  return BuildReportOver({{&job, &rows}}, job);
}

}  // namespace fca::core
