// Mixture-of-experts routing in the audit (fca.md "Routing agreement",
// docs/moe.md): top-k agreement with LIVE through the model's own top-k,
// and the random_route intervention, on the tiny OLMoE and Qwen2-MoE
// folders of tests/data.
#include "server/engine/audit/routing.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/random.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/torch_util.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::LoadFolder;

const char kOlmoeDir[] = FCA_TEST_DATA_DIR "/olmoe-tiny";     // 2 layers, 8 experts, top-2
const char kQwenDir[] = FCA_TEST_DATA_DIR "/qwen2-moe-tiny";  // 2 layers, 6 experts, top-2

// LIVE's coefficients of n random windows of length t, on the host, where
// an audit keeps them (ToHost).
SiteTensors Record(ControlledModel& model, int64_t n, int64_t t, uint64_t seed) {
  at::Tensor ids = at::empty({n, t}, at::kLong);
  Rng rng(seed);
  for (int64_t i = 0; i < n * t; ++i) ids.data_ptr<int64_t>()[i] = int64_t(rng.Uniform(256));
  SiteTensors coeff;
  auto logits = model.Forward(ids, CoefficientMode::kLiveRecord, &coeff);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return ToHost(coeff);
}

// Given coefficients, whatever the window range (one batch of everything).
class Fixed : public Intervention {
 public:
  explicit Fixed(SiteTensors a) : a_(std::move(a)) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    SiteTensors out;
    for (const at::Tensor& a : a_) out.push_back(a.slice(0, begin, end));
    return out;
  }

 private:
  SiteTensors a_;
};

InterventionContext Context(const SiteTensors& eval, const ControlledModel& model, uint64_t seed) {
  InterventionContext ctx;
  ctx.eval = &eval;
  ctx.sites = &model.sites();
  ctx.seed = seed;
  ctx.routed = model.RoutedExperts();
  return ctx;
}

TEST(TopkAgreementTest, CorrectAgreesEverywhere) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const SiteTensors live = Record(*model, 6, 16, 1);
  auto plan = MakeIntervention(InterventionId::kCorrect, Context(live, *model, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto a = MeasureTopkAgreement(*model, live, **plan, /*batch_size=*/4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->fraction, 1.0);
  EXPECT_EQ((*a)->positions, 2 * 6 * 16);
  ASSERT_EQ((*a)->layers.size(), 2u);
  for (const LayerTopkAgreement& l : (*a)->layers) {
    EXPECT_EQ(l.fraction, 1.0);
    EXPECT_EQ(l.positions, 6 * 16);
  }
}

// At layer 0, every third position has its largest probability swapped with
// its smallest: the expert LIVE ranked first drops out of the top-2 and one
// it ranked last enters, so exactly those positions disagree.
TEST(TopkAgreementTest, ChangedPositionsAreCountedPerLayer) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 6, t = 16;
  const SiteTensors live = Record(*model, n, t, 2);
  ASSERT_EQ(model->sites()[0].name, "router.0");
  SiteTensors changed = {live[0].clone(), live[1]};
  at::Tensor flat = changed[0].view({n * t, 8});
  int64_t m = 0;
  for (int64_t p = 0; p < n * t; p += 3, ++m) {
    const at::Tensor row = flat[p];
    const int64_t top = row.argmax().item<int64_t>(), low = row.argmin().item<int64_t>();
    const float hi = row[top].item<float>(), lo = row[low].item<float>();
    row[top] = lo;
    row[low] = hi;
  }
  auto a = MeasureTopkAgreement(*model, live, Fixed(changed), /*batch_size=*/4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  const double positions = n * t;
  ASSERT_EQ((*a)->layers.size(), 2u);
  EXPECT_EQ((*a)->layers[0].layer, 0);
  EXPECT_DOUBLE_EQ((*a)->layers[0].fraction, 1.0 - m / positions);  // 1 - 32/96
  EXPECT_EQ((*a)->layers[1].fraction, 1.0);
  EXPECT_DOUBLE_EQ((*a)->fraction, 1.0 - m / (2 * positions));
}

// Uniform probabilities tie everywhere: the model's tie rule chooses
// experts {0, 1}, so agreement with LIVE is LIVE's share of {0, 1}.
TEST(TopkAgreementTest, TiesAreBrokenAsTheModelBreaksThem) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const SiteTensors live = Record(*model, 4, 16, 3);
  SiteTensors uniform;
  for (const at::Tensor& a : live) uniform.push_back(at::full_like(a, 1.0 / 8));
  auto chosen = model->ChosenExperts(live);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const at::Tensor first_two = at::tensor(std::vector<int64_t>{0, 1});
  int64_t same = 0;
  for (const at::Tensor& c : *chosen) same += (c == first_two).all(-1).sum().item<int64_t>();
  auto a = MeasureTopkAgreement(*model, live, Fixed(uniform), /*batch_size=*/4);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ((*a)->fraction, same / double(2 * 4 * 16));
}

