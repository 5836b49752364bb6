// Long file: one test per section of the text, JSON and HTML report.
// `fca report` and `fca compare` (client/report_format.h, client/report_html.h):
// the text, JSON and HTML forms of a GetReportResponse whose numbers are known.
// The summaries across models are the server's (server/core/report_assembly.h);
// these tests give them by hand, so a number the client computed itself would show.
#include "client/report_format.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/report_html.h"
#include "common/json.h"
#include "common/proto_json.h"
#include "common/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fca/v1/result_keys.h"
#include "tests/testing/result_rows.h"

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

using report_testing::Row;

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

v1::AcrossModels Across(int64_t n, double mean, double sd, double min, double max,
                        int64_t undefined = 0) {
  v1::AcrossModels a;
  a.set_n(n);
  a.set_undefined(undefined);
  a.set_mean(mean);
  a.set_sd(sd);
  a.set_min(min);
  a.set_max(max);
  return a;
}

void AddMetric(v1::GetReportResponse* r, const std::string& intervention, const std::string& metric,
               const std::string& unit, const std::vector<v1::Result>& rows,
               const v1::AcrossModels& across) {
  v1::ReportMetric* m = r->add_metrics();
  m->set_intervention(intervention);
  m->set_metric(metric);
  *m->mutable_key() = v1::ToProto(ResultKeyOf(metric));  // as the service serves it
  m->set_unit(unit);
  for (const v1::Result& row : rows) *m->add_per_model() = row;
  *m->mutable_across_models() = across;
}

void AddSite(v1::GetReportResponse* r, const std::string& model, const std::string& family,
             int64_t layer, double mean, double variance) {
  v1::SiteRow* s = r->add_sites();
  s->set_model(model);
  s->set_family(family);
  s->set_layer(layer);
  s->set_site(family + "." + std::to_string(layer));
  s->set_mean(mean);
  s->set_variance(variance);
}

v1::Job ThreeSeedJob() {
  v1::Job job;
  job.set_id(3);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  for (const char* m : {"fg-s1", "fg-s2", "fg-s3"}) job.mutable_spec()->add_models(m);
  job.mutable_spec()->set_dense_twin("dense");
  job.mutable_spec()->set_window_length(128);
  job.mutable_spec()->set_label("seeds");
  return job;
}

const std::vector<std::string>& Seeds() {
  static const auto* seeds = new std::vector<std::string>{"fg-s1", "fg-s2", "fg-s3"};
  return *seeds;
}

// One row per seed: value(k) for k = 0, 1, 2.
template <typename F>
std::vector<v1::Result> PerSeed(const std::string& intervention, const std::string& metric,
                                F value) {
  std::vector<v1::Result> rows;
  for (size_t k = 0; k < Seeds().size(); ++k) {
    rows.push_back(value(k, Row(Seeds()[k], intervention, metric, 0)));
  }
  return rows;
}

v1::Result Set(v1::Result r, double value) {
  r.set_value(value);
  return r;
}

