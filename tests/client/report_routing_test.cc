// The routing statistics of `fca report` (client/report_routing.cc, fca.md
// "Routing statistics"): the top-k overlap column, the most co-activated
// pairs per layer and the experts of the most frequent token ids, on a
// report built by hand from rows whose order is known.
#include "client/report_routing.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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
using ::testing::HasSubstr;
using ::testing::Not;

void Add(v1::GetReportResponse* r, const std::string& intervention, const std::string& metric,
         double value, int64_t n) {
  v1::ReportMetric* m = r->add_metrics();
  m->set_intervention(intervention);
  m->set_metric(metric);
  *m->mutable_key() = v1::ToProto(ResultKeyOf(metric));
  m->set_unit(MetricUnit(ResultKeyOf(metric).metric));
  v1::Result row = report_testing::Row("olmoe", intervention, metric, value);
  row.set_n(n);
  *m->add_per_model() = row;
}

// One model, 4 experts, top-2, one router layer: LIVE's pairs sum to
// k(k-1)/2 = 1; token 32 (40 positions) goes mostly to expert 1, token 101
// (12) evenly to 2 and 3, and token 101's rows come first in the report.
v1::GetReportResponse RoutedReport(bool overlap) {
  v1::GetReportResponse r;
  r.add_models("olmoe");
  for (const char* i : {"correct", "random_route"}) {
    r.add_interventions(i);
    Add(&r, i, kNll, 3.0, 10);
  }
  Add(&r, "correct", kTopkAgreement, 1.0, 512);
  Add(&r, "random_route", kTopkAgreement, 0.125, 512);
  if (overlap) {
    Add(&r, "correct", kTopkOverlap, 1.0, 512);
    Add(&r, "random_route", kTopkOverlap, 0.4375, 512);
  }
  Add(&r, kExecution, "experts_per_token.0", 2, 256);
  const double pairs[4][4] = {{0, 0.5, 0.1, 0}, {0, 0, 0.2, 0.05}, {0, 0, 0, 0.15}, {}};
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) {
      Add(&r, kExecution, absl::StrFormat("expert_coactivation.0.%d.%d", a, b), pairs[a][b], 256);
    }
  }
  Add(&r, kExecution, "token_expert_share.0.101.2", 0.5, 12);
  Add(&r, kExecution, "token_expert_share.0.101.3", 0.5, 12);
  Add(&r, kExecution, "token_expert_share.0.32.0", 0.3, 40);
  Add(&r, kExecution, "token_expert_share.0.32.1", 0.5, 40);
  return r;
}

TEST(ReportRoutingTest, MostCoactivatedPairsAndTheTokenIdsExperts) {
  const ReportView view(RoutedReport(true));
  const std::vector<ReportSection> sections = RoutingStatisticsSections(view);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[0].title, "EXPERT CO-ACTIVATION");
  const std::string pairs = sections[0].table.Render(0);
  // The 4 largest of the 6 pairs, largest first; 0+3 (0) and 1+3 (0.05) left out.
  EXPECT_THAT(pairs, HasSubstr("0+1 0.5000, 1+2 0.2000, 2+3 0.1500, 0+2 0.1000"));
  EXPECT_THAT(pairs, Not(HasSubstr("1+3")));
  EXPECT_THAT(pairs, HasSubstr("256"));
  EXPECT_EQ(sections[1].title, "EXPERTS PER TOKEN ID");
  const std::string tokens = sections[1].table.Render(0);
  EXPECT_THAT(tokens, HasSubstr("1 0.5000, 0 0.3000"));
  EXPECT_THAT(tokens, HasSubstr("2 0.5000, 3 0.5000"));
  // The more frequent id first.
  EXPECT_LT(tokens.find("  32  "), tokens.find("  101  ")) << tokens;
}

TEST(ReportRoutingTest, TheReportShowsTheOverlapBesideTheAgreement) {
  const std::string text = FormatReportText(ReportView(RoutedReport(true)), 0);
  const size_t head = text.find("TOP-K OVERLAP");
  ASSERT_NE(head, std::string::npos);
  const size_t begin = text.find("random_route", head);
  const std::string row = text.substr(begin, text.find('\n', begin) - begin);
  EXPECT_THAT(row, ::testing::MatchesRegex("random_route +0\\.1250 +0\\.4375 .*")) << text;
  EXPECT_THAT(text, HasSubstr("EXPERT CO-ACTIVATION"));
  EXPECT_THAT(text, HasSubstr("EXPERTS PER TOKEN ID"));
  EXPECT_THAT(FormatReportHtml(ReportView(RoutedReport(true))), HasSubstr("0+1 0.5000"));
  // A job stored before the overlap was written: no empty column.
  EXPECT_THAT(FormatReportText(ReportView(RoutedReport(false)), 0), Not(HasSubstr("OVERLAP")));
}

TEST(ReportRoutingTest, NoSectionsWithoutTheirRows) {
  v1::GetReportResponse r;
  r.add_models("fg");
  Add(&r, "correct", kNll, 3.0, 10);
  EXPECT_TRUE(RoutingStatisticsSections(ReportView(r)).empty());
}

}  // namespace
}  // namespace fca::client