TEST(TopkAgreementTest, AModelWithoutRoutersHasNone) {
  auto model = testing::RandomModel(testing::TinyConfig("featuregate"), InitOptions{});
  EXPECT_TRUE(model->RoutedExperts().empty());
  const SiteTensors live = Record(*model, 2, 8, 4);
  auto a = MeasureTopkAgreement(*model, live, Fixed(live), 2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->has_value());
}

// The chosen sets of random_route over (window, position, layer): exactly
// the k drawn experts (1/k each, 0 elsewhere), uniform over the C(8, 2) = 28
// pairs, and the same for the same seed whatever the batching.
TEST(RandomRouteTest, ChoosesUniformPairsReproducibly) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 100, t = 8;
  SiteTensors eval;
  for (size_t s = 0; s < 2; ++s) eval.push_back(at::zeros({n, t, 8}, at::kFloat));
  auto plan = MakeIntervention(InterventionId::kRandomRoute, Context(eval, *model, 7));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const SiteTensors all = (*plan)->Batch(0, n);
  auto chosen = model->ChosenExperts(all);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  std::map<std::pair<int64_t, int64_t>, int64_t> pairs;
  std::vector<int64_t> experts(8, 0);
  for (size_t s = 0; s < 2; ++s) {
    const at::Tensor a = all[s];
    EXPECT_TRUE(at::equal((a > 0).sum(-1), at::full({n, t}, 2, at::kLong)));
    EXPECT_TRUE(at::equal(a.sum(-1), at::ones({n, t})));  // 0.5 + 0.5
    const at::Tensor c = (*chosen)[s].reshape({-1, 2});
    // The model's top-2 takes the drawn pair: the two nonzero experts.
    EXPECT_TRUE(at::equal(a.reshape({-1, 8}).gather(1, c), at::full({n * t, 2}, 0.5)));
    for (int64_t p = 0; p < n * t; ++p) {
      const int64_t x = c[p][0].item<int64_t>(), y = c[p][1].item<int64_t>();
      ++pairs[{x, y}];
      ++experts[x];
      ++experts[y];
    }
  }
  // Chi-square against uniform: 1600 draws, 28 pairs (df 27, the 0.999
  // quantile 55.48) and 3200 expert slots, 8 experts (df 7, 24.32).
  const double draws = 2.0 * n * t;
  ASSERT_EQ(pairs.size(), 28u);
  double chi_pairs = 0, chi_experts = 0;
  for (const auto& [pair, count] : pairs) {
    chi_pairs += (count - draws / 28) * (count - draws / 28) / (draws / 28);
  }
  for (int64_t count : experts) {
    chi_experts += (count - draws / 4) * (count - draws / 4) / (draws / 4);
  }
  std::printf("[ measured ] random_route chi2: pairs %.2f (df 27), experts %.2f (df 7)\n",
              chi_pairs, chi_experts);
  EXPECT_LT(chi_pairs, 55.48);
  EXPECT_LT(chi_experts, 24.32);
  // Reproducible and independent of the batching; another seed differs.
  const SiteTensors head = (*plan)->Batch(0, 37), tail = (*plan)->Batch(37, n);
  auto again = MakeIntervention(InterventionId::kRandomRoute, Context(eval, *model, 7));
  auto other = MakeIntervention(InterventionId::kRandomRoute, Context(eval, *model, 8));
  ASSERT_TRUE(again.ok() && other.ok());
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(at::equal(at::cat({head[s], tail[s]}), all[s]));
    EXPECT_TRUE(at::equal((*again)->Batch(0, n)[s], all[s]));
    EXPECT_FALSE(at::equal((*other)->Batch(0, n)[s], all[s]));
  }
}

