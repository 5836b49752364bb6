// The EXECUTION section of `fca report` (client/report_format.cc, the HTML
// report draws the same table): one reading of the timing (fca.md
// "Execution"). Each model's row carries its own twin latency, a mixture
// of experts shows "k of E" experts, the legend states the two-block rule
// the verdict applies, an across-model cell of one model has no "±", and a
// twin the spec says does not match is named. Reports built by hand from
// numbers chosen so that a borrowed or recomputed number would show.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/report_format.h"
#include "client/report_html.h"
#include "common/result_key.h"
#include "common/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/result_rows.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using report_testing::Row;
using ::testing::HasSubstr;
using ::testing::Not;

v1::AcrossModels Across(int64_t n, double mean, double sd, double min, double max) {
  v1::AcrossModels a;
  a.set_n(n);
  a.set_mean(mean);
  a.set_sd(sd);
  a.set_min(min);
  a.set_max(max);
  return a;
}

void Add(v1::GetReportResponse* r, const std::string& metric, const std::vector<v1::Result>& rows,
         const v1::AcrossModels& across) {
  v1::ReportMetric* m = r->add_metrics();
  m->set_intervention(kExecution);
  m->set_metric(metric);
  *m->mutable_key() = v1::ToProto(ResultKeyOf(metric));
  m->set_unit(MetricUnit(metric));
  for (const v1::Result& row : rows) *m->add_per_model() = row;
  *m->mutable_across_models() = across;
}

v1::Result R(const std::string& model, const std::string& metric, double value) {
  return Row(model, kExecution, metric, value);
}

// fg-a and fg-b against twin "dense": latencies 10 and 30 us/token with
// their twin at 8 and 27 in their own pairs; the twin's latency row of an
// older job (55.55, one model's pairs) must not be printed. Only fg-a has a slowdown
// (+7%, pooled CI [+1.2%, +13.5%], verdict 0: the blocks disagreed), so its
// across-model cell has n = 1.
v1::GetReportResponse TwoModels() {
  v1::GetReportResponse r;
  r.mutable_job()->set_id(7);
  r.mutable_job()->mutable_spec()->set_dense_twin("dense");
  for (const char* m : {"fg-a", "fg-b"}) {
    r.add_models(m);
    r.mutable_job()->mutable_spec()->add_models(m);
  }
  r.set_dense_twin("dense");
  r.add_interventions("correct");
  Add(&r, kBlocksPerToken, {R("fg-a", kBlocksPerToken, 4), R("fg-b", kBlocksPerToken, 4)},
      Across(2, 4, 0, 4, 4));
  Add(&r, kLatencyUsPerToken,
      {R("fg-a", kLatencyUsPerToken, 10), R("fg-b", kLatencyUsPerToken, 30)},
      Across(2, 20, 14.142, 10, 30));
  Add(&r, kDenseLatencyUsPerToken,
      {R("fg-a", kDenseLatencyUsPerToken, 8), R("fg-b", kDenseLatencyUsPerToken, 27)},
      Across(2, 17.5, 13.435, 8, 27));
  v1::Result slowdown = R("fg-a", kSlowdown, 0.07);
  slowdown.set_ci_low(0.012);
  slowdown.set_ci_high(0.135);
  Add(&r, kSlowdown, {slowdown}, Across(1, 0.07, 0, 0.07, 0.07));
  Add(&r, kSlowdownVerdict, {R("fg-a", kSlowdownVerdict, 0)}, Across(1, 0, 0, 0, 0));
  *r.add_dense_twin_rows() = R("dense", kBlocksPerToken, 4);
  *r.add_dense_twin_rows() = R("dense", kLatencyUsPerToken, 55.55);
  return r;
}

// The line of `text` that starts with `prefix` ("" when none).
std::string LineOf(const std::string& text, const std::string& prefix) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line);
  }
  return "";
}

TEST(ReportExecutionTest, EachModelShowsItsOwnTwinLatency) {
  const std::string text = FormatReportText(ReportView(TwoModels()), 0);
  EXPECT_THAT(text, HasSubstr("DENSE us/token"));
  const std::string a = LineOf(text, "fg-a "), b = LineOf(text, "fg-b ");
  EXPECT_THAT(a, HasSubstr("10.00"));
  EXPECT_THAT(a, HasSubstr("8.00"));
  EXPECT_THAT(b, HasSubstr("30.00"));
  EXPECT_THAT(b, HasSubstr("27.00"));
  // The twin's row: its blocks, no latency of its own.
  const std::string twin = LineOf(text, "dense (dense twin)");
  ASSERT_FALSE(twin.empty()) << text;
  EXPECT_THAT(text, Not(HasSubstr("55.55")));
  // Across the models: the mean of each model's own twin latency.
  EXPECT_THAT(LineOf(text, "mean ± sd"), HasSubstr("17.50 ± 13.44 (8.00..27.00)"));
}

