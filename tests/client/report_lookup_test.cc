// The lookup-table section of `fca report` (docs/fca.md "Lookup tables"):
// in-sample and out-of-sample shares side by side, and an exact table of
// (token, position) read as what the architecture implies.
#include <string>

#include "client/report_format.h"
#include "client/report_html.h"
#include "common/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fca/v1/result_keys.h"
#include "tests/testing/result_rows.h"

namespace fca::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void AddVariation(v1::GetReportResponse* r, const std::string& metric, double value) {
  v1::ReportMetric* m = r->add_metrics();
  m->set_intervention(kVariation);
  m->set_metric(metric);
  *m->mutable_key() = v1::ToProto(ResultKeyOf(metric));
  m->set_unit("1");
  *m->add_per_model() = report_testing::Row("fg", kVariation, metric, value);
}

void AddSite(v1::GetReportResponse* r, int64_t layer, bool lookup_table) {
  v1::SiteRow* s = r->add_sites();
  s->set_model("fg");
  s->set_family("gate");
  s->set_layer(layer);
  s->set_site("gate." + std::to_string(layer));
  s->set_lookup_table(lookup_table);
}

// One model, family "gate": layer 0 an exact table on E, layer 1 not.
v1::GetReportResponse LookupReport() {
  v1::GetReportResponse r;
  r.mutable_job()->set_id(3);
  r.add_models("fg");
  r.add_families("gate");
  AddVariation(&r, "eta2.gate", 0.5);
  AddVariation(&r, "eta2_token.gate", 0.62);
  AddVariation(&r, "eta2_token_oos.gate", -0.05);
  AddVariation(&r, "eta2_token_position.gate", 0.99);
  AddVariation(&r, "eta2_token_position_oos.gate", 0.4);
  AddSite(&r, 0, true);
  AddSite(&r, 1, false);
  return r;
}

TEST(ReportLookupTest, InSampleBesideOutOfSampleAndTheTableReadAsArchitecture) {
  const ReportView view(LookupReport());
  const std::string text = FormatReportText(view, 400);
  ASSERT_THAT(text, HasSubstr("LOOKUP TABLES"));
  EXPECT_THAT(text, HasSubstr("expected from the architecture"));
  EXPECT_THAT(text, HasSubstr("not a finding"));
  std::string row;
  for (size_t p = text.find("\ngate"); p != std::string::npos; p = text.find("\ngate", p + 1)) {
    const std::string line = text.substr(p + 1, text.find('\n', p + 1) - p - 1);
    if (line.find("0.6200") != std::string::npos) row = line;
  }
  ASSERT_FALSE(row.empty()) << text;
  // In report order: token in-sample, oos, (token, position) in-sample, oos;
  // then the exact tables: layer 0 only.
  const size_t in = row.find("0.6200"), oos = row.find("-0.0500"), pair = row.find("0.9900"),
               pair_oos = row.find("0.4000"), exact = row.find("gate.0");
  EXPECT_LT(in, oos);
  EXPECT_LT(oos, pair);
  EXPECT_LT(pair, pair_oos);
  ASSERT_NE(exact, std::string::npos) << row;
  EXPECT_LT(pair_oos, exact);
  EXPECT_THAT(row, Not(HasSubstr("gate.1")));
  const std::string html = FormatReportHtml(view);
  EXPECT_THAT(html, HasSubstr("<h2>Lookup Tables</h2>"));
  EXPECT_THAT(html, HasSubstr("expected from the architecture"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">0.6200</td><td class=\"num\">-0.0500</td>"));
}

// A job stored before these rows existed has no section.
TEST(ReportLookupTest, NoLookupRowsNoSection) {
  v1::GetReportResponse r = LookupReport();
  r.clear_metrics();
  AddVariation(&r, "eta2.gate", 0.5);
  EXPECT_THAT(FormatReportText(ReportView(r), 400), Not(HasSubstr("LOOKUP TABLES")));
}

}  // namespace
}  // namespace fca::client
