// An audit report assembled from a job and its stored result rows: what
// `fca report` prints and writes (text, JSON, a self-contained HTML page).
//
// Pure: no I/O and no clock, so every format is unit-tested on rows whose
// summary is known. The numbers are the server's rows as stored; the only
// arithmetic here is the across-model summary (mean and sample standard
// deviation over the audited models, e.g. the seeds of one family).
#ifndef FCA_CLIENT_REPORT_H_
#define FCA_CLIENT_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "client/format.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

// Mean and sample standard deviation (n - 1; 0 for a single value) of the
// defined values of one (intervention, metric) across the audited models.
struct AcrossModels {
  int64_t n = 0;          // models with a defined value
  int64_t undefined = 0;  // models whose value is undefined
  double mean = 0;
  double sd = 0;
};

// One coefficient site's mean and variance (from the "site_mean.<site>" and
// "site_variance.<site>" rows); the layer is the site name's last component.
struct SitePoint {
  std::string site, family;
  int64_t layer = 0;
  double mean = 0, variance = 0;
};

class ReportView {
 public:
  // `results` may be in any order; rows of models outside the job's spec are
  // ignored.
  ReportView(fca::v1::Job job, const std::vector<fca::v1::Result>& results);

  const fca::v1::Job& job() const { return job_; }
  // Audited models (spec order) that have at least one row.
  const std::vector<std::string>& models() const { return models_; }
  // The dense twin's name when it has rows, else "".
  const std::string& dense_twin() const { return dense_twin_; }
  // Interventions with an "nll" row, in the engine's report order.
  const std::vector<std::string>& interventions() const { return interventions_; }
  // Coefficient families (from "eta2.<family>" rows), sorted.
  const std::vector<std::string>& families() const { return families_; }

  const fca::v1::Result* Find(const std::string& model, const std::string& intervention,
                              const std::string& metric) const;
  AcrossModels Across(const std::string& intervention, const std::string& metric) const;
  // Sites of `model`, by family then layer.
  std::vector<SitePoint> Sites(const std::string& model) const;
  // The evaluation dataset's SHA-256 as stored with the rows ("" when none).
  std::string eval_sha256() const;

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // model, intervention, metric
  fca::v1::Job job_;
  std::map<Key, fca::v1::Result> rows_;
  std::vector<std::string> models_, interventions_, families_;
  std::string dense_twin_;
};

// One titled table of a report.
struct ReportSection {
  std::string title;  // "EXECUTION"
  std::string note;   // what the numbers are, one line
  TextTable table;
};
// Models, coefficient variation, functional dependence, gap retention and
// execution, each with a row per audited model, a "mean ± sd" row (or
// column) across them when there are several, and the dense twin's
// execution row.
std::vector<ReportSection> ReportSections(const ReportView& report);

// The report as aligned text tables: models, coefficient variation,
// functional dependence (NLL, penalties with CI, retention), execution.
std::string FormatReportText(const ReportView& report);
// The report as JSON: the job, each model's rows and sites, the dense twin's
// execution rows and the across-model summaries. Undefined values are null.
std::string FormatReportJson(const ReportView& report);
// One HTML page with inline CSS and SVG (no scripts, no external files):
// the tables of the text report, penalty bars with their CIs, and the
// coefficient mean and variance per layer for each family.
std::string FormatReportHtml(const ReportView& report);

}  // namespace fca::client

#endif  // FCA_CLIENT_REPORT_H_
