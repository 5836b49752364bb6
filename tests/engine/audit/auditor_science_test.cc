// Issue 12: the interventions beyond the paper, per-group dependence,
// fidelity with a full cache, the window cap, batches on several threads,
// and (mixtures of experts) top-k agreement and the routing flip rate.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/result_key.h"
#include "common/vocabulary.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/model_loader.h"
#include "tests/engine/audit/auditor_fixture.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::AuditGateDependent;
using testing::Find;
using testing::GateDependentModel;
using testing::MapCache;
using testing::RandomModel;
using testing::RandomText;
using testing::Request;
using testing::TinyConfig;
using testing::UnfaithfulReplay;
using testing::Varying;

// NLL of `text` (byte ids) in T-token windows under REPLAY of all-ones
// gates, from the model's logits by fca.md's formula.
double AllOnesReplayNll(ControlledModel& model, const std::string& text, int64_t T) {
  const int64_t n = static_cast<int64_t>(text.size()) / T;
  std::vector<int64_t> flat;
  for (int64_t i = 0; i < n * T; ++i) flat.push_back(static_cast<uint8_t>(text[i]));
  const at::Tensor ids = at::tensor(flat, at::kLong).view({n, T});
  std::vector<at::Tensor> ones;
  for (const CoefficientSite& s : model.sites()) ones.push_back(at::ones({n, T, s.channels}));
  auto logits = model.Forward(ids, CoefficientMode::kReplay, &ones);
  EXPECT_TRUE(logits.ok()) << logits.status();
  const at::Tensor lp = at::log_softmax(logits->slice(1, 0, T - 1).to(at::kDouble), -1);
  const at::Tensor target = ids.slice(1, 1, T).unsqueeze(-1);
  return -lp.gather(-1, target).mean().item<double>();
}

TEST(AuditorScienceTest, NeutralIsAReplayWithEveryGateOne) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(21));
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model.get()}, eval, RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kNeutral};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  const double want = AllOnesReplayNll(*model, eval, 16);
  EXPECT_NEAR(Find(r, kNeutral).nll, want, 1e-5);
  EXPECT_NEAR(Find(r, kNeutral).penalty, want - Find(r, kCorrect).nll, 1e-5);
  // The gates vary, so removing the controller changes the NLL.
  EXPECT_GT(std::fabs(Find(r, kNeutral).penalty), 1e-4);
}

TEST(AuditorScienceTest, RandomRouteNamedForAModelWithoutRoutersIsRefused) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(21));
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kRandomRoute};
  auto report = RunAudit(req);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("routers only"), std::string::npos) << report.status();
  req.options.interventions = {InterventionId::kNeutral};
  req.options.per_layer_interventions = {InterventionId::kRandomRoute};
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// The tiny OLMoE folder (2 layers, 8 experts, top-2): every intervention
// has top-k agreement rows; correct's are 1 exactly, neutral's (experts
// {0, 1} everywhere) and random_route's lie below.
TEST(AuditorScienceTest, AMixtureOfExpertsGetsTopkAgreementRows) {
  auto model = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", testing::TestCompute());
  ASSERT_TRUE(model.ok()) << model.status();
  AuditRequest req = Request({model->get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kNeutral, InterventionId::kRandomRoute};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) {
    rows[row.intervention + "/" + row.metric] = row;
  }
  for (const char* name : {kCorrect, kNeutral, kRandomRoute}) {
    SCOPED_TRACE(name);
    const std::string i = name;
    ASSERT_TRUE(rows.count(i + "/topk_agreement"));
    EXPECT_EQ(rows[i + "/topk_agreement"].n, 2 * 8 * 16);
    for (const char* layer : {"0", "1"}) {
      const ResultRow& l = rows[i + "/layer_topk_agreement." + layer];
      EXPECT_EQ(l.n, 8 * 16);
      EXPECT_GE(l.value, 0.0);
      EXPECT_LE(l.value, 1.0);
    }
    // The overall fraction is the mean of the two layers' (equal counts).
    EXPECT_DOUBLE_EQ(
        rows[i + "/topk_agreement"].value,
        (rows[i + "/layer_topk_agreement.0"].value + rows[i + "/layer_topk_agreement.1"].value) /
            2);
  }
  EXPECT_EQ(rows["correct/topk_agreement"].value, 1.0);
  EXPECT_LT(rows["random_route/topk_agreement"].value, 0.5);  // 1/28 expected
  EXPECT_LT(rows["neutral/topk_agreement"].value, 1.0);
}

