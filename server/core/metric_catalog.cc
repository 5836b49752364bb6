#include "server/core/metric_catalog.h"

#include "proto/fca/v1/result_keys.h"

namespace fca::core {

v1::InterventionInfo InterventionInfoOf(const InterventionDef& intervention) {
  v1::InterventionInfo out;
  out.set_name(intervention.name);
  out.set_description(intervention.description);
  out.set_static_profile(intervention.static_profile);
  const InterventionGroupDef& group = InterventionGroupDefOf(intervention.group);
  out.set_group(group.name);
  out.set_retention_reading(group.retention_reading);
  return out;
}

v1::MetricInfo MetricInfoOf(const MetricDef& metric) {
  v1::MetricInfo out;
  out.set_name(MetricPattern(metric));
  out.set_unit(metric.unit);
  out.set_description(metric.description);
  out.set_intervention(metric.stored_under);
  out.set_label(metric.label);
  out.set_scope(v1::ToProto(metric.scope));
  out.set_metric(metric.name);
  for (const ValueWord& w : ValueWordsOf(metric.id)) {
    v1::ValueWord* word = out.add_value_words();
    word->set_value(w.value);
    word->set_word(w.word);
  }
  return out;
}

void AddVocabulary(v1::GetServerInfoResponse* info) {
  for (const InterventionDef& d : InterventionDefs()) {
    *info->add_interventions() = InterventionInfoOf(d);
  }
  for (const MetricDef& d : MetricDefs()) *info->add_metrics() = MetricInfoOf(d);
  for (const ScopeDef& d : ScopeDefs()) {
    v1::GroupScopeInfo* scope = info->add_group_scopes();
    scope->set_name(d.name);
    scope->set_nll_metric(d.nll_metric);
    scope->set_penalty_metric(d.penalty_metric);
  }
}

}  // namespace fca::core
