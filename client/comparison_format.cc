// Several jobs side by side (CompareJobs) and pooled (PoolJobs), as text
// and JSON.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "client/report_cells.h"
#include "client/report_format.h"
#include "client/text_safety.h"
#include "common/vocabulary.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::client {

namespace v1 = fca::v1;
using Align = TextTable::Align;

namespace {

// One column of a comparison: a (intervention, metric) with its title and
// number format.
struct CompareColumn {
  std::string intervention;
  MetricRef metric;
  std::string title;
  std::string (*fmt)(double, int);
  int digits;
};

void AddUnique(std::vector<std::string>* names, const std::string& name) {
  if (std::find(names->begin(), names->end(), name) == names->end()) names->push_back(name);
}

// The columns every compared job can fill, in report order: the NLL of
// `correct` (after the parameters, when stored), each penalty, each
// retention, each family's eta2 both ways.
std::vector<CompareColumn> CompareColumns(const v1::CompareJobsResponse& c) {
  std::vector<std::string> interventions, retentions, families;
  for (const v1::GetReportResponse& r : c.reports()) {
    for (const std::string& i : r.interventions()) AddUnique(&interventions, i);
    for (const std::string& f : r.families()) AddUnique(&families, f);
    for (const v1::ReportMetric& m : r.metrics()) {
      if (v1::KeyOfRow(m).metric == kRetentionPct) AddUnique(&retentions, m.intervention());
    }
  }
  std::vector<CompareColumn> cols;
  // Parameters first: a comparison across model sizes reads as a trend.
  bool sized = false;
  for (const v1::GetReportResponse& r : c.reports()) {
    for (const v1::ReportMetric& m : r.metrics()) {
      sized = sized || v1::KeyOfRow(m).metric == kParameters;
    }
  }
  if (sized) cols.push_back({kExecution, kParameters, "PARAMS", Fixed, 0});
  cols.push_back({kCorrect, kNll, absl::StrCat("NLL ", kCorrect), Fixed, 4});
  for (const std::string& i : interventions) {
    if (i != kCorrect) cols.push_back({i, kPenalty, "PENALTY " + i, Signed, 4});
  }
  for (const std::string& i : retentions) {
    cols.push_back({i, kRetentionPct, "RETENTION % " + i, Fixed, 1});
  }
  for (const std::string& f : families) {
    cols.push_back({kVariation, FamilyKey(kEta2, f), "ETA2 " + f, Fixed, 4});
    cols.push_back({kVariation, FamilyKey(kEta2Layer, f), "ETA2 LAYER " + f, Fixed, 4});
  }
  return cols;
}

void AddJobRows(const ReportView& r, const std::vector<CompareColumn>& cols, TextTable* t) {
  const std::string id = absl::StrCat(r.job().id());
  const std::string label = r.job().spec().label();
  for (const std::string& m : r.models()) {
    std::vector<std::string> row = {id, label, m};
    for (const CompareColumn& c : cols)
      row.push_back(Cell(r.Find(m, c.intervention, c.metric), c.fmt, c.digits));
    t->AddRow(std::move(row));
  }
  if (r.models().size() > 1) {
    std::vector<std::string> row = {id, label, kAcrossLabel};
    for (const CompareColumn& c : cols) {
      row.push_back(AcrossCell(r.Across(c.intervention, c.metric), c.fmt, c.digits));
    }
    t->AddRow(std::move(row));
  }
  if (r.models().empty()) t->AddRow({id, label, "(no rows)"});
}

}  // namespace

std::string FormatComparisonText(const v1::CompareJobsResponse& c, size_t width) {
  const std::vector<CompareColumn> cols = CompareColumns(c);
  std::vector<TextTable::Column> header = {{"JOB", Align::kRight}, {"LABEL"}, {"MODEL"}};
  for (const CompareColumn& col : cols) header.push_back({col.title, Align::kRight});
  TextTable t(header);
  t.set_key_columns(3);
  std::string states;
  for (const v1::GetReportResponse& report : c.reports()) {
    const ReportView r(report);
    AddJobRows(r, cols, &t);
    absl::StrAppendFormat(&states, "%sjob %d %s", states.empty() ? "" : ", ", r.job().id(),
                          JobStateName(r.job().state()));
  }
  return WrapText(absl::StrFormat("COMPARISON  %s\nNLL and penalties in nats/token (penalty "
                                  "with its bootstrap CI); mean ± sd (min..max) across each "
                                  "job's models",
                                  states),
                  width) +
         "\n" + t.Render(width);
}

std::string FormatComparisonJson(const v1::CompareJobsResponse& c) { return ReportJson(c); }

std::string FormatPoolText(const v1::PoolJobsResponse& pooled, size_t width) {
  std::vector<std::string> jobs, models;
  for (const v1::PooledModel& m : pooled.models()) {
    const std::string job = absl::StrCat(m.job_id());
    if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) jobs.push_back(job);
    models.push_back(absl::StrFormat("%s (job %d)", SanitizeForTerminal(m.model()), m.job_id()));
  }
  // The pooled report's job is no job (id 0): the header names the jobs.
  return WrapText(absl::StrFormat("POOLED  jobs %s\nmodels from: %s\n", absl::StrJoin(jobs, ", "),
                                  absl::StrJoin(models, ", ")),
                  width) +
         "\n" + FormatReportText(ReportView(pooled.report()), width);
}

std::string FormatPoolJson(const v1::PoolJobsResponse& pooled) { return ReportJson(pooled); }

}  // namespace fca::client