// Penalties 0.1, 0.2, 0.3 (mean 0.2, sd 0.1, min 0.1, max 0.3); eta2 0.5,
// 0.7, 0.9; the retention of s3 undefined; sites gate.0..2.
v1::GetReportResponse ThreeSeedReport() {
  v1::GetReportResponse r;
  *r.mutable_job() = ThreeSeedJob();
  for (const std::string& m : Seeds()) r.add_models(m);
  r.set_dense_twin("dense");
  for (const char* i : {"correct", "cross_input", "static_layer", "global_mean"}) {
    r.add_interventions(i);
  }
  r.add_families("gate");
  r.set_eval_sha256("e5e5");
  auto p = [](size_t k) { return 0.1 * static_cast<double>(k + 1); };
  AddMetric(&r, "correct", "nll", "nats/token",
            PerSeed("correct", "nll", [&](size_t k, v1::Result x) { return Set(x, 1.5 + p(k)); }),
            Across(3, 1.7, 0.1, 1.6, 1.8));
  AddMetric(
      &r, "cross_input", "nll", "nats/token",
      PerSeed("cross_input", "nll", [&](size_t k, v1::Result x) { return Set(x, 1.5 + 2 * p(k)); }),
      Across(3, 1.9, 0.2, 1.7, 2.1));
  AddMetric(&r, "cross_input", "penalty", "nats/token",
            PerSeed("cross_input", "penalty",
                    [&](size_t k, v1::Result x) {
                      return WithCi(Set(x, p(k)), p(k) - 0.05, p(k) + 0.05);
                    }),
            Across(3, 0.2, 0.1, 0.1, 0.3));
  AddMetric(&r, "static_layer", "nll", "nats/token",
            PerSeed("static_layer", "nll", [](size_t, v1::Result x) { return Set(x, 1.8); }),
            Across(3, 1.8, 0, 1.8, 1.8));
  AddMetric(&r, "static_layer", "penalty", "nats/token",
            PerSeed("static_layer", "penalty",
                    [&](size_t k, v1::Result x) {
                      return WithCi(Set(x, 0.3 - p(k)), 0.25 - p(k), 0.35 - p(k));
                    }),
            Across(3, 0.1, 0.1, 0.0, 0.2));
  AddMetric(&r, "global_mean", "nll", "nats/token",
            PerSeed("global_mean", "nll", [](size_t, v1::Result x) { return Set(x, 2.0); }),
            Across(3, 2.0, 0, 2.0, 2.0));
  AddMetric(&r, "global_mean", "penalty", "nats/token",
            PerSeed("global_mean", "penalty",
                    [&](size_t k, v1::Result x) {
                      return WithCi(Set(x, 0.5 - p(k)), 0.4 - p(k), 0.6 - p(k));
                    }),
            Across(3, 0.3, 0.1, 0.2, 0.4));
  AddMetric(&r, "static_layer", "retention_pct", "%",
            PerSeed("static_layer", "retention_pct",
                    [](size_t k, v1::Result x) {
                      return k == 2 ? Undefined(x) : Set(x, 100.0 * static_cast<double>(k + 1));
                    }),
            Across(2, 150, 70.710678118654755, 100, 200, /*undefined=*/1));
  AddMetric(
      &r, "variation", "eta2.gate", "1",
      PerSeed("variation", "eta2.gate",
              [](size_t k, v1::Result x) { return Set(x, 0.5 + 0.2 * static_cast<double>(k)); }),
      Across(3, 0.7, 0.2, 0.5, 0.9));
  AddMetric(&r, "variation", "total_variance.gate", "coef^2",
            PerSeed("variation", "total_variance.gate",
                    [](size_t, v1::Result x) { return Set(x, 0.01); }),
            Across(3, 0.01, 0, 0.01, 0.01));
  AddMetric(
      &r, "execution", "blocks_per_token", "blocks/token",
      PerSeed("execution", "blocks_per_token", [](size_t, v1::Result x) { return Set(x, 4); }),
      Across(3, 4, 0, 4, 4));
  AddMetric(
      &r, "execution", "flops_overhead", "1",
      PerSeed("execution", "flops_overhead", [](size_t, v1::Result x) { return Set(x, 0.026); }),
      Across(3, 0.026, 0, 0.026, 0.026));
  // Slowdowns +5%, +10%, +15%, each with a CI of +-6%: the first spans 0.
  auto slowdown = [](size_t k) { return 0.05 * static_cast<double>(k + 1); };
  AddMetric(&r, "execution", "slowdown", "1",
            PerSeed("execution", "slowdown",
                    [&](size_t k, v1::Result x) {
                      return WithCi(Set(x, slowdown(k)), slowdown(k) - 0.06, slowdown(k) + 0.06);
                    }),
            Across(3, 0.1, 0.05, 0.05, 0.15));
  AddMetric(&r, "execution", "slowdown_verdict", "1",
            PerSeed("execution", "slowdown_verdict",
                    [](size_t k, v1::Result x) { return Set(x, k == 0 ? 0 : 1); }),
            Across(3, 2.0 / 3, 0.58, 0, 1));
  AddMetric(
      &r, "replay", "live_nll", "nats/token",
      PerSeed("replay", "live_nll", [&](size_t k, v1::Result x) { return Set(x, 1.5 + p(k)); }),
      Across(3, 1.7, 0.1, 1.6, 1.8));
  for (const std::string& m : Seeds()) {
    for (int layer = 0; layer < 3; ++layer) {
      AddSite(&r, m, "gate", layer, 1.0 - 0.1 * layer, 0.01 * (layer + 1));
    }
  }
  *r.add_dense_twin_rows() = Row("dense", "execution", "blocks_per_token", 4);
  *r.add_dense_twin_rows() = Row("dense", "execution", "blocks_executed_fraction", 1);
  return r;
}

TEST(ReportViewTest, LooksUpRowsSummariesAndSites) {
  const ReportView r(ThreeSeedReport());
  EXPECT_EQ(r.models(), Seeds());
  EXPECT_EQ(r.dense_twin(), "dense");
  EXPECT_EQ(r.interventions(),
            (std::vector<std::string>{"correct", "cross_input", "static_layer", "global_mean"}));
  EXPECT_EQ(r.families(), (std::vector<std::string>{"gate"}));
  EXPECT_EQ(r.eval_sha256(), "e5e5");
  ASSERT_NE(r.Find("fg-s2", "cross_input", "penalty"), nullptr);
  EXPECT_NEAR(r.Find("fg-s2", "cross_input", "penalty")->value(), 0.2, 1e-12);
  ASSERT_NE(r.Find("dense", "execution", "blocks_executed_fraction"), nullptr);
  EXPECT_EQ(r.Find("fg-s1", "token_shuffle", "penalty"), nullptr);
  const AcrossModels p = r.Across("cross_input", "penalty");
  EXPECT_EQ(p.n(), 3);
  EXPECT_EQ(p.max(), 0.3);
  EXPECT_EQ(r.Across("token_shuffle", "penalty").n(), 0);
  EXPECT_EQ(r.Unit("static_layer", "retention_pct"), "%");
  const std::vector<SitePoint> sites = r.Sites("fg-s2");
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[2].layer(), 2);
  EXPECT_TRUE(r.Sites("dense").empty());
}

