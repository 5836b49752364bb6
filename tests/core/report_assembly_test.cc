// server/core/report_assembly.h and metric_catalog.h: the report of a job from rows
// whose summary is known by hand (docs/fca.md, "Multi-model aggregation":
// mean, sample sd, min and max across models).
#include "server/core/report_assembly.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "server/core/metric_catalog.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/report_rows.h"
#include "tests/testing/result_rows.h"

namespace fca::core {
namespace {

using ::testing::ElementsAre;

using report_testing::Row;

v1::Result Undefined(v1::Result r) {
  r.set_defined(false);
  r.set_value(0);
  return r;
}

v1::Job ThreeSeedJob() {
  v1::Job job;
  job.set_id(3);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  for (const char* m : {"s1", "s2", "s3"}) job.mutable_spec()->add_models(m);
  job.mutable_spec()->set_dense_twin("dense");
  return job;
}

// Penalties 0.1, 0.2, 0.3: mean 0.2, sample sd 0.1, min 0.1, max 0.3.
// Retentions 100, 200 and undefined: n 2, mean 150, sd 70.71, min 100, max
// 200. Sites gate.0, gate.2 and gate.10 (a numeric layer order).
std::vector<v1::Result> ThreeSeedRows() {
  std::vector<v1::Result> rows;
  const std::vector<std::string> models = {"s1", "s2", "s3"};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string& m = models[k];
    const double p = 0.1 * static_cast<double>(k + 1);
    // Stored out of report order on purpose.
    rows.push_back(Row(m, "replay", "live_nll", 1.5 + p));
    rows.push_back(Row(m, "execution", "slowdown", 0.05 * static_cast<double>(k + 1)));
    rows.push_back(Row(m, "cross_input", "penalty", p));
    rows.push_back(Row(m, "cross_input", "nll", 1.5 + 2 * p));
    rows.push_back(Row(m, "correct", "nll", 1.5 + p));
    rows.push_back(Row(m, "global_mean", "nll", 2.0));
    rows.push_back(Row(m, "static_layer", "nll", 1.8));
    v1::Result retention = Row(m, "static_layer", "retention_pct", 100.0 * (k + 1));
    rows.push_back(k == 2 ? Undefined(retention) : retention);
    rows.push_back(Row(m, "variation", "eta2.gate", 0.5 + 0.2 * static_cast<double>(k)));
    rows.push_back(Row(m, "execution", "blocks_per_token", 4));
    for (int layer : {10, 0, 2}) {
      const std::string site = "gate." + std::to_string(layer);
      rows.push_back(Row(m, "variation", "site_mean." + site, 1.0 - 0.01 * layer));
      rows.push_back(Row(m, "variation", "site_variance." + site, 0.001 * (layer + 1)));
    }
  }
  rows.push_back(Row("s2", "future_intervention", "nll", 3.0));  // not in the catalog
  rows.push_back(Row("s1", "execution", "zz_new_metric", 1.0));
  rows.push_back(Row("dense", "execution", "blocks_per_token", 4));
  rows.push_back(Row("dense", "execution", "latency_us_per_token", 9));
  rows.push_back(Row("someone-else", "correct", "nll", 9));  // not in the job: ignored
  return rows;
}

const v1::ReportMetric* FindMetric(const v1::GetReportResponse& r, const std::string& intervention,
                                   const std::string& metric) {
  for (const v1::ReportMetric& m : r.metrics()) {
    if (m.intervention() == intervention && m.metric() == metric) return &m;
  }
  return nullptr;
}

TEST(ReportTest, AcrossModelsIsMeanSampleSdMinAndMax) {
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), ThreeSeedRows());
  const v1::ReportMetric* p = FindMetric(r, "cross_input", "penalty");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->unit(), "nats/token");
  ASSERT_EQ(p->per_model_size(), 3);
  EXPECT_EQ(p->per_model(0).model(), "s1");  // spec order
  EXPECT_EQ(p->per_model(2).model(), "s3");
  const v1::AcrossModels& a = p->across_models();
  EXPECT_EQ(a.n(), 3);
  EXPECT_EQ(a.undefined(), 0);
  EXPECT_NEAR(a.mean(), 0.2, 1e-12);
  EXPECT_NEAR(a.sd(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(a.min(), 0.1);
  EXPECT_DOUBLE_EQ(a.max(), 0.3);
  // The between-model t-interval (docs/fca.md "Multi-model aggregation"):
  // 0.2 +- t_{0.975, 2} 0.1 / sqrt(3), t_{0.975, 2} = 4.302652730.
  ASSERT_TRUE(a.has_ci_low());
  ASSERT_TRUE(a.has_ci_high());
  EXPECT_NEAR(a.ci_low(), 0.2 - 4.302652730 * 0.1 / std::sqrt(3.0), 1e-8);
  EXPECT_NEAR(a.ci_high(), 0.2 + 4.302652730 * 0.1 / std::sqrt(3.0), 1e-8);
  EXPECT_DOUBLE_EQ(a.ci_level(), 0.95);

  const v1::ReportMetric* ret = FindMetric(r, "static_layer", "retention_pct");
  ASSERT_NE(ret, nullptr);
  EXPECT_EQ(ret->unit(), "%");
  EXPECT_EQ(ret->per_model_size(), 3);  // the undefined row is shown, as undefined
  EXPECT_FALSE(ret->per_model(2).defined());
  EXPECT_EQ(ret->across_models().n(), 2);
  EXPECT_EQ(ret->across_models().undefined(), 1);
  EXPECT_NEAR(ret->across_models().mean(), 150, 1e-9);
  EXPECT_NEAR(ret->across_models().sd(), std::sqrt(5000.0), 1e-9);
  EXPECT_DOUBLE_EQ(ret->across_models().min(), 100);
  EXPECT_DOUBLE_EQ(ret->across_models().max(), 200);

  const v1::ReportMetric* eta = FindMetric(r, "variation", "eta2.gate");
  ASSERT_NE(eta, nullptr);
  EXPECT_EQ(eta->unit(), "1");
  EXPECT_NEAR(eta->across_models().mean(), 0.7, 1e-12);
  EXPECT_NEAR(eta->across_models().sd(), 0.2, 1e-12);
  EXPECT_NEAR(eta->across_models().min(), 0.5, 1e-12);
  EXPECT_NEAR(eta->across_models().max(), 0.9, 1e-12);
}

TEST(ReportTest, ModelsInterventionsFamiliesAndTwin) {
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), ThreeSeedRows());
  EXPECT_EQ(r.job().id(), 3);
  EXPECT_THAT(r.models(), ElementsAre("s1", "s2", "s3"));
  EXPECT_EQ(r.dense_twin(), "dense");
  // The catalog's order, then interventions it does not know.
  EXPECT_THAT(r.interventions(), ElementsAre("correct", "cross_input", "static_layer",
                                             "global_mean", "future_intervention"));
  EXPECT_THAT(r.families(), ElementsAre("gate"));
  EXPECT_EQ(r.eval_sha256(), "e5e5");
  ASSERT_EQ(r.dense_twin_rows_size(), 2);
  EXPECT_EQ(r.dense_twin_rows(0).metric(), "blocks_per_token");
  EXPECT_EQ(r.dense_twin_rows(1).metric(), "latency_us_per_token");
  for (const v1::ReportMetric& m : r.metrics()) {
    for (const v1::Result& row : m.per_model()) EXPECT_NE(row.model(), "someone-else");
  }
}

