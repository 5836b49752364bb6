// The interventions and metrics beyond the paper (fca.md "Beyond the paper")
// against their formulas on small hand-made tensors.
#include "server/engine/audit/interventions.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "server/engine/audit/coefficients.h"

namespace fca::engine {
namespace {

std::vector<CoefficientSite> OneFamily(int64_t layers, int64_t d) {
  std::vector<CoefficientSite> s;
  for (int64_t l = 0; l < layers; ++l) s.push_back({"g." + std::to_string(l), "g", l, d});
  return s;
}

// --- eta2_layer ---

TEST(Eta2LayerTest, OneWhenEverySiteIsConstantOverTokensAndChannels) {
  auto sites = OneFamily(3, 4);
  SiteTensors eval;
  for (int64_t s = 0; s < 3; ++s) eval.push_back(at::full({5, 7, 4}, 0.5 + s, at::kFloat));
  Variation v = ComputeVariation(eval, sites);
  ASSERT_EQ(v.families.size(), 1u);
  ASSERT_TRUE(v.families[0].eta2_layer.has_value());
  EXPECT_NEAR(*v.families[0].eta2_layer, 1.0, 1e-12);
  EXPECT_NEAR(*v.families[0].eta2, 1.0, 1e-12);
}

// Channels that differ inside a site are explained by per-(site, channel)
// means but not by one mean per site. Sites (0, 2) and (4, 6) per channel,
// constant over tokens: m_f = 3, SS_total = 9+1+1+9 = 20 per position,
// SS around mu_s (1 and 5) = 1+1+1+1 = 4 per position: eta2_layer = 0.8.
TEST(Eta2LayerTest, ChannelDifferencesCountAgainstLayerIdentityOnly) {
  auto sites = OneFamily(2, 2);
  SiteTensors eval;
  for (float base : {0.0f, 4.0f}) {
    at::Tensor a = at::empty({3, 5, 2});
    a.select(2, 0).fill_(base);
    a.select(2, 1).fill_(base + 2);
    eval.push_back(a);
  }
  Variation v = ComputeVariation(eval, sites);
  EXPECT_NEAR(*v.families[0].eta2, 1.0, 1e-12);
  EXPECT_NEAR(*v.families[0].eta2_layer, 0.8, 1e-12);
}

TEST(Eta2LayerTest, MatchesItsFormulaOnRandomTensors) {
  auto sites = OneFamily(3, 3);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  SiteTensors eval;
  for (int64_t s = 0; s < 3; ++s) eval.push_back(at::rand({4, 6, 3}, gen) * (s + 1) + s);
  // By hand, in double: per-site scalar means, one family mean.
  double sum = 0, count = 0;
  std::vector<double> site_mean;
  for (const at::Tensor& a : eval) {
    auto acc = a.accessor<float, 3>();
    double s_sum = 0;
    for (int i = 0; i < 4; ++i)
      for (int t = 0; t < 6; ++t)
        for (int c = 0; c < 3; ++c) s_sum += acc[i][t][c];
    site_mean.push_back(s_sum / 72);
    sum += s_sum;
    count += 72;
  }
  const double m_f = sum / count;
  double ss_total = 0, ss_layer = 0;
  for (size_t s = 0; s < eval.size(); ++s) {
    auto acc = eval[s].accessor<float, 3>();
    for (int i = 0; i < 4; ++i)
      for (int t = 0; t < 6; ++t)
        for (int c = 0; c < 3; ++c) {
          ss_total += (acc[i][t][c] - m_f) * (acc[i][t][c] - m_f);
          ss_layer += (acc[i][t][c] - site_mean[s]) * (acc[i][t][c] - site_mean[s]);
        }
  }
  Variation v = ComputeVariation(eval, sites);
  EXPECT_NEAR(*v.families[0].eta2_layer, 1 - ss_layer / ss_total, 1e-9);
  EXPECT_LE(*v.families[0].eta2_layer, *v.families[0].eta2 + 1e-12);
}

// --- static_token ---

// Coefficient of site s, channel c at a position whose current token is v.
float TokenFunction(int64_t s, int64_t v, int64_t c) { return 0.25f * v + 0.5f * c + 2.0f * s; }

struct TokenCase {
  std::vector<CoefficientSite> sites = OneFamily(2, 3);
  at::Tensor eval_ids, calib_ids;
  SiteTensors eval, calib;
  CalibrationStats stats;
};

// Coefficients that are an exact function of the current token, plus
// `noise` * a position code in the calibration set.
TokenCase MakeTokenCase(const at::Tensor& eval_ids, const at::Tensor& calib_ids, float noise) {
  TokenCase k;
  k.eval_ids = eval_ids;
  k.calib_ids = calib_ids;
  for (int64_t s = 0; s < 2; ++s) {
    for (const auto& [ids, out, jitter] :
         {std::make_tuple(eval_ids, &k.eval, 0.0f), std::make_tuple(calib_ids, &k.calib, noise)}) {
      at::Tensor a = at::empty({ids.size(0), ids.size(1), 3});
      for (int64_t i = 0; i < ids.size(0); ++i)
        for (int64_t t = 0; t < ids.size(1); ++t)
          for (int64_t c = 0; c < 3; ++c) {
            a[i][t][c] = TokenFunction(s, ids[i][t].item<int64_t>(), c) + jitter * (t % 3 - 1);
          }
      out->push_back(a);
    }
  }
  k.stats = *ComputeCalibrationStats(k.calib, k.sites);
  return k;
}

InterventionContext TokenContext(const TokenCase& k) {
  InterventionContext ctx;
  ctx.eval = &k.eval;
  ctx.calib = &k.stats;
  ctx.sites = &k.sites;
  ctx.eval_ids = &k.eval_ids;
  ctx.calib_ids = &k.calib_ids;
  ctx.calib_coeff = &k.calib;
  return ctx;
}

TEST(StaticTokenTest, ReproducesACoefficientThatIsAFunctionOfTheToken) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor calib_ids = at::randint(0, 6, {5, 8}, gen).to(at::kLong);
  calib_ids[0].copy_(at::arange(8) % 6);  // every id 0..5 occurs in C
  const TokenCase k = MakeTokenCase(at::randint(0, 6, {4, 8}, gen).to(at::kLong), calib_ids, 0);
  auto plan = MakeIntervention(InterventionId::kStaticToken, TokenContext(k));
  ASSERT_TRUE(plan.ok()) << plan.status();
  SiteTensors out = (*plan)->Batch(1, 4);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(at::allclose(out[s], k.eval[s].slice(0, 1, 4), 0, 1e-6)) << s;
  }
  auto coverage = CountUnseenTokens(k.eval_ids, k.calib_ids);
  ASSERT_TRUE(coverage.ok());
  EXPECT_EQ(coverage->unseen_positions, 0);
  EXPECT_EQ(coverage->unseen_ids, 0);
}

