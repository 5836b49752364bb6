// `fca report` (client/report.h): the across-model summary, sites, and the
// text, JSON and HTML forms, on rows whose summary is known by hand.
#include "client/report.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;
using ::testing::Not;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

v1::Result Row(const std::string& model, const std::string& intervention,
               const std::string& metric, double value) {
  v1::Result r;
  r.set_job_id(3);
  r.set_model(model);
  r.set_weights_sha256("w-" + model);
  r.set_dataset_sha256("e5e5");
  r.set_intervention(intervention);
  r.set_metric(metric);
  r.set_value(value);
  r.set_defined(true);
  r.set_n(10);
  return r;
}

v1::Result WithCi(v1::Result r, double lo, double hi) {
  r.set_ci_low(lo);
  r.set_ci_high(hi);
  return r;
}

v1::Result Undefined(v1::Result r) {
  r.set_defined(false);
  r.set_value(0);
  return r;
}

v1::Job ThreeSeedJob() {
  v1::Job job;
  job.set_id(3);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  for (const char* m : {"fg-s1", "fg-s2", "fg-s3"}) job.mutable_spec()->add_models(m);
  job.mutable_spec()->set_dense_twin("dense");
  job.mutable_spec()->set_window_length(128);
  return job;
}

// Penalties 0.1, 0.2, 0.3 (mean 0.2, sample sd 0.1); eta2 0.5, 0.7, 0.9
// (mean 0.7, sd 0.2); the retention of s3 undefined.
std::vector<v1::Result> ThreeSeedRows() {
  std::vector<v1::Result> rows;
  const std::vector<std::string> models = {"fg-s1", "fg-s2", "fg-s3"};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string& m = models[k];
    const double p = 0.1 * (k + 1);
    rows.push_back(Row(m, "replay", "live_nll", 1.5 + p));
    rows.push_back(Row(m, "correct", "nll", 1.5 + p));
    rows.push_back(Row(m, "cross_input", "nll", 1.5 + 2 * p));
    rows.push_back(WithCi(Row(m, "cross_input", "penalty", p), p - 0.05, p + 0.05));
    rows.push_back(Row(m, "global_mean", "nll", 2.0));
    rows.push_back(WithCi(Row(m, "global_mean", "penalty", 0.5 - p), 0.4 - p, 0.6 - p));
    rows.push_back(Row(m, "static_layer", "nll", 1.8));
    rows.push_back(WithCi(Row(m, "static_layer", "penalty", 0.3 - p), 0.25 - p, 0.35 - p));
    v1::Result ret = Row(m, "static_layer", "retention_pct", 100.0 * (k + 1));
    rows.push_back(k == 2 ? Undefined(ret) : ret);
    rows.push_back(Row(m, "variation", "eta2.gate", 0.5 + 0.2 * k));
    rows.push_back(Row(m, "variation", "total_variance.gate", 0.01));
    rows.push_back(Row(m, "variation", "between_input_variance.gate", 0.002));
    rows.push_back(Row(m, "variation", "within_input_variance.gate", 0.003));
    for (int layer = 0; layer < 3; ++layer) {
      const std::string site = "gate." + std::to_string(layer);
      rows.push_back(Row(m, "variation", "site_mean." + site, 1.0 - 0.1 * layer));
      rows.push_back(Row(m, "variation", "site_variance." + site, 0.01 * (layer + 1)));
    }
    rows.push_back(Row(m, "execution", "blocks_per_token", 4));
    rows.push_back(Row(m, "execution", "blocks_executed_fraction", 1));
    rows.push_back(Row(m, "execution", "slowdown", 0.05 * (k + 1)));
  }
  rows.push_back(Row("dense", "execution", "blocks_per_token", 4));
  rows.push_back(Row("dense", "execution", "blocks_executed_fraction", 1));
  rows.push_back(Row("someone-else", "correct", "nll", 9));  // not in the job: ignored
  return rows;
}

TEST(ReportViewTest, ModelsInterventionsFamiliesAndTwin) {
  const ReportView r(ThreeSeedJob(), ThreeSeedRows());
  EXPECT_EQ(r.models(), (std::vector<std::string>{"fg-s1", "fg-s2", "fg-s3"}));
  EXPECT_EQ(r.dense_twin(), "dense");
  // Report order, not row order: correct, cross_input, static_layer, global_mean.
  EXPECT_EQ(r.interventions(),
            (std::vector<std::string>{"correct", "cross_input", "static_layer", "global_mean"}));
  EXPECT_EQ(r.families(), (std::vector<std::string>{"gate"}));
  EXPECT_EQ(r.eval_sha256(), "e5e5");
  EXPECT_EQ(r.Find("someone-else", "correct", "nll"), nullptr);
}