// The same folder's routing statistics over every evaluation token (fca.md
// "Routing statistics"): overlap rows beside the agreement (correct keeps
// every expert, random_route at least as many as whole sets), the load's
// rows with n = the N T tokens, every pair of 8 experts per layer summing
// to k(k-1)/2 = 1, and at most 16 token ids with at most k = 2 experts.
TEST(AuditorScienceTest, AMixtureOfExpertsGetsRoutingStatisticsRows) {
  auto model = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", testing::TestCompute());
  ASSERT_TRUE(model.ok()) << model.status();
  AuditRequest req = Request({model->get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kRandomRoute};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const int64_t tokens = 8 * 16;  // N T per layer
  std::map<std::string, ResultRow> rows;
  std::map<std::string, std::map<int64_t, std::vector<ResultRow>>> per_token;  // layer, token
  double pairs[2] = {0, 0};
  int pair_rows = 0;
  for (const ResultRow& row : ResultRows(report->models[0])) {
    rows[row.intervention + "/" + row.metric] = row;
    const ResultKey key = ResultKeyOf(row.metric);
    if (key.metric == kExpertCoactivation) {
      EXPECT_EQ(row.n, tokens) << row.metric;
      pairs[*key.layer] += row.value;
      ++pair_rows;
    }
    if (key.metric == kTokenExpertShare) {
      per_token[std::to_string(*key.layer)][*key.token].push_back(row);
    }
  }
  EXPECT_EQ(rows["correct/topk_overlap"].value, 1.0);
  EXPECT_EQ(rows["correct/topk_overlap"].n, 2 * tokens);
  EXPECT_GE(rows["random_route/topk_overlap"].value, rows["random_route/topk_agreement"].value);
  EXPECT_LT(rows["random_route/topk_overlap"].value, 1.0);
  EXPECT_EQ(rows["random_route/layer_topk_overlap.1"].n, tokens);
  for (const char* layer : {"0", "1"}) {
    SCOPED_TRACE(layer);
    const std::string l = layer;
    EXPECT_EQ(rows["execution/experts_per_token." + l].n, tokens);
    EXPECT_EQ(rows["execution/expert_load_entropy." + l].n, tokens);
    EXPECT_EQ(rows["execution/expert_share." + l + ".7"].n, tokens);
    EXPECT_NEAR(pairs[l == "1" ? 1 : 0], 1.0, 1e-12);
    ASSERT_FALSE(per_token[l].empty());
    EXPECT_LE(per_token[l].size(), 16u);
    int64_t positions = 0;
    for (const auto& [token, experts] : per_token[l]) {
      EXPECT_LE(experts.size(), 2u);
      double share = 0;
      for (const ResultRow& r : experts) {
        EXPECT_EQ(r.n, experts[0].n);
        share += r.value;
      }
      EXPECT_GT(share, 0.0);
      EXPECT_LE(share, 1.0 + 1e-12);
      positions += experts[0].n;
    }
    EXPECT_LE(positions, tokens);
  }
  EXPECT_EQ(pair_rows, 2 * 28);
}

// fca.md "Execution": a mixture of experts' timing splits its MoE layers
// into router, dispatch and experts (CPU only), each a part of the forward
// the latency times; a featuregate model has no such parts.
TEST(AuditorScienceTest, AMixtureOfExpertsTimesItsRouterDispatchAndExperts) {
  auto moe = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", testing::TestCompute());
  ASSERT_TRUE(moe.ok()) << moe.status();
  auto gated = RandomModel(TinyConfig("featuregate"), Varying(21));
  AuditRequest req =
      Request({moe->get(), gated.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kStaticLayer};
  req.options.timing_warmup = 0;
  req.options.timing_repeats = 4;
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) rows[row.metric] = row;
  const char* parts[] = {kRouterUsPerToken, kDispatchUsPerToken, kExpertsUsPerToken};
  if (testing::TestCompute().device != "cpu") {
    for (const char* part : parts) EXPECT_EQ(rows.count(part), 0u) << part;
    return;
  }
  double sum = 0;
  for (const char* part : parts) {
    ASSERT_EQ(rows.count(part), 1u) << part;
    EXPECT_GT(rows[part].value, 0) << part;
    EXPECT_EQ(rows[part].n, 4) << part;
    sum += rows[part].value;
  }
  // Means (the parts) against a median (the latency) of the same forwards:
  // a part in other units (seconds, or per forward) would be far off.
  EXPECT_LT(sum, 2 * rows[kLatencyUsPerToken].value);
  EXPECT_EQ(rows.count(kDenseMlpUsPerToken), 0u) << "no twin";
  for (const ResultRow& row : ResultRows(report->models[1])) {
    for (const char* part : parts) EXPECT_NE(row.metric, part);
  }
}

// GateDependentModel's gates read only the current token's embedding: a
// table of the calibration gate per token is the model's own controller.
TEST(AuditorScienceTest, StaticTokenRetainsTheWholeGapOfATokenLookupController) {
  auto model = GateDependentModel();
  auto report = AuditGateDependent(model.get());
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  EXPECT_GT(Find(r, kStaticLayer).penalty, 0.1);
  EXPECT_NEAR(Find(r, kStaticToken).penalty, 0.0, 1e-6);
  const RetentionResult* token = r.FindRetention(kStaticToken, kGlobalMean);
  ASSERT_NE(token, nullptr);
  ASSERT_TRUE(token->estimate.value.has_value());
  EXPECT_NEAR(*token->estimate.value, 100.0, 1e-3);
  // Defined by the baseline's block CI (its penalty_block), the same resamples.
  EXPECT_EQ(token->estimate.gap_ci.low, Find(r, kGlobalMean).windows.block_ci.low);
  EXPECT_EQ(token->estimate.gap_ci.high, Find(r, kGlobalMean).windows.block_ci.high);
  ASSERT_TRUE(r.static_token_coverage.has_value());
  EXPECT_EQ(r.static_token_coverage->unseen_positions, 0);
  std::map<std::string, double> rows;
  for (const ResultRow& row : ResultRows(r)) rows[row.intervention + "/" + row.metric] = row.value;
  EXPECT_NEAR(rows.at("static_token/retention_pct"), 100.0, 1e-3);
  // The default baseline's row names it too.
  EXPECT_EQ(rows.at("static_token/retention_pct"),
            rows.at("static_token/retention_vs.global_mean"));
  EXPECT_EQ(rows.at("static_token/unseen_token_positions"), 0.0);
}

TEST(AuditorScienceTest, UnseenEvaluationTokensAreCounted) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(5));
  // C uses only a..m; E's letters n..z (13 ids) are unseen.
  std::string calib = RandomText(16 * 8, 2);
  for (char& ch : calib) ch = static_cast<char>('a' + (ch - 'a') % 13);
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model.get()}, eval, calib);
  req.options.interventions = {InterventionId::kStaticToken};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  // Scored positions only: the last position of a window predicts nothing.
  const int64_t T = req.options.window_length;
  int64_t positions = 0;
  std::set<char> ids;
  for (size_t i = 0; i < eval.size(); ++i) {
    const char ch = eval[i];
    if (static_cast<int64_t>(i % T) == T - 1) continue;
    if (ch > 'm') {
      ++positions;
      ids.insert(ch);
    }
  }
  ASSERT_TRUE(report->models[0].static_token_coverage.has_value());
  EXPECT_EQ(report->models[0].static_token_coverage->unseen_positions, positions);
  EXPECT_EQ(report->models[0].static_token_coverage->unseen_ids, static_cast<int64_t>(ids.size()));
}