// The table is the mean over calibration positions of each id; ids that C
// never has get mu_s, and are counted.
TEST(StaticTokenTest, MeansPerTokenAndFallsBackToTheSiteMeanForUnseenIds) {
  const at::Tensor calib_ids = at::tensor({0, 1, 1, 0, 1, 0, 0, 1, 1}, at::kLong).view({3, 3});
  // 9 (unseen) at the last position, whose coefficients reach no scored
  // prediction: static_token still substitutes mu_s there, but it is not
  // counted.
  const at::Tensor eval_ids = at::tensor({0, 2, 9, 7, 7, 0}, at::kLong).view({2, 3});
  const TokenCase k = MakeTokenCase(eval_ids, calib_ids, 0.5f);
  auto plan = MakeIntervention(InterventionId::kStaticToken, TokenContext(k));
  ASSERT_TRUE(plan.ok()) << plan.status();
  SiteTensors out = (*plan)->Batch(0, 2);
  for (int64_t s = 0; s < 2; ++s) {
    // By hand: sums and counts per id over C, and mu_s over all of C.
    std::map<int64_t, std::vector<double>> sum;
    std::map<int64_t, double> count;
    std::vector<double> all(3, 0);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t v = calib_ids[i][t].item<int64_t>();
        sum[v].resize(3, 0);
        count[v] += 1;
        for (int64_t c = 0; c < 3; ++c) {
          const double a = k.calib[s][i][t][c].item<double>();
          sum[v][c] += a;
          all[c] += a / 9;
        }
      }
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t v = eval_ids[i][t].item<int64_t>();
        for (int64_t c = 0; c < 3; ++c) {
          const double want = count.count(v) ? sum[v][c] / count[v] : all[c];
          EXPECT_NEAR(out[s][i][t][c].item<double>(), want, 1e-6) << s << " " << v << " " << c;
        }
      }
  }
  auto coverage = CountUnseenTokens(eval_ids, calib_ids);
  ASSERT_TRUE(coverage.ok());
  EXPECT_EQ(coverage->unseen_positions, 3);  // 2, 7, 7 (not the last position's 9)
  EXPECT_EQ(coverage->unseen_ids, 2);        // {2, 7}
}