// Qwen2-MoE: routers are drawn, shared gates keep A(x_i).
TEST(RandomRouteTest, LeavesTheSharedGatesAlone) {
  auto model = LoadFolder(kQwenDir, "tiny");
  ASSERT_NE(model, nullptr);
  const SiteTensors live = Record(*model, 3, 8, 5);
  auto plan = MakeIntervention(InterventionId::kRandomRoute, Context(live, *model, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const SiteTensors a = (*plan)->Batch(0, 3);
  ASSERT_EQ(model->sites()[1].family, "shared_gate");
  EXPECT_TRUE(at::equal(a[1], live[1]));
  EXPECT_TRUE(at::equal((a[0] > 0).sum(-1), at::full({3, 8}, 2, at::kLong)));
}

TEST(RandomRouteTest, IsRefusedWithoutRouters) {
  auto model = testing::RandomModel(testing::TinyConfig("featuregate"), InitOptions{});
  const SiteTensors live = Record(*model, 2, 8, 6);
  auto plan = MakeIntervention(InterventionId::kRandomRoute, Context(live, *model, 1));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("routers only"), std::string::npos) << plan.status();
}

// Router logits that make the top-2 choose experts {0, 1} in the first
// half of n windows and {2, 3} in the second: over all windows each of the
// four takes a quarter of the assignments, entropy ln 4; the first batch
// (the first half) alone would say a half each for 0 and 1.
TEST(ExpertLoadTest, CountsEveryWindowThroughTheModelsTopK) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 8, t = 5, E = 8;
  SiteTensors logits;
  for (const CoefficientSite& site : model->sites()) {
    ASSERT_EQ(site.channels, E);
    at::Tensor a = at::zeros({n, t, E}, at::kFloat);
    a.slice(0, 0, n / 2).slice(2, 0, 2).fill_(5.0);
    a.slice(0, n / 2, n).slice(2, 2, 4).fill_(5.0);
    logits.push_back(a);
  }
  auto routing = MeasureRouting(*model, logits, at::Tensor(), /*batch_size=*/n / 2);
  ASSERT_TRUE(routing.ok()) << routing.status();
  const auto* load = &routing->load;
  ASSERT_EQ(load->size(), model->sites().size());
  for (size_t l = 0; l < load->size(); ++l) {
    const ExecutionResult::ExpertLoad& x = (*load)[l];
    EXPECT_EQ(x.layer, static_cast<int64_t>(l));
    EXPECT_DOUBLE_EQ(x.experts_per_token, 2.0);
    ASSERT_EQ(x.share.size(), static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) EXPECT_DOUBLE_EQ(x.share[e], e < 4 ? 0.25 : 0.0) << e;
    EXPECT_NEAR(x.entropy, std::log(4.0), 1e-12);
    EXPECT_EQ(x.tokens, n * t);
  }
}

TEST(ExpertLoadTest, NoRoutersNoLoad) {
  auto model = testing::RandomModel(testing::TinyConfig("featuregate"), InitOptions{});
  ASSERT_NE(model, nullptr);
  const SiteTensors live = Record(*model, 2, 8, 1);
  auto routing = MeasureRouting(*model, live, at::Tensor(), 2);
  ASSERT_TRUE(routing.ok()) << routing.status();
  EXPECT_TRUE(routing->load.empty());
  EXPECT_TRUE(routing->coactivation.empty());
  EXPECT_TRUE(routing->token_experts.empty());
}

// Coefficients of n windows of length t at every router site that put 5 on
// the experts `route(window, position, layer)` names and 0 elsewhere: the
// model's top-2 chooses exactly them.
template <typename Route>
SiteTensors Routed(const ControlledModel& model, int64_t n, int64_t t, Route route) {
  SiteTensors out;
  for (const CoefficientSite& site : model.sites()) {
    at::Tensor a = at::zeros({n, t, site.channels}, at::kFloat);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < t; ++p) {
        for (int64_t e : route(i, p, site.layer)) a[i][p][e] = 5.0;
      }
    }
    out.push_back(a);
  }
  return out;
}