TEST(ReportViewTest, AcrossModelsIsMeanAndSampleSd) {
  const ReportView r(ThreeSeedJob(), ThreeSeedRows());
  const AcrossModels p = r.Across("cross_input", "penalty");
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.undefined, 0);
  EXPECT_NEAR(p.mean, 0.2, 1e-12);
  EXPECT_NEAR(p.sd, 0.1, 1e-12);
  const AcrossModels eta = r.Across("variation", "eta2.gate");
  EXPECT_NEAR(eta.mean, 0.7, 1e-12);
  EXPECT_NEAR(eta.sd, 0.2, 1e-12);
  // 100 and 200 defined, s3 undefined: mean 150, sd 70.71.
  const AcrossModels ret = r.Across("static_layer", "retention_pct");
  EXPECT_EQ(ret.n, 2);
  EXPECT_EQ(ret.undefined, 1);
  EXPECT_NEAR(ret.mean, 150, 1e-9);
  EXPECT_NEAR(ret.sd, 70.710678118654755, 1e-9);
  // The dense twin is not one of the audited models.
  EXPECT_EQ(r.Across("execution", "blocks_per_token").n, 3);
}

TEST(ReportViewTest, SingleModelHasZeroSd) {
  v1::Job job = ThreeSeedJob();
  job.mutable_spec()->clear_models();
  job.mutable_spec()->add_models("fg-s2");
  const ReportView r(job, ThreeSeedRows());
  const AcrossModels p = r.Across("cross_input", "penalty");
  EXPECT_EQ(p.n, 1);
  EXPECT_NEAR(p.mean, 0.2, 1e-12);
  EXPECT_EQ(p.sd, 0);
}

TEST(ReportViewTest, SitesParseFamilyAndLayer) {
  const ReportView r(ThreeSeedJob(), ThreeSeedRows());
  const std::vector<SitePoint> sites = r.Sites("fg-s2");
  ASSERT_EQ(sites.size(), 3u);
  for (int layer = 0; layer < 3; ++layer) {
    EXPECT_EQ(sites[layer].family, "gate");
    EXPECT_EQ(sites[layer].layer, layer);
    EXPECT_NEAR(sites[layer].mean, 1.0 - 0.1 * layer, 1e-12);
    EXPECT_NEAR(sites[layer].variance, 0.01 * (layer + 1), 1e-12);
  }
  EXPECT_TRUE(r.Sites("dense").empty());
}

TEST(ReportTextTest, ShowsEverySectionAndTheSummaries) {
  const std::string text = FormatReportText(ReportView(ThreeSeedJob(), ThreeSeedRows()));
  for (const char* section : {"MODELS", "COEFFICIENT VARIATION", "FUNCTIONAL DEPENDENCE",
                              "GAP RETENTION", "EXECUTION"}) {
    EXPECT_THAT(text, HasSubstr(section));
  }
  EXPECT_THAT(text, HasSubstr("+0.2000 ± 0.1000"));           // cross_input penalty
  EXPECT_THAT(text, HasSubstr("+0.1000 [+0.0500, +0.1500]"));  // fg-s1 with CI
  EXPECT_THAT(text, HasSubstr("0.7000 ± 0.2000"));             // eta2
  EXPECT_THAT(text, HasSubstr("150.0 ± 70.7 (1 undefined)"));  // retention
  EXPECT_THAT(text, HasSubstr("undefined"));
  EXPECT_THAT(text, HasSubstr("+10.0% ± 5.0%"));               // slowdown
  EXPECT_THAT(text, HasSubstr("dense (dense twin)"));
  EXPECT_THAT(text, Not(HasSubstr("someone-else")));
}

TEST(ReportTextTest, ColumnsAlignWithMultiByteCells) {
  // "±" is two bytes but one column: right-aligned cells end together.
  TextTable t({{"A"}, {"VALUE", TextTable::Align::kRight}, {"Z"}});
  t.AddRow({"x", "1 ± 2", "z"});
  t.AddRow({"y", "12345", "z"});
  const std::string text = t.Render();
  EXPECT_EQ(text, "A  VALUE  Z\nx  1 ± 2  z\ny  12345  z\n");
}