// fca.md "Token-keyed profiles": shrunk_ids and shrunk_cells count the
// calibration ids and (id, position) cells seen fewer than
// static_token_min_count times; n is the table's cells.
TEST(AuditorScienceTest, ShrunkIdsAndCellsAreCountedInTheRows) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(5));
  const std::string calib = RandomText(16 * 8, 2);
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), calib);
  req.options.interventions = {InterventionId::kStaticToken, InterventionId::kStaticTokenPosition};
  req.options.static_token_min_count = 6;
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const int64_t T = req.options.window_length;
  std::map<char, int64_t> by_id;
  std::map<std::pair<char, int64_t>, int64_t> by_cell;
  for (size_t i = 0; i < calib.size(); ++i) {
    ++by_id[calib[i]];
    ++by_cell[{calib[i], static_cast<int64_t>(i) % T}];
  }
  auto below = [](const auto& counts) {
    int64_t n = 0;
    for (const auto& [key, count] : counts) n += count < 6;
    return n;
  };
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) {
    rows[row.intervention + "/" + row.metric] = row;
  }
  ASSERT_EQ(rows.count("static_token/shrunk_ids"), 1u);
  ASSERT_EQ(rows.count("static_token_position/shrunk_cells"), 1u);
  EXPECT_EQ(rows.at("static_token/shrunk_ids").value, static_cast<double>(below(by_id)));
  EXPECT_EQ(rows.at("static_token/shrunk_ids").n, static_cast<int64_t>(by_id.size()));
  EXPECT_EQ(rows.at("static_token_position/shrunk_cells").value,
            static_cast<double>(below(by_cell)));
  EXPECT_EQ(rows.at("static_token_position/shrunk_cells").n, static_cast<int64_t>(by_cell.size()));
  // 128 positions over 26 letters: some ids and most cells are rare.
  EXPECT_GT(below(by_id), 0);
  EXPECT_GT(below(by_cell), below(by_id));
}