// The widest line in terminal columns (one per UTF-8 code point).
size_t MaxLineWidth(const std::string& text) {
  size_t widest = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t width = 0;
    for (unsigned char ch : line) width += (ch & 0xC0) != 0x80;
    widest = std::max(widest, width);
  }
  return widest;
}

TEST(ReportTextTest, FitsTheWidthUnlessWide) {
  v1::GetReportResponse report = ThreeSeedReport();
  report.mutable_job()->mutable_provenance()->set_eval_sha256(std::string(64, 'e'));
  report.mutable_job()->mutable_provenance()->set_calib_sha256(std::string(64, 'c'));
  v1::JobTask* task = report.mutable_job()->add_tasks();
  task->set_model("fg-s1");
  task->mutable_provenance()->set_host("node-7.cluster.example");
  task->mutable_provenance()->set_weights_sha256(std::string(64, 'f'));
  const ReportView r(report);
  const std::string wide = FormatReportText(r, 0);
  ASSERT_GT(MaxLineWidth(wide), kReportWidth);  // or this test proves nothing
  const std::string text = FormatReportText(r);
  EXPECT_LE(MaxLineWidth(text), kReportWidth) << text;
  // Nothing is lost: every cell of the wide form is in the narrow one.
  for (const char* cell : {"+0.2000 ± 0.1000 (+0.1000..+0.3000)", "+0.1000 [+0.0500, +0.1500]",
                           "150.0 ± 70.7 (100.0..200.0) (1 undefined)", "node-7.cluster.example"}) {
    EXPECT_THAT(wide, HasSubstr(cell));
    EXPECT_THAT(text, HasSubstr(cell));
  }
}

TEST(ReportTextTest, ShowsEverySectionAndTheServersSummaries) {
  const std::string text = FormatReportText(ReportView(ThreeSeedReport()));
  for (const char* section :
       {"MODELS", "COEFFICIENT VARIATION", "FUNCTIONAL DEPENDENCE", "GAP RETENTION", "EXECUTION"}) {
    EXPECT_THAT(text, HasSubstr(section));
  }
  EXPECT_THAT(text, HasSubstr("+0.2000 ± 0.1000 (+0.1000..+0.3000)"));        // cross_input penalty
  EXPECT_THAT(text, HasSubstr("+0.1000 [+0.0500, +0.1500]"));                 // fg-s1 with CI
  EXPECT_THAT(text, HasSubstr("0.7000 ± 0.2000 (0.5000..0.9000)"));           // eta2
  EXPECT_THAT(text, HasSubstr("150.0 ± 70.7 (100.0..200.0) (1 undefined)"));  // retention
  EXPECT_THAT(text, HasSubstr("undefined"));
  EXPECT_THAT(text, HasSubstr("+10.0% ± 5.0% (+5.0%..+15.0%)"));  // slowdown
  // Each seed's slowdown with its CI and verdict; the FLOP overhead beside.
  EXPECT_THAT(text, HasSubstr("+5.0% [-1.0%, +11.0%]"));
  EXPECT_THAT(text, HasSubstr("+15.0% [+9.0%, +21.0%]"));
  EXPECT_THAT(text, HasSubstr("no detectable difference"));
  EXPECT_THAT(text, HasSubstr("2 slower, 1 no detectable difference"));
  EXPECT_THAT(text, HasSubstr("+2.6%"));
  EXPECT_THAT(text, HasSubstr("mean ± sd (min..max)"));
  EXPECT_THAT(text, HasSubstr("dense (dense twin)"));
}

// Per-layer penalties of static_layer (layers 0 and 1), as the server
// orders them: a text table and one bar chart per intervention.
v1::GetReportResponse WithLayerPenalties() {
  v1::GetReportResponse r = ThreeSeedReport();
  for (int layer : {0, 1}) {
    const std::string metric = absl::StrFormat("layer_penalty.%d", layer);
    AddMetric(&r, "static_layer", metric, "nats/token",
              PerSeed("static_layer", metric,
                      [&](size_t k, v1::Result x) {
                        const double v = layer == 0 ? 0.0 : 0.01 * static_cast<double>(k + 1);
                        return WithCi(Set(x, v), v - 0.005, v + 0.005);
                      }),
              layer == 0 ? Across(3, 0, 0, 0, 0) : Across(3, 0.02, 0.01, 0.01, 0.03));
  }
  return r;
}