TEST(ReportJsonTest, ParsesAndCarriesRowsSitesAndSummaries) {
  const std::string text = FormatReportJson(ReportView(ThreeSeedJob(), ThreeSeedRows()));
  auto v = json::Parse(text);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Find("job_id")->as_int(), 3);
  EXPECT_EQ(v->Find("dense_twin")->as_string(), "dense");
  const auto& models = v->Find("models")->as_array();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].Find("weights_sha256")->as_string(), "w-fg-s1");
  EXPECT_EQ(models[0].Find("sites")->as_array().size(), 3u);
  // Per-site rows are in "sites", not repeated in "results".
  for (const json::Value& row : models[0].Find("results")->as_array()) {
    EXPECT_THAT(row.Find("metric")->as_string(), Not(HasSubstr("site_")));
  }
  bool saw_penalty = false, saw_retention = false;
  for (const json::Value& a : v->Find("across_models")->as_array()) {
    const std::string key = a.Find("intervention")->as_string() + "/" + a.Find("metric")->as_string();
    if (key == "cross_input/penalty") {
      saw_penalty = true;
      EXPECT_NEAR(a.Find("mean")->as_double(), 0.2, 1e-12);
      EXPECT_NEAR(a.Find("sd")->as_double(), 0.1, 1e-12);
      EXPECT_EQ(a.Find("n_models")->as_int(), 3);
    }
    if (key == "static_layer/retention_pct") {
      saw_retention = true;
      EXPECT_EQ(a.Find("undefined")->as_int(), 1);
    }
  }
  EXPECT_TRUE(saw_penalty);
  EXPECT_TRUE(saw_retention);
  // The undefined retention of s3 is null, not 0.
  bool saw_null = false;
  for (const json::Value& row : models[2].Find("results")->as_array()) {
    if (row.Find("metric")->as_string() == "retention_pct") saw_null = row.Find("value")->is_null();
  }
  EXPECT_TRUE(saw_null);
  ASSERT_NE(v->Find("dense_twin_execution"), nullptr);
  EXPECT_EQ(v->Find("dense_twin_execution")->Find("results")->as_array().size(), 2u);
}

TEST(ReportHtmlTest, SelfContainedWithChartsAndTables) {
  const std::string html = FormatReportHtml(ReportView(ThreeSeedJob(), ThreeSeedRows()));
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("</html>"));
  // Nothing fetched or run: no scripts, no external resources.
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  // One penalty chart and, for the one family, a mean and a variance chart.
  EXPECT_EQ(Count(html, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\""), 3u);
  EXPECT_THAT(html, HasSubstr("Penalty per intervention"));
  EXPECT_THAT(html, HasSubstr("gate: coefficient mean per layer"));
  EXPECT_THAT(html, HasSubstr("gate: coefficient variance per layer"));
  // Bars carry their value; 3 models x 3 interventions besides correct.
  EXPECT_EQ(Count(html, "<rect class=\"bar\""), 9u);
  EXPECT_THAT(html, HasSubstr("fg-s2 cross_input: +0.2000"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">+0.2000 ± 0.1000</td>"));
}

// The page reads on a phone and with a screen reader, and its charts do not
// rest on colour alone.
TEST(ReportHtmlTest, AccessibleTablesAndChartsBeyondColour) {
  const std::string html = FormatReportHtml(ReportView(ThreeSeedJob(), ThreeSeedRows()));
  EXPECT_THAT(html, HasSubstr("<meta name=\"viewport\" content=\"width=device-width, "
                              "initial-scale=1\">"));
  // Every table: in a scrolling box, with a caption, scoped header cells and
  // row headers.
  const size_t tables = Count(html, "<table>");
  EXPECT_EQ(tables, 5u);
  EXPECT_EQ(Count(html, "<div class=\"table-wrap\""), tables);
  EXPECT_EQ(Count(html, "<caption>"), tables);
  EXPECT_THAT(html, HasSubstr("<caption>Functional Dependence</caption>"));
  EXPECT_THAT(html, HasSubstr(".table-wrap { overflow-x: auto;"));
  EXPECT_EQ(Count(html, "<th>"), 0u);
  EXPECT_EQ(Count(html, "<th class=\"num\">"), 0u);
  EXPECT_GT(Count(html, "<th scope=\"col\""), tables);
  EXPECT_THAT(html, HasSubstr("<tr><th scope=\"row\">fg-s1</th>"));
  // Bars: a fill pattern per model and its number above each bar.
  for (int k = 0; k < 3; ++k) {
    EXPECT_THAT(html, HasSubstr(absl::StrFormat("<pattern id=\"fca-fill-%d\"", k)));
    EXPECT_THAT(html, HasSubstr(absl::StrFormat("fill=\"url(#fca-fill-%d)\"", k)));
  }
  // Lines: a marker shape and a dash pattern per model (circle, square,
  // triangle), the model's number, and a legend that shows both.
  EXPECT_GT(Count(html, "<circle class=\"marker\""), 0u);
  EXPECT_GT(Count(html, "<rect class=\"marker\""), 0u);
  EXPECT_GT(Count(html, "<polygon class=\"marker\""), 0u);
  EXPECT_THAT(html, HasSubstr("stroke-dasharray=\"6 3\""));
  EXPECT_THAT(html, HasSubstr("2. fg-s2</li>"));
  EXPECT_THAT(html, HasSubstr("svg.chart { display: block; margin: 0.5em 0; max-width: 100%;"));
}

