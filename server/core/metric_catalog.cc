#include "server/core/metric_catalog.h"

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
}

}  // namespace fca::core