TEST(ReportTextTest, PerGroupPenaltiesGetTheirOwnTable) {
  const ReportView view(WithLayerPenalties());
  const std::vector<GroupPenalty> groups = GroupPenalties(view);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].intervention, "static_layer");
  EXPECT_EQ(groups[1].scope, "layer");
  EXPECT_EQ(groups[1].group, "1");
  const std::string text = FormatReportText(view);
  EXPECT_THAT(text, HasSubstr("PER-GROUP DEPENDENCE"));
  EXPECT_THAT(text, HasSubstr("layer 1"));
  EXPECT_THAT(text, HasSubstr("+0.0200 ± 0.0100 (+0.0100..+0.0300)"));
  EXPECT_THAT(text, HasSubstr("+0.0300 [+0.0250, +0.0350]"));  // fg-s3 at layer 1
  // Without such rows there is no such section.
  EXPECT_THAT(FormatReportText(ReportView(ThreeSeedReport())),
              Not(HasSubstr("PER-GROUP DEPENDENCE")));
  const std::string html = FormatReportHtml(view);
  EXPECT_THAT(html, HasSubstr("static_layer at one layer at a time"));
  EXPECT_THAT(html, HasSubstr("<title>layer 1: +0.0200</title>"));  // the across-model mean
}

// fca.md "Reading the interventions in groups": the report's order puts
// static_token before neutral; the tables and the chart show neutral with
// the input-independent ones and static_token under token-keyed, whose
// retention is read as explained by the current token.
v1::GetReportResponse WithTokenKeyed() {
  v1::GetReportResponse r = ThreeSeedReport();
  for (const char* i : {"static_token", "neutral"}) {
    r.add_interventions(i);
    AddMetric(&r, i, "penalty", "nats/token",
              PerSeed(i, "penalty", [](size_t, v1::Result x) { return Set(x, 0.05); }),
              Across(3, 0.05, 0, 0.05, 0.05));
  }
  AddMetric(&r, "static_token", "retention_pct", "%",
            PerSeed("static_token", "retention_pct",
                    [](size_t k, v1::Result x) { return Set(x, 80.0 + 10 * k); }),
            Across(3, 90, 10, 80, 100));
  return r;
}

// The text between `from` and `to` (to the end when `to` is absent).
std::string Between(const std::string& text, const std::string& from, const std::string& to) {
  const size_t b = text.find(from);
  if (b == std::string::npos) return "";
  const size_t e = text.find(to, b);
  return text.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

TEST(ReportTextTest, InterventionsAreGroupedAndTokenKeyedRetentionIsLabelled) {
  // At full width (--wide): one table per section, each row once.
  const std::string text = FormatReportText(ReportView(WithTokenKeyed()), 0);
  // The table below the section's note (which names `correct` too).
  const std::string dependence =
      Between(Between(text, "FUNCTIONAL DEPENDENCE", "GAP RETENTION"), "GROUP", "GAP RETENTION");
  ASSERT_FALSE(dependence.empty());
  std::vector<size_t> at;
  for (const char* word :
       {"input-dependent", "correct", "cross_input", "input-independent", "static_layer",
        "global_mean", "neutral", "token-keyed", "static_token"}) {
    at.push_back(dependence.find(word));
    EXPECT_NE(at.back(), std::string::npos) << word;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << dependence;
  EXPECT_EQ(Count(dependence, "input-independent"), 1u);
  EXPECT_THAT(dependence, Not(HasSubstr("explained by")));
  const std::string retention = Between(text, "GAP RETENTION", "EXECUTION");
  EXPECT_LT(retention.find("input-independent"), retention.find("static_layer"));
  EXPECT_LT(retention.find("static_layer"),
            retention.find("token-keyed (explained by the current token)"));
  EXPECT_THAT(retention, HasSubstr("90.0 ± 10.0 (80.0..100.0)"));
  EXPECT_EQ(Count(text, "explained by the current token"), 1u);
}

// fg-s2 as a mixture of experts (docs/moe.md "Routing measures"): two
// router layers of 4 experts, top-k agreement under correct (1 by
// construction), cross_input and static_layer, its load per layer. The
// other seeds have no routers.
void AddOne(v1::GetReportResponse* r, const std::string& intervention, const std::string& metric,
            double value, int64_t n = 10) {
  v1::Result row = Row("fg-s2", intervention, metric, value);
  row.set_n(n);
  AddMetric(r, intervention, metric, MetricUnit(metric), {row}, Across(1, value, 0, value, value));
}

v1::GetReportResponse WithRouting() {
  v1::GetReportResponse r = ThreeSeedReport();
  const struct {
    const char* intervention;
    double all, layer0, layer1;
  } agreement[] = {
      {"static_layer", 0.75, 0.8, 0.7}, {"cross_input", 0.5, 0.625, 0.375}, {"correct", 1, 1, 1}};
  for (const auto& a : agreement) {
    AddOne(&r, a.intervention, "topk_agreement", a.all, 512);
    AddOne(&r, a.intervention, "layer_topk_agreement.0", a.layer0, 256);
    AddOne(&r, a.intervention, "layer_topk_agreement.1", a.layer1, 256);
  }
  AddOne(&r, "execution", "experts_per_token.0", 2);
  AddOne(&r, "execution", "experts_per_token.1", 2);
  AddOne(&r, "execution", "expert_load_entropy.0", 1.2799);
  AddOne(&r, "execution", "expert_load_entropy.1", std::log(4.0));
  const double shares[2][4] = {{0.1, 0.2, 0.3, 0.4}, {0.25, 0.25, 0.25, 0.25}};
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e) {
      AddOne(&r, "execution", absl::StrFormat("expert_share.%d.%d", l, e), shares[l][e]);
    }
  }
  return r;
}