// Layer 0's gates are 1 whatever the input: replacing them (by their
// calibration mean, another input's, or 1) changes nothing, while layer 1's
// gates depend on the input.
TEST(AuditorScienceTest, PerLayerDependenceIsZeroWhereTheGateIsConstant) {
  auto model = testing::LayerOneDependentModel(7);
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kStaticLayer};
  req.options.per_layer_interventions = {InterventionId::kStaticLayer, InterventionId::kCrossInput,
                                         InterventionId::kNeutral};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  ASSERT_EQ(r.dependence.size(), 3u * 2);
  for (const GroupDependence& d : r.dependence) {
    SCOPED_TRACE(d.intervention + " at layer " + d.group);
    EXPECT_EQ(d.scope, kScopeLayer);
    if (d.group == "0") {
      EXPECT_EQ(d.penalty, 0.0);
      EXPECT_EQ(d.penalty_ci.low, 0.0);
      EXPECT_EQ(d.penalty_ci.high, 0.0);
    } else {
      EXPECT_GT(std::fabs(d.penalty), 1e-5);
    }
    if (d.intervention == kStaticLayer && d.group == "1") {
      // Layer 0 is inert, so I at layer 1 alone is I everywhere.
      EXPECT_NEAR(d.nll, Find(r, kStaticLayer).nll, 1e-9);
    }
  }
  bool row = false;
  for (const ResultRow& x : ResultRows(r)) {
    row = row || (x.intervention == kCrossInput && x.metric == "layer_penalty.1" && x.ci_low);
  }
  EXPECT_TRUE(row);
  // The additivity check (fca.md "Per-group dependence"): with layer 0
  // inert, static_layer's per-layer penalties add up to its joint one, and
  // window for window (layer 1's replay is the joint one), so every block
  // resample's ratio is 1 too.
  ASSERT_EQ(r.additivity.size(), 3u);
  const GroupAdditivity& a = r.additivity[0];
  const InterventionResult& joint = Find(r, kStaticLayer);
  EXPECT_EQ(a.intervention, kStaticLayer);
  EXPECT_EQ(a.groups, 2);
  EXPECT_NEAR(a.penalty_sum, joint.penalty, 1e-9);
  ASSERT_GT(joint.windows.block_ci.low, 0);
  ASSERT_TRUE(a.ratio.has_value());
  EXPECT_NEAR(*a.ratio, 1.0, 1e-6);
  ASSERT_TRUE(a.ci.has_value());
  EXPECT_NEAR(a.ci->low, 1.0, 1e-6);
  EXPECT_NEAR(a.ci->high, 1.0, 1e-6);
  EXPECT_EQ(a.dropped_resamples, 0);
  // Holm's p is read on the block CI's resamples (seed, L).
  const uint64_t block_seed = DeriveSeed(req.options.seed, "block_bootstrap");
  const BootstrapTest t = PairedBootstrapTest(
      joint.nll_per_sequence, Find(r, kCorrect).nll_per_sequence, req.options.bootstrap_resamples,
      req.options.ci_level, block_seed, r.bootstrap_block_length);
  EXPECT_EQ(joint.windows.p_value, t.p_value);
  EXPECT_EQ(joint.windows.block_ci.low, t.ci.low);
  // cross_input and neutral ran per layer only: no joint penalty, no ratio.
  EXPECT_FALSE(r.additivity[1].ratio.has_value());
  EXPECT_FALSE(r.additivity[1].ci.has_value());
  bool ratio_row = false, dropped_row = false;
  for (const ResultRow& x : ResultRows(r)) {
    if (x.intervention != kStaticLayer) continue;
    if (x.metric == "group_additivity") {
      ratio_row = x.defined && x.ci_low && x.ci_high;
      EXPECT_NEAR(x.ci_low.value_or(0), 1.0, 1e-6);
    }
    if (x.metric == "group_additivity_dropped") {
      dropped_row = true;
      EXPECT_EQ(x.value, 0.0);
      EXPECT_EQ(x.n, 2);
    }
  }
  EXPECT_TRUE(ratio_row);
  EXPECT_TRUE(dropped_row);
  // Site scope: one group per site, and layer 0's sites are inert.
  req.options.per_layer_interventions = {InterventionId::kCrossInput};
  req.options.per_layer_scope = ScopeId::kSite;
  report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->models[0].dependence.size(), model->sites().size());
  for (const GroupDependence& d : report->models[0].dependence) {
    if (d.group.back() == '0') {
      EXPECT_EQ(d.penalty, 0.0) << d.group;
    }
  }
}

