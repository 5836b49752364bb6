// `fca report` and `fca compare`: the text and JSON forms of the report the
// server computes (GetReport, CompareJobs; server/core/report_assembly.h),
// and the ReportView the HTML form (report_html.h) is drawn from.
//
// Pure: no I/O and no clock, so every format is unit-tested on a
// GetReportResponse whose numbers are known. No arithmetic on results
// happens here: the per-model rows and the across-model summaries (mean,
// sample sd, min, max) are the server's.
#ifndef FCA_CLIENT_REPORT_FORMAT_H_
#define FCA_CLIENT_REPORT_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "client/format.h"
#include "common/result_key.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

using AcrossModels = fca::v1::AcrossModels;
using SitePoint = fca::v1::SiteRow;

// What a lookup names: a row's typed key (common/result_key.h), or a
// model-level metric by its name ("penalty").
struct MetricRef {
  MetricRef(const char* metric) : key(ModelKey(metric)) {}  // NOLINT(google-explicit-constructor)
  MetricRef(const std::string& metric)                      // NOLINT(google-explicit-constructor)
      : key(ModelKey(metric)) {}
  MetricRef(ResultKey k) : key(std::move(k)) {}  // NOLINT(google-explicit-constructor)
  ResultKey key;
};

// Lookups into one GetReportResponse, by the rows' typed keys.
class ReportView {
 public:
  explicit ReportView(fca::v1::GetReportResponse report);
  // Holds pointers into its own report.
  ReportView(const ReportView&) = delete;
  ReportView& operator=(const ReportView&) = delete;

  const fca::v1::GetReportResponse& report() const { return report_; }
  const fca::v1::Job& job() const { return report_.job(); }
  // Audited models (spec order) that have at least one row.
  const std::vector<std::string>& models() const { return models_; }
  // The dense twin's name when it has rows, else "".
  const std::string& dense_twin() const { return report_.dense_twin(); }
  // Interventions with an "nll" row, in report order.
  const std::vector<std::string>& interventions() const { return interventions_; }
  // Coefficient families, sorted.
  const std::vector<std::string>& families() const { return families_; }

  // A model's (or the dense twin's) row; nullptr when absent.
  const fca::v1::Result* Find(const std::string& model, const std::string& intervention,
                              const MetricRef& metric) const;
  // The server's summary across the audited models (all zero when the
  // report has no such metric).
  AcrossModels Across(const std::string& intervention, const MetricRef& metric) const;
  // The unit the server gives a metric ("" when unknown).
  std::string Unit(const std::string& intervention, const MetricRef& metric) const;
  // Sites of `model`, by family then layer (the server's order).
  std::vector<SitePoint> Sites(const std::string& model) const;
  const std::string& eval_sha256() const { return report_.eval_sha256(); }

 private:
  using Key = std::tuple<std::string, std::string, ResultKey>;  // model, intervention, key
  fca::v1::GetReportResponse report_;
  std::map<Key, const fca::v1::Result*> rows_;
  std::map<std::pair<std::string, ResultKey>, const fca::v1::ReportMetric*> metrics_;
  std::vector<std::string> models_, interventions_, families_;
};

// A per-group dependence penalty of the report: a scope's penalty metric at
// one group under `intervention` (fca.md "Per-group dependence").
struct GroupPenalty {
  std::string intervention, scope, group;  // group: "3", "attn_gate.3", "attn_gate"
  ResultKey key;
};
// Every one in the server's order (by intervention, then group; layers by
// number).
std::vector<GroupPenalty> GroupPenalties(const ReportView& report);

// One router layer of a mixture of experts (docs/moe.md "Execution
// counters", fca.md "Routing flip rate"): its rows, nullptr when absent.
struct RoutingLayer {
  int64_t layer = 0;
  const fca::v1::Result* experts_per_token = nullptr;  // execution
  const fca::v1::Result* load_entropy = nullptr;       // execution, nats
  std::vector<const fca::v1::Result*> expert_shares;   // execution, by expert: E of them
  const fca::v1::Result* flip_rate = nullptr;          // replay, reduced-precision audits
};
// The routing rows of one audited model with routers: the layers named by
// any of its per-layer routing rows (top-k agreement, load, flip rate), by
// number. Its top-k agreement rows are found per intervention:
// Find(model, i, kTopkAgreement), Find(model, i, LayerKey(kLayerTopkAgreement, l)).
struct ModelRouting {
  std::string model;
  std::vector<RoutingLayer> layers;
};
// Every audited model (report order) that has routing rows; none for a
// model without routers. The one reading of which rows are routing rows,
// for the text and HTML reports.
std::vector<ModelRouting> Routing(const ReportView& report);

// One titled table of a report.
struct ReportSection {
  std::string title;  // "EXECUTION"
  std::string note;   // what the numbers are, one line
  TextTable table;
};
// Models, coefficient variation, functional dependence, gap retention and
// execution, each with a row per audited model, a "mean ± sd (min..max)"
// row (or column) across them when there are several, and the dense twin's
// execution row; then, for models with routers only (Routing), routing
// agreement (top-k agreement with LIVE per intervention, whole model and
// per layer) and routing load (per layer: experts run per token, load
// entropy against ln E, expert shares, flip rate against float32).
std::vector<ReportSection> ReportSections(const ReportView& report);

// PROVENANCE (docs/fca.md "Reproducibility"): one row per task (who ran
// it, where, on which versions, device, dtype and threads, the weights and
// windows used); the note names the datasets with their hashes, the seed,
// the window length and the server version. Empty table for a job stored
// before provenance was kept.
ReportSection ProvenanceSection(const ReportView& report);
// Whether the job has any provenance to show.
bool HasProvenance(const ReportView& report);

// The report as aligned text tables: models, coefficient variation,
// functional dependence (NLL, penalties with CI, retention), execution,
// and provenance when the job has it. Every line fits in `width` columns
// (0: no limit): notes wrap, wide tables are printed in parts that repeat
// their key columns (TextTable::Render). Only a single cell wider than
// `width` (none in a report) could exceed it.
std::string FormatReportText(const ReportView& report, size_t width = kReportWidth);
// The report as JSON: the GetReportResponse message in fca's one JSON
// (common/proto_json.h; docs/api.md "JSON"): the job with its spec, tasks
// and provenance, every (intervention, metric) with each model's row and
// the across-model summary, the per-layer sites and the dense twin's rows.
// An undefined value is a row with "defined": false.
std::string FormatReportJson(const ReportView& report);

// Several jobs side by side (CompareJobs): one row per job and model, and
// one across the job's models when it has several, with the NLL of
// `correct`, the penalty of every intervention, the retentions and eta2 per
// family.
std::string FormatComparisonText(const fca::v1::CompareJobsResponse& comparison,
                                 size_t width = kReportWidth);
// The same as JSON: the CompareJobsResponse message in fca's one JSON.
std::string FormatComparisonJson(const fca::v1::CompareJobsResponse& comparison);

// Several jobs pooled (PoolJobs): which job each model came from, then the
// pooled report as FormatReportText prints a job's.
std::string FormatPoolText(const fca::v1::PoolJobsResponse& pooled, size_t width = kReportWidth);
// The same as JSON: the PoolJobsResponse message in fca's one JSON.
std::string FormatPoolJson(const fca::v1::PoolJobsResponse& pooled);

}  // namespace fca::client

#endif  // FCA_CLIENT_REPORT_FORMAT_H_