TEST(ReportExecutionTest, TheLegendStatesTheTwoBlockRule) {
  const std::string text = FormatReportText(ReportView(TwoModels()));
  EXPECT_THAT(text, Not(HasSubstr("excludes 0")));
  EXPECT_THAT(text, Not(HasSubstr("bootstrap CI; verdict")));
  const std::string wide = FormatReportText(ReportView(TwoModels()), 0);
  EXPECT_THAT(wide, HasSubstr("Student t-interval of both timing blocks' pairs pooled"));
  EXPECT_THAT(wide, HasSubstr("each of the two timing blocks' own CIs lies above (below) 0"));
  // A pooled CI that excludes 0 beside "no detectable difference" is what
  // the rule allows, and the legend says so.
  EXPECT_THAT(LineOf(wide, "fg-a "), HasSubstr("+7.0% [+1.2%, +13.5%]"));
  EXPECT_THAT(LineOf(wide, "fg-a "), HasSubstr("no detectable difference"));
  EXPECT_THAT(wide, HasSubstr("whatever the pooled CI"));
}

TEST(ReportExecutionTest, OneModelsValueHasNoSpread) {
  const std::string text = FormatReportText(ReportView(TwoModels()), 0);
  const std::string across = LineOf(text, "mean ± sd (min..max)");
  ASSERT_FALSE(across.empty()) << text;
  EXPECT_THAT(across, HasSubstr("20.00 ± 14.14 (10.00..30.00)"));  // two models
  EXPECT_THAT(across, HasSubstr("+7.0%"));                         // one model
  EXPECT_THAT(across, Not(HasSubstr("± 0.0%")));
  EXPECT_THAT(across, Not(HasSubstr("+7.0% ±")));
}

TEST(ReportExecutionTest, AMismatchedTwinIsNamedWithTheReason) {
  v1::GetReportResponse r = TwoModels();
  EXPECT_THAT(FormatReportText(ReportView(r), 0), Not(HasSubstr("dense_twin_mismatch")));
  r.mutable_job()->mutable_spec()->set_dense_twin_mismatch("one small twin for every size");
  const std::string text = FormatReportText(ReportView(r), 0);
  EXPECT_THAT(text,
              HasSubstr("the spec lets the dense twin differ from the models (dense_twin_mismatch: "
                        "one small twin for every size)"));
  EXPECT_THAT(FormatReportHtml(ReportView(r)), HasSubstr("one small twin for every size"));
}

// An OLMoE-like model: 2 of 8 experts at each of its 4 router layers, 8
// blocks per token counted (experts over layers), beside a twin of 4 layers.
TEST(ReportExecutionTest, MixtureOfExpertsRowsShowExpertsOfE) {
  v1::GetReportResponse r;
  r.add_models("moe");
  r.mutable_job()->mutable_spec()->add_models("moe");
  r.mutable_job()->mutable_spec()->set_dense_twin("dense");
  r.set_dense_twin("dense");
  Add(&r, kBlocksPerToken, {R("moe", kBlocksPerToken, 8)}, Across(1, 8, 0, 8, 8));
  for (int l = 0; l < 4; ++l) {
    const std::string k = StoredMetricName(LayerKey(kExpertsPerToken, l));
    Add(&r, k, {R("moe", k, 2)}, Across(1, 2, 0, 2, 2));
    for (int e = 0; e < 8; ++e) {
      const std::string key = StoredMetricName(ExpertKey(kExpertShare, l, e));
      Add(&r, key, {R("moe", key, 0.125)}, Across(1, 0.125, 0, 0.125, 0.125));
    }
  }
  *r.add_dense_twin_rows() = R("dense", kBlocksPerToken, 4);
  const std::string text = FormatReportText(ReportView(r), 0);
  const std::string moe = LineOf(text, "moe ");
  // The first cell after the name (BLOCKS/TOKEN) is "2 of 8", not 8.
  const size_t at = moe.find("2 of 8");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_TRUE(absl::StripAsciiWhitespace(moe.substr(3, at - 3)).empty()) << moe;
  EXPECT_THAT(LineOf(text, "dense (dense twin)"), HasSubstr("4"));
  EXPECT_THAT(text, HasSubstr("over every evaluation token"));
  EXPECT_THAT(FormatReportHtml(ReportView(r)), HasSubstr(">2 of 8</td>"));
}

}  // namespace
}  // namespace fca::client
