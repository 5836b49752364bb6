// The audit's vocabulary (common/vocabulary.h) as the service serves it:
// GetServerInfo's interventions and metrics, with their units and one-line
// descriptions (what a dashboard shows in its legends and tooltips). The
// proto carries names as strings; this is the one place that maps the
// tables to its messages.
#ifndef FCA_SERVER_CORE_METRIC_CATALOG_H_
#define FCA_SERVER_CORE_METRIC_CATALOG_H_

#include "common/vocabulary.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::core {

v1::InterventionInfo InterventionInfoOf(const InterventionDef& intervention);
// Its name is the pattern of a keyed metric ("eta2.<family>").
v1::MetricInfo MetricInfoOf(const MetricDef& metric);

// Every intervention and metric, in report order, and the group scopes.
void AddVocabulary(v1::GetServerInfoResponse* info);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_METRIC_CATALOG_H_