// LIVE chooses {0, 1} everywhere. The intervention chooses {1, 2} at layer
// 0 (one of LIVE's two experts kept: overlap 1/2, agreement 0) and, at
// layer 1, {0, 1} in the first half of the windows (overlap 1) and {2, 3}
// in the second (overlap 0): layer 1's overlap is 1/2 and its agreement 1/2,
// the model's overlap (1/2 + 1/2) / 2 and its agreement (0 + 1/2) / 2.
TEST(TopkOverlapTest, CountsTheSharedExpertsOverK) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 6, t = 5;
  using Set = std::vector<int64_t>;
  const SiteTensors live = Routed(*model, n, t, [](int64_t, int64_t, int64_t) {
    return Set{0, 1};
  });
  const SiteTensors plan = Routed(*model, n, t, [&](int64_t i, int64_t, int64_t layer) {
    if (layer == 0) return Set{1, 2};
    return i < n / 2 ? Set{0, 1} : Set{2, 3};
  });
  auto a = MeasureTopkAgreement(*model, live, Fixed(plan), /*batch_size=*/4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  ASSERT_EQ((*a)->layers.size(), 2u);
  EXPECT_DOUBLE_EQ((*a)->layers[0].overlap, 0.5);
  EXPECT_DOUBLE_EQ((*a)->layers[0].fraction, 0.0);
  EXPECT_DOUBLE_EQ((*a)->layers[1].overlap, 0.5);
  EXPECT_DOUBLE_EQ((*a)->layers[1].fraction, 0.5);
  EXPECT_DOUBLE_EQ((*a)->overlap, 0.5);
  EXPECT_DOUBLE_EQ((*a)->fraction, 0.25);
  // Against itself every expert is kept.
  auto same = MeasureTopkAgreement(*model, live, Fixed(live), 4);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->overlap, 1.0);
}

// Positions 0, 2, 4 of each window choose {0, 1}, positions 1 and 3 {1, 2}:
// experts 0 and 1 are chosen together at 3/5 of the tokens, 1 and 2 at 2/5,
// every other pair never; the pairs' fractions sum to k(k-1)/2 = 1.
TEST(RoutingStatisticsTest, CoactivationOfAKnownRouting) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 4, t = 5, E = 8;
  using Set = std::vector<int64_t>;
  const SiteTensors live = Routed(*model, n, t, [](int64_t, int64_t p, int64_t) {
    return p % 2 == 0 ? Set{0, 1} : Set{1, 2};
  });
  auto routing = MeasureRouting(*model, live, at::Tensor(), /*batch_size=*/3);
  ASSERT_TRUE(routing.ok()) << routing.status();
  ASSERT_EQ(routing->coactivation.size(), 2u * E * (E - 1) / 2);
  std::map<std::pair<int64_t, int64_t>, double> layer1;
  double total = 0;
  for (const ExecutionResult::ExpertPair& p : routing->coactivation) {
    EXPECT_LT(p.expert, p.partner);
    EXPECT_EQ(p.tokens, n * t);
    if (p.layer == 1) {
      layer1[{p.expert, p.partner}] = p.fraction;
      total += p.fraction;
    }
  }
  EXPECT_DOUBLE_EQ((layer1[{0, 1}]), 0.6);
  EXPECT_DOUBLE_EQ((layer1[{1, 2}]), 0.4);
  EXPECT_EQ((layer1[{0, 2}]), 0.0);
  EXPECT_EQ((layer1[{6, 7}]), 0.0);
  EXPECT_DOUBLE_EQ(total, 1.0);
  EXPECT_TRUE(routing->token_experts.empty());  // no token ids given
  // Bounded to the 2 largest pairs of a layer: (0, 1) and (1, 2), in pair order.
  auto bounded = MeasureRouting(*model, live, at::Tensor(), 3, kTopTokenIds, /*max_pairs=*/2);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  ASSERT_EQ(bounded->coactivation.size(), 4u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(bounded->coactivation[2 * l].expert, 0);
    EXPECT_EQ(bounded->coactivation[2 * l].partner, 1);
    EXPECT_DOUBLE_EQ(bounded->coactivation[2 * l].fraction, 0.6);
    EXPECT_EQ(bounded->coactivation[2 * l + 1].expert, 1);
    EXPECT_EQ(bounded->coactivation[2 * l + 1].partner, 2);
  }
}