TEST(ReportTest, MetricsComeInReportOrder) {
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), ThreeSeedRows());
  std::vector<std::string> keys;
  for (const v1::ReportMetric& m : r.metrics()) keys.push_back(m.intervention() + "/" + m.metric());
  EXPECT_THAT(
      keys, ElementsAre("correct/nll", "cross_input/nll", "cross_input/penalty", "static_layer/nll",
                        "global_mean/nll", "future_intervention/nll", "static_layer/retention_pct",
                        "variation/eta2.gate", "execution/blocks_per_token", "execution/slowdown",
                        "replay/live_nll", "execution/zz_new_metric"));
  // A metric only one model has summarizes that one model.
  const v1::ReportMetric* future = FindMetric(r, "future_intervention", "nll");
  ASSERT_NE(future, nullptr);
  EXPECT_EQ(future->unit(), "nats/token");
  EXPECT_EQ(future->across_models().n(), 1);
  EXPECT_EQ(future->across_models().sd(), 0);
  EXPECT_EQ(FindMetric(r, "execution", "zz_new_metric")->unit(), "");
}

// Per-group dependence rows follow the interventions' own rows, by
// intervention then group, layers by number, nll before penalty.
TEST(ReportTest, PerGroupRowsReadAsPerLayerTables) {
  std::vector<v1::Result> rows = ThreeSeedRows();
  for (const char* m : {"s1", "s2"}) {
    rows.push_back(Row(m, "static_layer", "layer_penalty.0", 0.0));
    rows.push_back(Row(m, "cross_input", "layer_penalty.10", 0.3));
    rows.push_back(Row(m, "cross_input", "layer_nll.2", 1.7));
    rows.push_back(Row(m, "cross_input", "layer_penalty.2", 0.2));
  }
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), rows);
  std::vector<std::string> keys;
  for (const v1::ReportMetric& m : r.metrics()) keys.push_back(m.intervention() + "/" + m.metric());
  EXPECT_THAT(
      keys, ElementsAre("correct/nll", "cross_input/nll", "cross_input/penalty", "static_layer/nll",
                        "global_mean/nll", "future_intervention/nll", "cross_input/layer_nll.2",
                        "cross_input/layer_penalty.2", "cross_input/layer_penalty.10",
                        "static_layer/layer_penalty.0", "static_layer/retention_pct",
                        "variation/eta2.gate", "execution/blocks_per_token", "execution/slowdown",
                        "replay/live_nll", "execution/zz_new_metric"));
  const v1::ReportMetric* p = FindMetric(r, "cross_input", "layer_penalty.10");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->unit(), "nats/token");
  EXPECT_EQ(p->across_models().n(), 2);
}