constexpr char kRoutingSections[] =
    R"(
ROUTING AGREEMENT (mixtures of experts: fraction of (token, router layer) whose chosen expert set
under the intervention equals LIVE's (correct: 1 by construction; random_route: k experts drawn
uniformly, the same-cost chance baseline), over all router layers and per layer; N = tokens x router
layers)
MODEL  INTERVENTION  TOP-K AGREEMENT  LAYER 0  LAYER 1    N
fg-s2  correct                1.0000   1.0000   1.0000  512
fg-s2  cross_input            0.5000   0.6250   0.3750  512
fg-s2  static_layer           0.7500   0.8000   0.7000  512

ROUTING LOAD (per router layer, over every evaluation token (LIVE's recorded router coefficients
through the model's own top-k): routed experts run per token, entropy of the experts' shares of the
layer's (token, expert) assignments in nats (ln E when balanced, E experts), the smallest and
largest share (1/E when balanced))
MODEL  LAYER  EXPERTS/TOKEN  LOAD ENTROPY  E    ln E  EXPERT SHARE min..max
fg-s2      0              2        1.2799  4  1.3863         0.1000..0.4000
fg-s2      1              2        1.3863  4  1.3863         0.2500..0.2500
)";

TEST(ReportTextTest, RoutingSectionsForModelsWithRoutersOnly) {
  const ReportView view(WithRouting());
  const std::vector<ModelRouting> routing = Routing(view);
  ASSERT_EQ(routing.size(), 1u);  // fg-s1 and fg-s3 have no routers
  EXPECT_EQ(routing[0].model, "fg-s2");
  ASSERT_EQ(routing[0].layers.size(), 2u);
  EXPECT_EQ(routing[0].layers[1].layer, 1);
  ASSERT_EQ(routing[0].layers[0].expert_shares.size(), 4u);
  EXPECT_EQ(routing[0].layers[0].expert_shares[3]->value(), 0.4);
  EXPECT_EQ(routing[0].layers[0].flip_rate, nullptr);

  // The report without routers, byte for byte up to EXECUTION (where the
  // routed model's blocks read "k of E": report_execution_test.cc), with
  // the routing sections after EXECUTION and before the closing note on
  // the across-model cells.
  const std::string plain = FormatReportText(ReportView(ThreeSeedReport()));
  EXPECT_THAT(plain, Not(HasSubstr("ROUTING")));
  const size_t closing = plain.find("\nmean ± sd (min..max): across the 3");
  ASSERT_NE(closing, std::string::npos);
  const std::string routed = FormatReportText(view);
  const size_t execution = plain.find("\nEXECUTION");
  EXPECT_EQ(routed.substr(0, execution), plain.substr(0, execution));
  EXPECT_THAT(routed, ::testing::EndsWith(kRoutingSections + plain.substr(closing)));

  // The HTML report draws the same sections.
  const std::string html = FormatReportHtml(view);
  EXPECT_THAT(html, HasSubstr("<h2>Routing Agreement</h2>"));
  EXPECT_THAT(html, HasSubstr("<h2>Routing Load</h2>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">0.1000..0.4000</td>"));
  EXPECT_THAT(FormatReportHtml(ReportView(ThreeSeedReport())), Not(HasSubstr("Routing")));
}

// Past kMaxLayerColumns router layers the agreement table gives each
// intervention's range over layers; a bfloat16 audit adds the flip rate
// against float32, per layer and over all layers.
TEST(ReportTextTest, ManyRouterLayersAndTheFlipRate) {
  v1::GetReportResponse r = ThreeSeedReport();
  for (int l = 0; l < 16; ++l) {
    AddOne(&r, "static_layer", absl::StrFormat("layer_topk_agreement.%d", l), 0.5 + l / 32.0, 64);
    AddOne(&r, "execution", absl::StrFormat("experts_per_token.%d", l), 8);
    AddOne(&r, "replay", absl::StrFormat("layer_routing_flip_rate.%d", l), l == 3 ? 0.125 : 0);
  }
  AddOne(&r, "static_layer", "topk_agreement", 0.734375, 1024);
  AddOne(&r, "replay", "routing_flip_rate", 0.0078125, 1024);
  const std::string text = FormatReportText(ReportView(r), 0);
  const std::string agreement = Between(text, "ROUTING AGREEMENT", "ROUTING LOAD");
  EXPECT_THAT(agreement, HasSubstr("PER LAYER min..max"));
  EXPECT_THAT(agreement, Not(HasSubstr("LAYER 0")));
  EXPECT_THAT(agreement,
              HasSubstr("fg-s2  static_layer           0.7344      0.5000..0.9688  1024"));
  const std::string load = Between(text, "ROUTING LOAD", "\nmean ± sd");
  EXPECT_THAT(load, HasSubstr("FLIP RATE = fraction of tokens"));
  EXPECT_THAT(load, HasSubstr("FLIP RATE vs FLOAT32"));
  EXPECT_EQ(Count(load, "\nfg-s2 "), 17u) << load;  // 16 layers and "all"
  EXPECT_THAT(load, HasSubstr("0.1250\n"));
  EXPECT_THAT(load, HasSubstr("all"));
  EXPECT_THAT(load, HasSubstr("0.0078\n"));
}

// A server older than typed keys sends no Result.key: the CLI reads the
// stored names with the one decoder, and prints the same report.
TEST(ReportTextTest, RowsWithoutTypedKeysPrintTheSameReport) {
  for (v1::GetReportResponse r : {WithLayerPenalties(), WithRouting()}) {
    const std::string typed = FormatReportText(ReportView(r), 0);
    for (v1::ReportMetric& m : *r.mutable_metrics()) {
      m.clear_key();
      for (v1::Result& row : *m.mutable_per_model()) row.clear_key();
    }
    for (v1::Result& row : *r.mutable_dense_twin_rows()) row.clear_key();
    EXPECT_EQ(FormatReportText(ReportView(r), 0), typed);
  }
}

TEST(ReportHtmlTest, PenaltyChartAndTablesShowTheGroups) {
  const std::string html = FormatReportHtml(ReportView(WithTokenKeyed()));
  EXPECT_THAT(html, HasSubstr("token-keyed (explained by the current token)"));
  // The chart's labels: neutral's bar before static_token's, each group
  // named once under its first bar.
  const std::string chart = Between(html, "Penalty per intervention", "</svg>");
  ASSERT_FALSE(chart.empty());
  EXPECT_LT(chart.find(">neutral<"), chart.find(">static_token<"));
  EXPECT_EQ(Count(chart, ">input-independent<"), 1u);
  EXPECT_EQ(Count(chart, ">token-keyed<"), 1u);
  EXPECT_LT(chart.find(">input-independent<"), chart.find(">token-keyed<"));
}

TEST(ReportTextTest, ColumnsAlignWithMultiByteCells) {
  // "±" is two bytes but one column: right-aligned cells end together.
  TextTable t({{"A"}, {"VALUE", TextTable::Align::kRight}, {"Z"}});
  t.AddRow({"x", "1 ± 2", "z"});
  t.AddRow({"y", "12345", "z"});
  const std::string text = t.Render();
  EXPECT_EQ(text, "A  VALUE  Z\nx  1 ± 2  z\ny  12345  z\n");
}

// report --save_json is the GetReport message in fca's one JSON: it
// parses back to the very message, with proto names and every zero kept.
TEST(ReportJsonTest, IsTheGetReportMessageInFcasJson) {
  const v1::GetReportResponse report = ThreeSeedReport();
  const std::string text = FormatReportJson(ReportView(report));
  v1::GetReportResponse parsed;
  ASSERT_TRUE(ParseProtoJson(text, &parsed).ok()) << text;
  EXPECT_EQ(parsed.SerializeAsString(), report.SerializeAsString());
  auto v = json::Parse(text);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Find("job")->Find("id")->as_string(), "3");  // int64: a string
  EXPECT_EQ(v->Find("dense_twin")->as_string(), "dense");
  EXPECT_EQ(v->Find("metrics")->as_array().size(), static_cast<size_t>(report.metrics_size()));
  EXPECT_NE(v->Find("dense_twin_rows"), nullptr);
  EXPECT_EQ(text.find("denseTwin"), std::string::npos);
  EXPECT_EQ(text.find("perModel"), std::string::npos);
  // The undefined retention of s3 says so; its value 0 is printed.
  bool saw_undefined = false;
  for (const json::Value& m : v->Find("metrics")->as_array()) {
    if (m.Find("metric")->as_string() != "retention_pct") continue;
    for (const json::Value& row : m.Find("per_model")->as_array()) {
      if (row.Find("model")->as_string() != "fg-s3") continue;
      saw_undefined = !row.Find("defined")->as_bool();
      EXPECT_NE(row.Find("value"), nullptr);
    }
  }
  EXPECT_TRUE(saw_undefined);
}

TEST(ReportHtmlTest, SelfContainedWithChartsAndTables) {
  const std::string html = FormatReportHtml(ReportView(ThreeSeedReport()));
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
  EXPECT_THAT(html, HasSubstr("<td class=\"num\">+0.2000 ± 0.1000 (+0.1000..+0.3000)</td>"));
}

// The page reads on a phone and with a screen reader, and its charts do not
// rest on colour alone.
TEST(ReportHtmlTest, AccessibleTablesAndChartsBeyondColour) {
  const std::string html = FormatReportHtml(ReportView(ThreeSeedReport()));
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
  EXPECT_THAT(html, HasSubstr(".chart-wrap { overflow-x: auto;"));
}

TEST(ReportHtmlTest, EscapesNamesInTablesAndCharts) {
  v1::GetReportResponse r;
  *r.mutable_job() = ThreeSeedJob();
  r.mutable_job()->mutable_spec()->clear_models();
  const std::vector<std::string> models = {"a<b&c", "d\"e'f"};
  for (const std::string& m : models) {
    r.mutable_job()->mutable_spec()->add_models(m);
    r.add_models(m);
    AddSite(&r, m, "<g>", 0, 0.5, 0.1);
  }
  r.mutable_job()->mutable_spec()->set_dense_twin("<twin>");
  r.set_dense_twin("<twin>");
  r.add_interventions("correct");
  r.add_interventions("cross_input");
  r.add_families("<g>");
  AddMetric(&r, "correct", "nll", "nats/token",
            {Row(models[0], "correct", "nll", 1.0), Row(models[1], "correct", "nll", 1.0)},
            Across(2, 1, 0, 1, 1));
  AddMetric(&r, "cross_input", "penalty", "nats/token",
            {WithCi(Row(models[0], "cross_input", "penalty", 0.5), 0.4, 0.6),
             WithCi(Row(models[1], "cross_input", "penalty", 0.5), 0.4, 0.6)},
            Across(2, 0.5, 0, 0.5, 0.5));
  AddMetric(
      &r, "variation", "eta2.<g>", "1",
      {Row(models[0], "variation", "eta2.<g>", 0.5), Row(models[1], "variation", "eta2.<g>", 0.5)},
      Across(2, 0.5, 0, 0.5, 0.5));
  *r.add_dense_twin_rows() = Row("<twin>", "execution", "blocks_per_token", 4);
  const std::string html = FormatReportHtml(ReportView(r));
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
  v1::GetReportResponse r;
  *r.mutable_job() = ThreeSeedJob();
  for (const std::string& m : Seeds()) r.add_models(m);
  r.add_interventions("correct");
  r.add_interventions("cross_input");
  r.add_interventions("token_shuffle");
  r.add_families("gate");
  const double one = 1.0, next = std::nextafter(1.0, 2.0);
  AddMetric(&r, "cross_input", "penalty", "nats/token",
            PerSeed("cross_input", "penalty",
                    [&](size_t k, v1::Result x) {
                      return WithCi(Set(x, k == 0 ? one : next), one, next);
                    }),
            Across(3, one, 0, one, next));
  AddMetric(&r, "token_shuffle", "penalty", "nats/token",
            PerSeed("token_shuffle", "penalty",
                    [](size_t k, v1::Result x) { return Set(x, k == 2 ? NAN : 0.0); }),
            Across(3, NAN, NAN, 0, NAN));
  for (size_t k = 0; k < Seeds().size(); ++k) {
    AddSite(&r, Seeds()[k], "gate", 0, k == 0 ? one : next, k == 1 ? INFINITY : 0.0);
  }
  const std::string html = FormatReportHtml(ReportView(r));
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_THAT(html, Not(HasSubstr("nan\"")));
  EXPECT_THAT(html, Not(HasSubstr("inf\"")));
}

TEST(ReportTest, NoRowsStillRenders) {
  v1::GetReportResponse empty;
  *empty.mutable_job() = ThreeSeedJob();
  const ReportView r(empty);
  EXPECT_TRUE(r.models().empty());
  EXPECT_THAT(FormatReportText(r), HasSubstr("(no rows)"));
  EXPECT_TRUE(json::Parse(FormatReportJson(r)).ok());
  EXPECT_THAT(FormatReportHtml(r), HasSubstr("</html>"));
}

// ------------------------------------------------------------- compare

v1::CompareJobsResponse TwoJobs() {
  v1::CompareJobsResponse c;
  *c.add_reports() = ThreeSeedReport();
  v1::GetReportResponse single;
  *single.mutable_job() = ThreeSeedJob();
  single.mutable_job()->set_id(4);
  single.mutable_job()->mutable_spec()->set_label("rerun");
  single.add_models("fg-s1");
  single.add_interventions("correct");
  single.add_interventions("token_shuffle");
  AddMetric(&single, "correct", "nll", "nats/token", {Row("fg-s1", "correct", "nll", 1.25)},
            Across(1, 1.25, 0, 1.25, 1.25));
  AddMetric(&single, "token_shuffle", "penalty", "nats/token",
            {WithCi(Row("fg-s1", "token_shuffle", "penalty", 0.75), 0.5, 1.0)},
            Across(1, 0.75, 0, 0.75, 0.75));
  *c.add_reports() = single;
  return c;
}

TEST(CompareTest, TextHasARowPerJobAndModelAndTheUnionOfColumns) {
  const std::string text = FormatComparisonText(TwoJobs(), /*width=*/0);  // --wide: one table
  EXPECT_THAT(text, HasSubstr("job 3 SUCCEEDED, job 4 SUCCEEDED"));
  for (const char* column :
       {"PENALTY cross_input", "PENALTY token_shuffle", "RETENTION % static_layer", "ETA2 gate"}) {
    EXPECT_THAT(text, HasSubstr(column));
  }
  EXPECT_THAT(text, HasSubstr("+0.2000 ± 0.1000 (+0.1000..+0.3000)"));
  EXPECT_THAT(text, HasSubstr("+0.7500 [+0.5000, +1.0000]"));
  EXPECT_THAT(text, HasSubstr("rerun"));
  // Job 4 has one model: no across-model row for it.
  size_t across = 0;
  for (size_t p = text.find("mean ± sd (min..max)"); p != std::string::npos;
       p = text.find("mean ± sd (min..max)", p + 1)) {
    ++across;
  }
  EXPECT_EQ(across, 2u);  // the note and job 3's row
}

TEST(CompareTest, FitsTheWidthUnlessWide) {
  ASSERT_GT(MaxLineWidth(FormatComparisonText(TwoJobs(), 0)), kReportWidth);
  const std::string compare = FormatComparisonText(TwoJobs());
  EXPECT_LE(MaxLineWidth(compare), kReportWidth) << compare;
  // Each part repeats the job, label and model columns.
  size_t headers = 0;
  for (size_t p = compare.find("JOB  LABEL"); p != std::string::npos;
       p = compare.find("JOB  LABEL", p + 1)) {
    ++headers;
  }
  EXPECT_GE(headers, 2u) << compare;
}

TEST(CompareTest, JsonIsTheCompareJobsMessage) {
  const v1::CompareJobsResponse jobs = TwoJobs();
  const std::string text = FormatComparisonJson(jobs);
  v1::CompareJobsResponse parsed;
  ASSERT_TRUE(ParseProtoJson(text, &parsed).ok()) << text;
  EXPECT_EQ(parsed.SerializeAsString(), jobs.SerializeAsString());
  auto v = json::Parse(text);
  ASSERT_TRUE(v.ok()) << v.status();
  const auto& reports = v->Find("reports")->as_array();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].Find("job")->Find("spec")->Find("label")->as_string(), "rerun");
}

}  // namespace
TEST(ReportProvenanceTest, EveryFormCarriesTheJobsAndTasksProvenance) {
  v1::GetReportResponse report = ThreeSeedReport();
  v1::Job* job = report.mutable_job();
  job->mutable_provenance()->set_eval_sha256("e5e5");
  job->mutable_provenance()->set_calib_sha256("c6c6");
  job->mutable_provenance()->set_server_version("v9");
  v1::JobTask* task = job->add_tasks();
  task->set_model("fg-s1");
  task->mutable_provenance()->set_worker("local/0");
  task->mutable_provenance()->set_host("node<7>");
  task->mutable_provenance()->set_engine_version("v9");
  task->mutable_provenance()->set_eval_windows(12);
  const ReportView r(report);
  const std::string text = FormatReportText(r);
  EXPECT_THAT(text, HasSubstr("PROVENANCE (eval  sha256:e5e5, calib  sha256:c6c6"));
  EXPECT_THAT(text, HasSubstr("node<7>"));
  const std::string html = FormatReportHtml(r);
  EXPECT_THAT(html, HasSubstr("<h2>Provenance</h2>"));
  EXPECT_THAT(html, HasSubstr("node&lt;7&gt;"));
  auto v = json::Parse(FormatReportJson(r));
  ASSERT_TRUE(v.ok()) << v.status();
  const json::Value* p = v->Find("job")->Find("provenance");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->Find("calib_sha256")->as_string(), "c6c6");
  EXPECT_NE(p->Find("eval_dataset"), nullptr);  // every field, even empty
  const json::Value& t = v->Find("job")->Find("tasks")->as_array().at(0);
  EXPECT_EQ(t.Find("model")->as_string(), "fg-s1");
  EXPECT_EQ(t.Find("provenance")->Find("host")->as_string(), "node<7>");
  EXPECT_EQ(t.Find("provenance")->Find("eval_windows")->as_string(), "12");  // int64: a string
  EXPECT_NE(v->Find("job")->Find("spec")->Find("window_length"), nullptr);
}

TEST(ReportProvenanceTest, AJobWithoutProvenanceHasNoSection) {
  const ReportView r(ThreeSeedReport());
  EXPECT_THAT(FormatReportText(r), ::testing::Not(HasSubstr("PROVENANCE")));
  EXPECT_THAT(FormatReportHtml(r), ::testing::Not(HasSubstr("Provenance")));
}

}  // namespace fca::client