// Window i chooses experts {2(i mod 4), 2(i mod 4) + 1}: over 8 windows each
// of the 8 experts takes 1/8 of the load, entropy ln 8 = ln E.
TEST(RoutingStatisticsTest, UniformLoadHasEntropyLogE) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 8, t = 3, E = 8;
  using Set = std::vector<int64_t>;
  const SiteTensors live = Routed(*model, n, t, [](int64_t i, int64_t, int64_t) {
    return Set{2 * (i % 4), 2 * (i % 4) + 1};
  });
  auto routing = MeasureRouting(*model, live, at::Tensor(), /*batch_size=*/5);
  ASSERT_TRUE(routing.ok()) << routing.status();
  ASSERT_EQ(routing->load.size(), 2u);
  for (const ExecutionResult::ExpertLoad& x : routing->load) {
    for (double share : x.share) EXPECT_DOUBLE_EQ(share, 1.0 / E);
    EXPECT_NEAR(x.entropy, std::log(double(E)), 1e-12);
    EXPECT_EQ(x.tokens, n * t);
  }
}

// Token 7 fills windows 0-2 (15 positions), routed {0, 1} in windows 0-1
// and {0, 3} in window 2: expert 0 takes 15 of its 30 assignments, expert 1
// 10, expert 3 5 (not among its k = 2 most chosen). Windows 3-5 hold token 9
// at positions 1-4 (12 positions) and token 11 at position 0 (3), routed
// {4, 5}. With the 2 most frequent ids, token 11 has no rows.
TEST(RoutingStatisticsTest, TopExpertsOfTheMostFrequentTokenIds) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const int64_t n = 6, t = 5;
  using Set = std::vector<int64_t>;
  const SiteTensors live = Routed(*model, n, t, [](int64_t i, int64_t, int64_t) {
    return i < 2 ? Set{0, 1} : i == 2 ? Set{0, 3} : Set{4, 5};
  });
  at::Tensor ids = at::full({n, t}, 7, at::kLong);
  ids.slice(0, 3, n).fill_(9);
  ids.slice(0, 3, n).select(1, 0).fill_(11);
  auto routing = MeasureRouting(*model, live, ids, /*batch_size=*/4, /*top_token_ids=*/2);
  ASSERT_TRUE(routing.ok()) << routing.status();
  std::vector<std::tuple<int64_t, int64_t, double, int64_t>> layer0;
  for (const ExecutionResult::TokenExpertShare& x : routing->token_experts) {
    if (x.layer == 0) layer0.emplace_back(x.token, x.expert, x.share, x.positions);
  }
  using Row = std::tuple<int64_t, int64_t, double, int64_t>;
  const std::vector<Row> expected = {
      {7, 0, 15.0 / 30, 15}, {7, 1, 10.0 / 30, 15}, {9, 4, 0.5, 12}, {9, 5, 0.5, 12}};
  ASSERT_EQ(layer0.size(), expected.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    EXPECT_EQ(std::get<0>(layer0[r]), std::get<0>(expected[r])) << r;
    EXPECT_EQ(std::get<1>(layer0[r]), std::get<1>(expected[r])) << r;
    EXPECT_DOUBLE_EQ(std::get<2>(layer0[r]), std::get<2>(expected[r])) << r;
    EXPECT_EQ(std::get<3>(layer0[r]), std::get<3>(expected[r])) << r;
  }
  EXPECT_EQ(routing->token_experts.size(), 2 * expected.size());
}

TEST(RoutingStatisticsTest, TokenIdsOfAnotherShapeAreRefused) {
  auto model = LoadFolder(kOlmoeDir, "tiny");
  ASSERT_NE(model, nullptr);
  const SiteTensors live = Record(*model, 2, 8, 1);
  auto routing = MeasureRouting(*model, live, at::zeros({2, 7}, at::kLong), 2);
  EXPECT_EQ(routing.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fca::engine
