// The metrics and interventions an audit reports, with their units and a
// one-line description each: one table shared by GetReport (the unit of
// every reported metric) and GetServerInfo (what a dashboard shows in its
// legends and tooltips). docs/fca.md defines every entry; keep both in step.
#ifndef FCA_SERVER_CORE_METRIC_CATALOG_H_
#define FCA_SERVER_CORE_METRIC_CATALOG_H_

#include <string>
#include <vector>

namespace fca::core {

struct MetricEntry {
  // The stored metric name; a name ending in ".<family>" or ".<site>"
  // stands for every metric with that prefix ("eta2.attn_gate").
  std::string name;
  // The pseudo-intervention its rows are stored under ("variation",
  // "execution", "replay"), or "" for metrics of each intervention.
  std::string intervention;
  std::string unit;
  std::string description;
};

struct InterventionEntry {
  std::string name;
  std::string description;
};

// Every metric, in report order.
const std::vector<MetricEntry>& MetricCatalog();
// Every intervention, in report order (the engine's, fca.md's).
const std::vector<InterventionEntry>& InterventionCatalog();

// The catalog entry of a stored metric name ("eta2.attn_gate" finds
// "eta2.<family>"); nullptr for a metric the catalog does not know.
const MetricEntry* FindMetric(const std::string& metric);
// Its unit, or "" when unknown.
std::string MetricUnit(const std::string& metric);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_METRIC_CATALOG_H_