TEST(AuditorScienceTest, BadPerLayerOptionsAreInvalidArgument) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 4, 1), RandomText(16 * 4, 2));
  req.options.per_layer_interventions = {InterventionId::kCorrect};
  auto st = RunAudit(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("correct"), std::string::npos) << st;
  // Interventions and the scope are ids: an unknown name stops at the
  // server's spec check (spec_test) or fca-local-audit's flags.
}

// Every audit compares a LIVE pass with the replay on at least one batch,
// even when every window's coefficients are in the cache.
TEST(AuditorScienceTest, AFullyCachedAuditStillChecksReplayFidelity) {
  auto inner = RandomModel(TinyConfig("featuregate"), Varying(8));
  ControlledModel* real = inner.get();
  MapCache cache;
  AuditRequest req = Request({real}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  req.cache = &cache;
  req.options.fidelity_check_every = 1;
  auto first = RunAudit(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->models[0].fidelity_checked_windows, 8);
  auto second = RunAudit(req);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->models[0].cached_eval_windows, 8 - 4);
  EXPECT_EQ(second->models[0].fidelity_checked_windows, 4);  // the first batch
  // The same weights (so the same cache entries), replayed unfaithfully.
  UnfaithfulReplay unfaithful(std::move(inner));
  req.models = {&unfaithful};
  auto third = RunAudit(req);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition) << third.status();
}

TEST(AuditorScienceTest, AWindowCapThatDropsWindowsIsNoted) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  req.options.max_eval_windows = 8;  // exactly what there is
  ASSERT_TRUE(RunAudit(req).ok());
  EXPECT_TRUE(notes.empty()) << notes[0];
  req.options.max_eval_windows = 5;
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->models[0].eval_windows, 5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("more than 5 windows of 16 tokens"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("max_eval_windows"), std::string::npos) << notes[0];
}

// Batches run on several threads at once give every number one thread gives.
TEST(AuditorParallelTest, ThreeThreadsGiveExactlyTheNumbersOfOne) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(12));
  AuditRequest req = Request({model.get()}, RandomText(16 * 23, 1), RandomText(16 * 13, 2));
  req.options.per_layer_interventions = {InterventionId::kStaticLayer};
  req.threads = 1;
  auto one = RunAudit(req);
  req.threads = 3;
  auto three = RunAudit(req);
  ASSERT_TRUE(one.ok() && three.ok()) << one.status() << three.status();
  const std::vector<ResultRow> a = ResultRows(one->models[0]);
  const std::vector<ResultRow> b = ResultRows(three->models[0]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].intervention == "execution") continue;  // timings
    EXPECT_EQ(a[i].metric, b[i].metric);
    EXPECT_EQ(a[i].value, b[i].value) << a[i].intervention << " " << a[i].metric;
  }
  for (size_t i = 0; i < one->models[0].interventions.size(); ++i) {
    EXPECT_EQ(one->models[0].interventions[i].nll_per_sequence,
              three->models[0].interventions[i].nll_per_sequence);
  }
}