TEST(ReportHtmlTest, EscapesNamesInTablesAndCharts) {
  v1::Job job = ThreeSeedJob();
  job.mutable_spec()->clear_models();
  job.mutable_spec()->add_models("a<b&c");
  job.mutable_spec()->add_models("d\"e'f");
  job.mutable_spec()->set_dense_twin("<twin>");
  std::vector<v1::Result> rows;
  for (const char* m : {"a<b&c", "d\"e'f"}) {
    rows.push_back(Row(m, "correct", "nll", 1.0));
    rows.push_back(WithCi(Row(m, "cross_input", "penalty", 0.5), 0.4, 0.6));
    rows.push_back(Row(m, "cross_input", "nll", 1.5));
    rows.push_back(Row(m, "variation", "eta2.<g>", 0.5));
    rows.push_back(Row(m, "variation", "site_mean.<g>.0", 0.5));
    rows.push_back(Row(m, "variation", "site_variance.<g>.0", 0.1));
  }
  rows.push_back(Row("<twin>", "execution", "blocks_per_token", 4));
  const std::string html = FormatReportHtml(ReportView(job, rows));
  EXPECT_THAT(html, HasSubstr("a&lt;b&amp;c"));
  EXPECT_THAT(html, HasSubstr("d&quot;e&#39;f"));
  EXPECT_THAT(html, HasSubstr("&lt;g&gt;: coefficient mean per layer"));
  EXPECT_THAT(html, HasSubstr("&lt;twin&gt;"));
  for (const char* raw : {"a<b&c", "d\"e'f", "<g>", "<twin>"}) {
    EXPECT_THAT(html, Not(HasSubstr(raw))) << raw;
  }
}

// Values a few ulps apart, a single value, and non-finite rows: the charts
// still render (a near-flat range once made the tick loop spin forever).
TEST(ReportHtmlTest, FlatAndNonFiniteSeriesRender) {
  v1::Job job = ThreeSeedJob();
  std::vector<v1::Result> rows;
  const double one = 1.0, next = std::nextafter(1.0, 2.0);
  const std::vector<std::string> models = {"fg-s1", "fg-s2", "fg-s3"};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string& m = models[k];
    rows.push_back(Row(m, "correct", "nll", 1.0));
    rows.push_back(WithCi(Row(m, "cross_input", "penalty", k == 0 ? one : next), one, next));
    rows.push_back(Row(m, "token_shuffle", "penalty", k == 2 ? NAN : 0.0));
    rows.push_back(Row(m, "cross_input", "nll", 2.0));
    rows.push_back(Row(m, "token_shuffle", "nll", 1.0));
    rows.push_back(Row(m, "variation", "eta2.gate", 0.5));
    rows.push_back(Row(m, "variation", "site_mean.gate.0", k == 0 ? one : next));
    rows.push_back(Row(m, "variation", "site_variance.gate.0", k == 1 ? INFINITY : 0.0));
  }
  const std::string html = FormatReportHtml(ReportView(job, rows));
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_THAT(html, Not(HasSubstr("nan\"")));
  EXPECT_THAT(html, Not(HasSubstr("inf\"")));
}

TEST(ReportTest, NoRowsStillRenders) {
  const ReportView r(ThreeSeedJob(), {});
  EXPECT_TRUE(r.models().empty());
  EXPECT_THAT(FormatReportText(r), HasSubstr("(no rows)"));
  EXPECT_TRUE(json::Parse(FormatReportJson(r)).ok());
  EXPECT_THAT(FormatReportHtml(r), HasSubstr("</html>"));
}

}  // namespace
}  // namespace fca::client