TEST(ReportTest, SitesAreTypedRowsNotMetrics) {
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), ThreeSeedRows());
  for (const v1::ReportMetric& m : r.metrics()) {
    EXPECT_EQ(m.metric().find("site_"), std::string::npos) << m.metric();
  }
  ASSERT_EQ(r.sites_size(), 9);  // 3 models x 3 sites
  std::vector<int64_t> layers;
  for (int i = 0; i < 3; ++i) {
    const v1::SiteRow& s = r.sites(i);
    EXPECT_EQ(s.model(), "s1");
    EXPECT_EQ(s.family(), "gate");
    EXPECT_EQ(s.site(), "gate." + std::to_string(s.layer()));
    EXPECT_NEAR(s.mean(), 1.0 - 0.01 * s.layer(), 1e-12);
    EXPECT_NEAR(s.variance(), 0.001 * (s.layer() + 1), 1e-12);
    layers.push_back(s.layer());
  }
  EXPECT_THAT(layers, ElementsAre(0, 2, 10));
  EXPECT_EQ(r.sites(3).model(), "s2");
}

// The lookup rows of a site, in sample and out of sample, become its
// SiteRow's fields; an undefined one is left unset.
TEST(ReportTest, SiteLookupSharesInAndOutOfSample) {
  v1::Job job;
  job.mutable_spec()->add_models("only");
  const v1::GetReportResponse r = BuildReport(
      job, {Row("only", "variation", "site_eta2_token.gate.0", 0.9),
            Row("only", "variation", "site_eta2_token_oos.gate.0", -0.25),
            Row("only", "variation", "site_eta2_token_position.gate.0", 1.0),
            Undefined(Row("only", "variation", "site_eta2_token_position_oos.gate.0", 0.0)),
            Row("only", "variation", "lookup_table.gate.0", 1.0)});
  ASSERT_EQ(r.sites_size(), 1);
  const v1::SiteRow& s = r.sites(0);
  EXPECT_DOUBLE_EQ(s.eta2_token(), 0.9);
  EXPECT_DOUBLE_EQ(s.eta2_token_oos(), -0.25);
  EXPECT_DOUBLE_EQ(s.eta2_token_position(), 1.0);
  EXPECT_FALSE(s.has_eta2_token_position_oos());
  EXPECT_TRUE(s.lookup_table());
}

TEST(ReportTest, SingleModelHasZeroSdAndMinEqualsMax) {
  v1::Job job;
  job.mutable_spec()->add_models("only");
  const v1::GetReportResponse r = BuildReport(job, {Row("only", "cross_input", "penalty", 0.25)});
  ASSERT_EQ(r.metrics_size(), 1);
  const v1::AcrossModels& a = r.metrics(0).across_models();
  EXPECT_EQ(a.n(), 1);
  EXPECT_EQ(a.mean(), 0.25);
  EXPECT_EQ(a.sd(), 0);
  EXPECT_EQ(a.min(), 0.25);
  EXPECT_EQ(a.max(), 0.25);
  EXPECT_EQ(r.dense_twin(), "");
}

TEST(ReportTest, NoRowsIsAnEmptyReportOfTheJob) {
  const v1::GetReportResponse r = BuildReport(ThreeSeedJob(), {});
  EXPECT_EQ(r.job().id(), 3);
  EXPECT_EQ(r.models_size(), 0);
  EXPECT_EQ(r.metrics_size(), 0);
  EXPECT_EQ(r.sites_size(), 0);
  EXPECT_EQ(r.dense_twin(), "");
  EXPECT_EQ(r.eval_sha256(), "");
}

