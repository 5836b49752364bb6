// The saved HTML report's charts (`fca report --save_html`,
// client/report_html.cc): every chart names both axes, fits its title, and
// scrolls sideways in its own box rather than widening the page (the
// browser test, tests/web/first_screen.js, measures the page itself).
#include "client/report_html.h"

#include <regex>
#include <string>
#include <vector>

#include "client/report_format.h"
#include "common/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fca/v1/result_keys.h"
#include "tests/testing/result_rows.h"

namespace fca::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void AddRow(v1::GetReportResponse* r, const std::string& intervention, const std::string& metric,
            double value) {
  v1::ReportMetric* m = r->add_metrics();
  m->set_intervention(intervention);
  m->set_metric(metric);
  *m->mutable_key() = v1::ToProto(ResultKeyOf(metric));
  m->set_unit("nats/token");
  v1::Result row = report_testing::Row("fg", intervention, metric, value);
  row.set_ci_low(value - 0.01);
  row.set_ci_high(value + 0.01);
  *m->add_per_model() = row;
}

// One model, family "gate" at layers 0 and 1; penalties of cross_input and
// static_layer, and static_layer at one layer at a time.
v1::GetReportResponse ChartsReport() {
  v1::GetReportResponse r;
  r.mutable_job()->set_id(3);
  r.add_models("fg");
  r.add_families("gate");
  for (const char* i : {"correct", "cross_input", "static_layer"}) r.add_interventions(i);
  AddRow(&r, "cross_input", "penalty", 0.05);
  AddRow(&r, "static_layer", "penalty", 0.02);
  AddRow(&r, "static_layer", "layer_penalty.0", 0.015);
  AddRow(&r, "static_layer", "layer_penalty.1", 0.004);
  for (int64_t layer : {0, 1}) {
    v1::SiteRow* s = r.add_sites();
    s->set_model("fg");
    s->set_family("gate");
    s->set_layer(layer);
    s->set_site("gate." + std::to_string(layer));
    s->set_mean(0.5 + 0.1 * static_cast<double>(layer));
    s->set_variance(0.01);
  }
  return r;
}

struct ChartSvg {
  std::string text;    // from <svg to </svg>
  std::string before;  // what precedes it on the page, up to the previous chart
  double width;
};

std::vector<ChartSvg> Charts(const std::string& html) {
  std::vector<ChartSvg> out;
  const std::string open = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"";
  size_t last = 0;
  for (size_t p = html.find(open); p != std::string::npos; p = html.find(open, p + 1)) {
    const size_t end = html.find("</svg>", p);
    ChartSvg c{html.substr(p, end - p), html.substr(last, p - last), 0};
    std::smatch m;
    if (std::regex_search(c.text, m, std::regex("width=\"([0-9.]+)\""))) {
      c.width = std::stod(m[1]);
    }
    out.push_back(c);
    last = end;
  }
  return out;
}

// The text of the element with class `cls` in `svg`, "" when there is none.
std::string TextOf(const std::string& svg, const std::string& cls) {
  std::smatch m;
  return std::regex_search(svg, m, std::regex("class=\"tick " + cls + "\">([^<]*)</text>"))
             ? std::string(m[1])
             : "";
}

TEST(ReportHtmlChartsTest, EveryChartNamesBothAxes) {
  const std::vector<ChartSvg> charts = Charts(FormatReportHtml(ReportView(ChartsReport())));
  // In page order: the family's coefficient mean and variance per layer,
  // the penalty bars, static_layer at one layer at a time.
  ASSERT_EQ(charts.size(), 4u);
  const std::vector<std::pair<std::string, std::string>> axes = {
      {"layer", "coefficient mean"},
      {"layer", "coefficient variance"},
      {"intervention", "penalty (nats/token)"},
      {"layer", "penalty (nats/token)"}};
  for (size_t k = 0; k < charts.size(); ++k) {
    EXPECT_EQ(TextOf(charts[k].text, "axis-x"), axes[k].first) << charts[k].text;
    EXPECT_EQ(TextOf(charts[k].text, "axis-y"), axes[k].second) << charts[k].text;
  }
}

TEST(ReportHtmlChartsTest, ChartsScrollInTheirBoxAndFitTheirTitles) {
  const std::string html = FormatReportHtml(ReportView(ChartsReport()));
  for (const ChartSvg& c : Charts(html)) {
    // Right before the chart: its scroll box, labelled with its title.
    const size_t wrap = c.before.rfind("<div class=\"chart-wrap\" role=\"region\" aria-label=\"");
    ASSERT_NE(wrap, std::string::npos) << c.before;
    EXPECT_EQ(c.before.find('<', c.before.find('>', wrap)), std::string::npos) << c.before;
    // The bold 12 px title from x = 64 (7.5 px a character) fits the chart.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(c.text, m, std::regex("<title>([^<]*)</title>")));
    EXPECT_GE(c.width, 64 + 7.5 * m[1].length()) << m[1];
  }
  // Drawn at their own size: never scaled down with the page.
  EXPECT_THAT(html, HasSubstr(".chart-wrap { overflow-x: auto; max-width: 100%; }"));
  EXPECT_THAT(html, Not(HasSubstr("height: auto")));
}

}  // namespace
}  // namespace fca::client