TEST(StaticTokenTest, MissingOrMisshapenIdsAreInvalidArgument) {
  const at::Tensor ids = at::zeros({2, 3}, at::kLong);
  TokenCase k = MakeTokenCase(ids, ids, 0);
  InterventionContext ctx = TokenContext(k);
  ctx.eval_ids = nullptr;
  EXPECT_EQ(MakeIntervention(InterventionId::kStaticToken, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
  const at::Tensor wrong = at::zeros({2, 4}, at::kLong);
  ctx = TokenContext(k);
  ctx.calib_ids = &wrong;
  EXPECT_EQ(MakeIntervention(InterventionId::kStaticToken, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- static_token_position and the minimum count ---

// fca.md "Token-keyed profiles", by hand: the cell of evaluation position
// (i, t) is its id v (by_position: (v, t)); n its count in C, mean its
// calibration mean; w = 1 for n >= m, n / (n + m) below (0 for a cell C
// never has). The prior is mu_s for an id and the id's own value (its cell
// without position, shrunk toward mu_s) for a pair.
double ExpectedTokenCell(const TokenCase& k, int64_t s, int64_t i, int64_t t, int64_t c,
                         bool by_position, int64_t m) {
  const int64_t v = k.eval_ids[i][t].item<int64_t>();
  const int64_t rows = k.calib_ids.size(0), length = k.calib_ids.size(1);
  double n = 0, sum = 0, mu = 0;
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t u = 0; u < length; ++u) {
      const double a = k.calib[s][j][u][c].item<double>();
      mu += a / static_cast<double>(rows * length);
      if (k.calib_ids[j][u].item<int64_t>() == v && (!by_position || u == t)) {
        sum += a;
        n += 1;
      }
    }
  const double prior = by_position ? ExpectedTokenCell(k, s, i, t, c, false, m) : mu;
  if (n == 0) return prior;
  const double w = n >= m ? 1.0 : n / (n + m);
  return w * sum / n + (1 - w) * prior;
}

void ExpectTokenTable(InterventionId id, bool by_position, int64_t m) {
  // Id 0 is common, 1 and 2 rare (1 once, 2 three times in C), 9 unseen.
  const at::Tensor calib_ids =
      at::tensor({0, 1, 0, 2, 0, 0, 2, 0, 0, 2, 0, 0}, at::kLong).view({4, 3});
  const at::Tensor eval_ids = at::tensor({0, 1, 2, 9, 2, 0, 1, 0, 2}, at::kLong).view({3, 3});
  const TokenCase k = MakeTokenCase(eval_ids, calib_ids, 0.5f);
  InterventionContext ctx = TokenContext(k);
  ctx.token_min_count = m;
  auto plan = MakeIntervention(id, ctx);
  ASSERT_TRUE(plan.ok()) << plan.status();
  SiteTensors out = (*plan)->Batch(0, 3);
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t c = 0; c < 3; ++c) {
          EXPECT_NEAR(out[s][i][t][c].item<double>(),
                      ExpectedTokenCell(k, s, i, t, c, by_position, m), 1e-5)
              << InterventionName(id) << " m=" << m << " s=" << s << " i=" << i << " t=" << t;
        }
}

TEST(StaticTokenTest, ShrinksIdsSeenFewerThanTheMinimumCountTowardsTheSiteMean) {
  for (int64_t m : {1, 2, 3, 4, 100}) ExpectTokenTable(InterventionId::kStaticToken, false, m);
}

TEST(StaticTokenPositionTest, MeansPerTokenAndPositionShrunkTowardsTheTokensValue) {
  for (int64_t m : {1, 2, 3, 100}) {
    ExpectTokenTable(InterventionId::kStaticTokenPosition, true, m);
  }
}

// The chain cell -> token -> site on numbers worked by hand, m = 3, one
// site, d = 1. C (3 windows of 3):
//   ids [0 0 1] [0 0 0] [0 1 0], a [2 4 12] [4 6 8] [6 18 12]; mu_s = 72/9 = 8.
// Id 0: n = 7 >= 3, mean 42/7 = 6. Id 1: n = 2, mean 15, w = 2/5:
// 0.4 * 15 + 0.6 * 8 = 10.8. Pairs: (0, 0) n = 3, mean 4: 4. (0, 1) 4, 6:
// 0.4 * 5 + 0.6 * 6 = 5.6. (0, 2) 8, 12: 0.4 * 10 + 0.6 * 6 = 7.6. (1, 1) 18,
// w = 1/4: 0.25 * 18 + 0.75 * 10.8 = 12.6. (1, 2) 12: 3 + 8.1 = 11.1. (1, 0)
// is not in C: id 1's 10.8 (the old position prior would read mu_{s,0} = 4).
// Id 7 is not in C: mu_s = 8.
TEST(StaticTokenPositionTest, ShrinksACellTowardItsTokenAndTheTokenTowardTheSite) {
  TokenCase k;
  k.sites = {{"g.0", "g", 0, 1}};
  k.calib_ids = at::tensor({0, 0, 1, 0, 0, 0, 0, 1, 0}, at::kLong).view({3, 3});
  k.eval_ids = at::tensor({1, 0, 7, 0, 1, 1}, at::kLong).view({2, 3});
  k.calib = {at::tensor({2.f, 4.f, 12.f, 4.f, 6.f, 8.f, 6.f, 18.f, 12.f}).view({3, 3, 1})};
  k.eval = {at::zeros({2, 3, 1})};
  k.stats = *ComputeCalibrationStats(k.calib, k.sites);
  InterventionContext ctx = TokenContext(k);
  ctx.token_min_count = 3;
  for (const auto& [id, want] : {std::make_pair(InterventionId::kStaticTokenPosition,
                                                std::vector<double>{10.8, 5.6, 8, 4, 12.6, 11.1}),
                                 std::make_pair(InterventionId::kStaticToken,
                                                std::vector<double>{10.8, 6, 8, 6, 10.8, 10.8})}) {
    auto plan = MakeIntervention(id, ctx);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const at::Tensor out = (*plan)->Batch(0, 2)[0].to(at::kDouble).reshape({-1});
    for (size_t p = 0; p < want.size(); ++p) {
      EXPECT_NEAR(out[p].item<double>(), want[p], 1e-5) << InterventionName(id) << " " << p;
    }
  }
  // shrunk_cells keeps its meaning: pairs of C with 0 < n < m.
  auto cells = CountTokenCells(k.calib_ids, true, 3);
  ASSERT_TRUE(cells.ok());
  EXPECT_EQ(cells->cells, 5);
  EXPECT_EQ(cells->shrunk, 4);
}

// A coefficient that depends on the token and the position: the
// position-keyed table reproduces it where every (id, position) is seen m
// times; the token-keyed one cannot.
TEST(StaticTokenPositionTest, ReproducesACoefficientThatIsAFunctionOfTokenAndPosition) {
  const at::Tensor ids = (at::arange(24, at::kLong) % 3).view({4, 6});  // 0 1 2 0 1 2 / ...
  TokenCase k;
  k.eval_ids = ids.slice(0, 0, 2);
  k.calib_ids = ids;
  for (int64_t s = 0; s < 2; ++s) {
    at::Tensor a = at::empty({4, 6, 3});
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t t = 0; t < 6; ++t)
        for (int64_t c = 0; c < 3; ++c) {
          a[i][t][c] = TokenFunction(s, ids[i][t].item<int64_t>(), c) + 0.1f * t;
        }
    k.calib.push_back(a);
    k.eval.push_back(a.slice(0, 0, 2).clone());
  }
  k.stats = *ComputeCalibrationStats(k.calib, k.sites);
  InterventionContext ctx = TokenContext(k);
  ctx.token_min_count = 4;  // each (id, position) is seen 4 times
  auto by_position = MakeIntervention(InterventionId::kStaticTokenPosition, ctx);
  auto by_token = MakeIntervention(InterventionId::kStaticToken, ctx);
  ASSERT_TRUE(by_position.ok() && by_token.ok());
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(at::allclose((*by_position)->Batch(0, 2)[s], k.eval[s], 0, 1e-5)) << s;
    EXPECT_FALSE(at::allclose((*by_token)->Batch(0, 2)[s], k.eval[s], 0, 1e-2)) << s;
  }
  auto cells = CountTokenCells(k.calib_ids, true, 4);
  ASSERT_TRUE(cells.ok());
  EXPECT_EQ(cells->cells, 6);  // (id, position) pairs: id = t mod 3
  EXPECT_EQ(cells->shrunk, 0);
}

TEST(StaticTokenPositionTest, CountsTheCellsBelowTheMinimumCount) {
  // Ids: 0 x7, 2 x3, 1 x2. (id, position): (0,0) x2, (0,1) x2, (0,2) x3,
  // (2,0) x1, (2,1) x1, (2,2) x1, (1,0) x1, (1,1) x1.
  const at::Tensor calib_ids =
      at::tensor({0, 1, 0, 2, 0, 0, 1, 2, 0, 0, 0, 2}, at::kLong).view({4, 3});
  auto ids2 = CountTokenCells(calib_ids, false, 2);
  auto ids3 = CountTokenCells(calib_ids, false, 3);
  auto ids4 = CountTokenCells(calib_ids, false, 4);
  auto cells2 = CountTokenCells(calib_ids, true, 2);
  auto cells3 = CountTokenCells(calib_ids, true, 3);
  ASSERT_TRUE(ids2.ok() && ids3.ok() && ids4.ok() && cells2.ok() && cells3.ok());
  EXPECT_EQ(ids2->cells, 3);
  EXPECT_EQ(ids2->shrunk, 0);
  EXPECT_EQ(ids3->shrunk, 1);  // 1
  EXPECT_EQ(ids4->shrunk, 2);  // 1 and 2
  EXPECT_EQ(cells2->cells, 8);
  EXPECT_EQ(cells2->shrunk, 5);  // the five seen once
  EXPECT_EQ(cells3->shrunk, 7);  // all but (0, 2)
}

TEST(StaticTokenPositionTest, MismatchedLengthsAndAZeroMinimumAreInvalidArgument) {
  const TokenCase k = MakeTokenCase(at::zeros({2, 3}, at::kLong), at::zeros({2, 4}, at::kLong), 0);
  InterventionContext ctx = TokenContext(k);
  auto plan = MakeIntervention(InterventionId::kStaticTokenPosition, ctx);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(plan.status().message()).find("static_token_position"), std::string::npos);
  // static_token does not mind the lengths.
  EXPECT_TRUE(MakeIntervention(InterventionId::kStaticToken, ctx).ok());
  ctx.token_min_count = 0;
  EXPECT_EQ(MakeIntervention(InterventionId::kStaticToken, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- neutral ---

TEST(NeutralTest, BroadcastsTheModelsNeutralCoefficients) {
  auto sites = OneFamily(2, 3);
  SiteTensors eval = {at::rand({4, 5, 3}), at::rand({4, 5, 3})};
  SiteTensors neutral = {at::ones({3}), at::tensor({0.5f, -1.0f, 2.0f})};
  InterventionContext ctx;
  ctx.eval = &eval;
  ctx.sites = &sites;
  ctx.neutral = &neutral;
  auto plan = MakeIntervention(InterventionId::kNeutral, ctx);
  ASSERT_TRUE(plan.ok()) << plan.status();
  SiteTensors out = (*plan)->Batch(1, 3);
  ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{2, 5, 3}));
  EXPECT_TRUE(at::equal(out[0], at::ones({2, 5, 3})));
  EXPECT_EQ(out[1][1][4][2].item<float>(), 2.0f);
  EXPECT_EQ(out[1][0][0][1].item<float>(), -1.0f);
  SiteTensors short_neutral = {at::ones({3}), at::ones({2})};
  ctx.neutral = &short_neutral;
  EXPECT_EQ(MakeIntervention(InterventionId::kNeutral, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
  ctx.neutral = nullptr;
  EXPECT_EQ(MakeIntervention(InterventionId::kNeutral, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- per-group dependence ---

TEST(DependenceGroupsTest, LayersSitesAndFamilies) {
  std::vector<CoefficientSite> sites = {{"q.0", "q", 0, 2},
                                        {"r.0", "r", 0, 2},
                                        {"q.1", "q", 1, 3},
                                        {"r.1", "r", 1, 3},
                                        {"out.2", "out", 2, 4}};
  const std::vector<SiteGroup> layers = DependenceGroups(sites, ScopeId::kLayer);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[1].name, "1");
  EXPECT_EQ(layers[1].sites, (std::vector<size_t>{2, 3}));
  const std::vector<SiteGroup> families = DependenceGroups(sites, ScopeId::kFamily);
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].name, "q");
  EXPECT_EQ(families[0].sites, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(families[2].name, "out");
  const std::vector<SiteGroup> each = DependenceGroups(sites, ScopeId::kSite);
  ASSERT_EQ(each.size(), 5u);
  EXPECT_EQ(each[4].name, "out.2");
}

TEST(DependenceGroupsTest, RestrictedInterventionIsCorrectOutsideTheGroup) {
  auto sites = OneFamily(3, 2);
  SiteTensors eval = {at::rand({4, 5, 2}), at::rand({4, 5, 2}), at::rand({4, 5, 2})};
  SiteTensors neutral = {at::zeros({2}), at::zeros({2}), at::zeros({2})};
  InterventionContext ctx;
  ctx.eval = &eval;
  ctx.sites = &sites;
  ctx.neutral = &neutral;
  auto inner = MakeIntervention(InterventionId::kNeutral, ctx);
  ASSERT_TRUE(inner.ok());
  auto plan = RestrictToGroup(std::move(*inner), eval, SiteGroup{"1", {1}, 1});
  SiteTensors out = plan->Batch(1, 3);
  EXPECT_TRUE(at::equal(out[0], eval[0].slice(0, 1, 3)));
  EXPECT_TRUE(at::equal(out[1], at::zeros({2, 5, 2})));
  EXPECT_TRUE(at::equal(out[2], eval[2].slice(0, 1, 3)));
}

}  // namespace
}  // namespace fca::engine
