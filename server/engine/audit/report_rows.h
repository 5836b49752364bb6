// The flat result rows of a report (what the service stores), their
// aggregation across models, and the report and its options as JSON
// (report_rows.cc). Torch-free header.
#ifndef FCA_SERVER_ENGINE_AUDIT_REPORT_ROWS_H_
#define FCA_SERVER_ENGINE_AUDIT_REPORT_ROWS_H_

#include <vector>

#include "common/json.h"
#include "server/engine/audit/audit_types.h"

namespace fca::engine {

// The flat rows of a model report (what the service stores).
std::vector<ResultRow> ResultRows(const ModelReport& report);
// The "execution" rows of one model (also the dense twin's, stored under its
// own name so a report can show that it, too, runs every block).
std::vector<ResultRow> ExecutionRows(const ExecutionResult& execution);
// mean / sd / min / max across models of every (intervention, metric).
std::vector<AggregateRow> Aggregate(const std::vector<ModelReport>& reports);
// The whole report as JSON (rows per model, aggregate, provenance);
// undefined values are written as null.
json::Value ReportToJson(const AuditReport& report);
// The options as the engine ran them (defaults applied), as ReportToJson
// writes them; the service records them with each task.
json::Value AuditOptionsToJson(const AuditOptions& options);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_REPORT_ROWS_H_