TEST(ReportTest, AllUndefinedSummarizesNothing) {
  v1::Result a = Undefined(Row("s1", "static_layer", "retention_pct", 0));
  v1::Result b = Undefined(Row("s2", "static_layer", "retention_pct", 0));
  const v1::AcrossModels s = SummarizeAcross({&a, &b});
  EXPECT_FALSE(s.has_ci_low());
  EXPECT_EQ(s.n(), 0);
  EXPECT_EQ(s.undefined(), 2);
  EXPECT_EQ(s.mean(), 0);
  EXPECT_EQ(s.min(), 0);
  EXPECT_EQ(s.max(), 0);
}

// Every row the engine writes has a vocabulary entry under the right
// pseudo-intervention, so every reported metric has a unit.
TEST(VocabularyTest, CoversEveryRowTheEngineWrites) {
  engine::ModelReport m;
  m.model.name = "m";
  m.eval_windows = 4;
  for (const std::string& name : InterventionNames()) {
    engine::InterventionResult i;
    i.name = name;
    i.topk_agreement = engine::TopkAgreement{1.0, 8, {{0, 1.0, 4}, {1, 1.0, 4}}};
    i.calib = engine::CalibratedPenalty{engine::Interval{0.1, 0.2}, 0.01, 20};
    m.interventions.push_back(i);
  }
  for (const std::string& profile : StaticProfileNames()) {
    engine::RetentionResult r;
    r.profile = profile;
    r.baseline = kGlobalMean;
    r.estimate.value = 50;
    m.retention.push_back(r);
  }
  m.float32_agreement = engine::TopkAgreement{0.99, 8, {{0, 0.98, 4}, {1, 1.0, 4}}};
  m.static_token_coverage = engine::TokenCoverage{3, 2};
  m.static_token_cells = engine::TokenCells{10, 4};
  m.static_token_position_cells = engine::TokenCells{40, 30};
  for (const std::string& scope : ScopeNames()) {
    engine::GroupDependence d;
    d.intervention = kStaticLayer;
    d.scope = scope;
    d.group = scope == kScopeLayer ? "0" : "attn_gate";
    if (scope == kScopeLayer) d.layer = 0;
    m.dependence.push_back(d);
  }
  m.additivity.push_back({kStaticLayer, 2, 0.3, 1.0, engine::Interval{0.9, 1.1}, 0});
  engine::FamilyVariation f;
  f.family = "attn_gate";
  f.eta2 = 0.5;
  f.eta2_layer = 0.4;
  m.variation.push_back(f);
  engine::SiteVariation site;
  site.site = "attn_gate.0";
  site.family = "attn_gate";
  site.variance = 0.1;
  site.lookup_table = true;
  m.site_variation.push_back(site);
  m.execution.parameters = 1000;
  m.execution.timing_repeats = 3;
  m.execution.dense_latency_us_per_token = 5;
  m.execution.router_us_per_token = 0.1;
  m.execution.dispatch_us_per_token = 0.2;
  m.execution.experts_us_per_token = 3;
  m.execution.dense_mlp_us_per_token = 2.5;
  m.execution.slowdown = 0.1;
  m.execution.slowdown_ci = engine::Interval{0.05, 0.15};
  m.execution.slowdown_verdict = 1;
  m.execution.first_block = engine::SlowdownEstimate{0.1, {0.05, 0.15}, 1, 2};
  m.execution.second_block = engine::SlowdownEstimate{0.1, {0.05, 0.15}, 1, 2};
  m.execution.dense_flops_per_token = 100;
  m.execution.flops_overhead = 0.02;
  m.execution.active_parameters = 600;
  m.execution.expert_load.push_back({0, 2.0, {0.5, 0.5}, std::log(2.0), 8});
  m.execution.coactivation.push_back({0, 0, 1, 1.0, 8});
  m.execution.token_experts.push_back({0, 65, 1, 0.5, 4});
  std::set<std::string> seen;
  for (const engine::ResultRow& row : engine::ResultRows(m)) {
    const MetricDef* e = fca::FindMetric(row.metric);
    ASSERT_NE(e, nullptr) << row.metric;
    // Written by its typed key, read back as that key.
    const ResultKey key = ResultKeyOf(row.metric);
    EXPECT_EQ(key.scope, e->scope) << row.metric;
    EXPECT_EQ(StoredMetricName(key), row.metric);
    EXPECT_FALSE(std::string(e->unit).empty()) << row.metric;
    EXPECT_FALSE(std::string(e->description).empty()) << row.metric;
    if (!std::string(e->stored_under).empty()) {
      EXPECT_EQ(e->stored_under, row.intervention) << row.metric;
    }
    seen.insert(e->name);
  }
  EXPECT_EQ(seen.size(), MetricDefs().size());  // and no entry is stale
}

}  // namespace
}  // namespace fca::core