// The experts a model's top-k chooses at each (window, position) of a
// router site: the stable descending sort's first k (ties to the lower
// index), as a set in increasing order. [B, T, k].
at::Tensor ChosenSets(const at::Tensor& probs, int64_t k) {
  const at::Tensor order =
      std::get<1>(at::sort(probs.to(at::kFloat), /*stable=*/true, /*dim=*/-1, /*descending=*/true));
  return std::get<0>(at::sort(order.slice(-1, 0, k), -1));
}

// fca.md "Routing flip rate": the tiny OLMoE audited in bfloat16 with its
// float32 reference reports how often the two precisions' LIVE passes chose
// different experts, per layer and overall; the test counts the same from
// its own two recordings of the windows. A float32 audit has no such rows.
TEST(AuditorScienceTest, ABfloat16MixtureOfExpertsGetsItsRoutingFlipRate) {
  ComputeOptions bf16 = testing::TestCompute(), f32 = testing::TestCompute();
  bf16.dtype = ComputeDType::kBFloat16;
  auto model = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", bf16);
  auto reference = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", f32);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model->get()}, eval, RandomText(16 * 8, 2));
  req.float32_references = {reference->get()};
  req.options.interventions = {InterventionId::kNeutral};
  req.options.timing_repeats = 0;
  req.options.batch_size = 8;  // one forward over E, as below
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) rows[row.metric] = row;

  auto ids = (*model)->tokenizer().Encode(eval);
  ASSERT_TRUE(ids.ok());
  const at::Tensor batch = at::tensor(*ids, at::kInt).to(at::kLong).view({8, 16});
  std::vector<at::Tensor> low, high;
  ASSERT_TRUE((*model)->Forward(batch, CoefficientMode::kLiveRecord, &low).ok());
  ASSERT_TRUE((*reference)->Forward(batch, CoefficientMode::kLiveRecord, &high).ok());
  const std::vector<int64_t> k = (*model)->RoutedExperts();
  int64_t flips = 0, positions = 0;
  for (size_t s = 0; s < k.size(); ++s) {
    if (k[s] == 0) continue;
    const at::Tensor differ =
        (ChosenSets(low[s], k[s]) != ChosenSets(high[s], k[s])).any(-1);  // [8, 16]
    const int64_t layer_flips = differ.sum().item<int64_t>();
    const std::string layer = std::to_string((*model)->sites()[s].layer);
    ASSERT_TRUE(rows.count("layer_routing_flip_rate." + layer)) << layer;
    EXPECT_EQ(rows["layer_routing_flip_rate." + layer].n, 8 * 16);
    EXPECT_DOUBLE_EQ(rows["layer_routing_flip_rate." + layer].value, layer_flips / 128.0);
    flips += layer_flips;
    positions += differ.numel();
  }
  ASSERT_TRUE(rows.count("routing_flip_rate"));
  EXPECT_EQ(rows["routing_flip_rate"].n, positions);
  EXPECT_EQ(positions, 2 * 8 * 16);
  EXPECT_DOUBLE_EQ(rows["routing_flip_rate"].value, double(flips) / double(positions));
  std::printf("olmoe-tiny bfloat16 routing flip rate: %lld of %lld (token, layer)\n",
              static_cast<long long>(flips), static_cast<long long>(positions));

  // In float32 there is nothing to compare: no rows, even with a reference.
  AuditRequest same = Request({reference->get()}, eval, RandomText(16 * 8, 2));
  same.float32_references = {reference->get()};
  same.options.interventions = {InterventionId::kNeutral};
  same.options.timing_repeats = 0;
  auto plain = RunAudit(same);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const ResultRow& row : ResultRows(plain->models[0])) {
    EXPECT_EQ(row.metric.find("routing_flip_rate"), std::string::npos) << row.metric;
  }
}

}  // namespace
}  // namespace fca::engine
