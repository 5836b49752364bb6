// Interventions and variation metrics against their fca.md formulas on small
// hand-made tensors.
#include "server/engine/audit/coefficients.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <set>

namespace fca::engine {
namespace {

std::vector<CoefficientSite> TwoFamilies(int64_t layers, int64_t d) {
  std::vector<CoefficientSite> s;
  for (int64_t l = 0; l < layers; ++l) {
    s.push_back({"attn_gate." + std::to_string(l), "attn_gate", l, d});
    s.push_back({"mlp_gate." + std::to_string(l), "mlp_gate", l, d});
  }
  return s;
}

SiteTensors RandomSites(size_t sites, int64_t n, int64_t t, int64_t d, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  SiteTensors out;
  for (size_t s = 0; s < sites; ++s) out.push_back(at::rand({n, t, d}, gen));
  return out;
}

std::unique_ptr<Intervention> Make(InterventionId id, const InterventionContext& ctx) {
  auto i = MakeIntervention(id, ctx);
  EXPECT_TRUE(i.ok()) << i.status();
  return i.ok() ? std::move(*i) : nullptr;
}

TEST(InterventionTest, CrossInputIsASeededDerangement) {
  for (int64_t n : {2, 3, 5, 17, 100}) {
    std::vector<int64_t> pi = CrossInputAssignment(n, 42);
    std::set<int64_t> values(pi.begin(), pi.end());
    EXPECT_EQ(values.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) EXPECT_NE(pi[i], i) << "fixed point at " << i;
    EXPECT_EQ(pi, CrossInputAssignment(n, 42));
  }
  EXPECT_NE(CrossInputAssignment(100, 1), CrossInputAssignment(100, 2));
}

TEST(InterventionTest, CrossInputSubstitutesAnotherWindowsCoefficients) {
  auto sites = TwoFamilies(2, 3);
  SiteTensors eval = RandomSites(sites.size(), 6, 5, 3, 1);
  InterventionContext ctx{&eval, nullptr, &sites, 9, false};
  auto plan = Make(InterventionId::kCrossInput, ctx);
  std::vector<int64_t> pi = CrossInputAssignment(6, 9);
  SiteTensors batch = plan->Batch(2, 5);
  for (size_t s = 0; s < sites.size(); ++s) {
    for (int64_t i = 2; i < 5; ++i) {
      EXPECT_TRUE(at::equal(batch[s][i - 2], eval[s][pi[i]]));
    }
  }
  SiteTensors one = RandomSites(1, 1, 5, 3, 2);
  ctx.eval = &one;
  EXPECT_EQ(MakeIntervention(InterventionId::kCrossInput, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InterventionTest, TokenShuffleIsASharedPermutationOfEachSequence) {
  auto sites = TwoFamilies(2, 3);
  const int64_t n = 4, t = 9;
  // Position-coded coefficients: value = 100*i + t, so the permutation is
  // readable from the output.
  SiteTensors eval;
  for (size_t s = 0; s < sites.size(); ++s) {
    at::Tensor a = at::empty({n, t, 3});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < t; ++p) a[i][p].fill_(100.0 * i + p + 1000.0 * s);
    eval.push_back(a);
  }
  InterventionContext ctx{&eval, nullptr, &sites, 5, false};
  SiteTensors out = Make(InterventionId::kTokenShuffle, ctx)->Batch(0, n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> sigma = TokenPermutation(t, 5, i, -1);
    std::set<int64_t> seen;
    for (int64_t p = 0; p < t; ++p) {
      for (size_t s = 0; s < sites.size(); ++s) {
        const double v = out[s][i][p][0].item<double>() - 1000.0 * s - 100.0 * i;
        EXPECT_EQ(static_cast<int64_t>(v), sigma[p]);  // same sigma for all sites
      }
      seen.insert(sigma[p]);
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(t));  // a permutation
  }
  // The multiset of each sequence is unchanged.
  EXPECT_TRUE(at::allclose(std::get<0>(out[0].sort(1)), std::get<0>(eval[0].sort(1))));
  // Per-site option: sites get different permutations.
  ctx.per_site_shuffle = true;
  SiteTensors ps = Make(InterventionId::kTokenShuffle, ctx)->Batch(0, n);
  EXPECT_FALSE(at::equal(ps[0], ps[1] - 1000.0));
}

// fca.md "Gap retention": for a softmax router one scalar per family is 1/d,
// every expert tied; its global_mean is the per-channel mean pooled over the
// family's sites, m_{f,c}, which no tie rule has to break.
TEST(InterventionTest, GlobalMeanOfASimplexValuedFamilyKeepsItsChannels) {
  std::vector<CoefficientSite> sites = {{"r.0", "r", 0, 3}, {"r.1", "r", 1, 3}};
  SiteTensors logits = RandomSites(2, 6, 5, 3, 5);
  SiteTensors calib = {at::softmax(logits[0] * 4, -1), at::softmax(logits[1] * 4, -1)};
  SiteTensors eval = {calib[0].slice(0, 0, 2), calib[1].slice(0, 0, 2)};
  auto stats = ComputeCalibrationStats(calib, sites);
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->family_channel_mean.count("r"), 1u);
  const at::Tensor want = at::cat({calib[0].to(at::kDouble).reshape({-1, 3}),
                                   calib[1].to(at::kDouble).reshape({-1, 3})})
                              .mean(0);
  EXPECT_NEAR(want.sum().item<double>(), 1.0, 1e-6);       // float32 softmax rows
  EXPECT_NEAR(stats->family_mean.at("r"), 1.0 / 3, 1e-9);  // the tie a scalar would give
  InterventionContext ctx{&eval, &*stats, &sites, 0, false};
  SiteTensors global = Make(InterventionId::kGlobalMean, ctx)->Batch(0, 2);
  for (size_t s = 0; s < 2; ++s) {
    for (int64_t t = 0; t < 5; ++t) {
      EXPECT_TRUE(at::allclose(global[s][1][t].to(at::kDouble), want, 1e-6, 1e-7));
    }
  }
  // Gates (not on the simplex) keep one scalar per family.
  auto gates = ComputeCalibrationStats(RandomSites(2, 6, 5, 3, 6), sites);
  ASSERT_TRUE(gates.ok());
  EXPECT_EQ(gates->family_channel_mean.count("r"), 0u);
}

TEST(InterventionTest, StaticProfilesAreTheCalibrationMeans) {
  auto sites = TwoFamilies(2, 3);
  SiteTensors calib = RandomSites(sites.size(), 7, 5, 3, 3);
  SiteTensors eval = RandomSites(sites.size(), 4, 5, 3, 4);
  auto stats = ComputeCalibrationStats(calib, sites);
  ASSERT_TRUE(stats.ok());
  InterventionContext ctx{&eval, &*stats, &sites, 0, false};
  SiteTensors layer = Make(InterventionId::kStaticLayer, ctx)->Batch(1, 3);
  SiteTensors position = Make(InterventionId::kStaticLayerPosition, ctx)->Batch(1, 3);
  SiteTensors global = Make(InterventionId::kGlobalMean, ctx)->Batch(1, 3);
  for (size_t s = 0; s < sites.size(); ++s) {
    at::Tensor mu_s = calib[s].to(at::kDouble).mean(at::IntArrayRef{0, 1});  // [d]
    at::Tensor mu_st = calib[s].to(at::kDouble).mean(0);                     // [T, d]
    EXPECT_EQ(layer[s].sizes().vec(), (std::vector<int64_t>{2, 5, 3}));
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t p = 0; p < 5; ++p) {
        EXPECT_TRUE(at::allclose(layer[s][i][p].to(at::kDouble), mu_s, 1e-6, 1e-7));
      }
      EXPECT_TRUE(at::allclose(position[s][i].to(at::kDouble), mu_st, 1e-6, 1e-7));
    }
  }
  // Global mean: one value per family, the mean over sites of that family.
  for (const std::string family : {"attn_gate", "mlp_gate"}) {
    double sum = 0, count = 0;
    for (size_t s = 0; s < sites.size(); ++s) {
      if (sites[s].family != family) continue;
      sum += calib[s].to(at::kDouble).sum().item<double>();
      count += calib[s].numel();
    }
    for (size_t s = 0; s < sites.size(); ++s) {
      if (sites[s].family != family) continue;
      EXPECT_NEAR(global[s].min().item<double>(), sum / count, 1e-6);
      EXPECT_NEAR(global[s].max().item<double>(), sum / count, 1e-6);
    }
  }
  EXPECT_NE(stats->family_mean.at("attn_gate"), stats->family_mean.at("mlp_gate"));
}

TEST(VariationTest, Eta2IsOneWhenCoefficientsDependOnlyOnTheLayer) {
  std::vector<CoefficientSite> sites = {{"g.0", "g", 0, 2}, {"g.1", "g", 1, 2}, {"g.2", "g", 2, 2}};
  SiteTensors eval;
  for (int l = 0; l < 3; ++l) eval.push_back(at::full({5, 6, 2}, 0.5 + l));
  Variation v = ComputeVariation(eval, sites);
  ASSERT_EQ(v.families.size(), 1u);
  ASSERT_TRUE(v.families[0].eta2.has_value());
  EXPECT_NEAR(*v.families[0].eta2, 1.0, 1e-12);
  EXPECT_NEAR(v.families[0].total_variance, 2.0 / 3.0, 1e-12);  // values 0.5,1.5,2.5
  EXPECT_NEAR(v.families[0].within_site_variance, 0.0, 1e-12);
}

// fca.md "Variance explained": for router weights (a softmax per position)
// one mean per site is 1/d everywhere, so eta2_layer is not applicable.
TEST(VariationTest, Eta2LayerIsNotApplicableToSimplexValuedCoefficients) {
  std::vector<CoefficientSite> sites = {{"r.0", "r", 0, 4}, {"r.1", "r", 1, 4}};
  SiteTensors logits = RandomSites(2, 5, 6, 4, 3);
  SiteTensors eval = {at::softmax(logits[0] * 3, -1), at::softmax(logits[1] * 3, -1)};
  EXPECT_TRUE(SimplexValued(eval[0]));
  Variation v = ComputeVariation(eval, sites);
  EXPECT_TRUE(v.families[0].simplex);
  EXPECT_FALSE(v.families[0].eta2_layer.has_value());
  EXPECT_TRUE(v.families[0].eta2.has_value());  // per (site, channel): still defined
  // Not a simplex: plain gates, a single channel, or one site off it.
  EXPECT_FALSE(SimplexValued(logits[0]));
  EXPECT_FALSE(SimplexValued(at::ones({2, 3, 1})));
  eval[1] = eval[1] * 1.1;
  EXPECT_FALSE(ComputeVariation(eval, sites).families[0].simplex);
}

TEST(VariationTest, Eta2IsNearZeroWhenLayerMeansAreEqual) {
  std::vector<CoefficientSite> sites = {{"g.0", "g", 0, 2}, {"g.1", "g", 1, 2}};
  SiteTensors eval = RandomSites(2, 50, 40, 2, 8);  // same distribution per site
  Variation v = ComputeVariation(eval, sites);
  ASSERT_TRUE(v.families[0].eta2.has_value());
  EXPECT_LT(*v.families[0].eta2, 0.01);
  EXPECT_GE(*v.families[0].eta2, 0.0);
}

TEST(VariationTest, WithinSiteVarianceSplitsIntoBetweenAndWithinInput) {
  std::vector<CoefficientSite> sites = {{"g.0", "g", 0, 1}};
  // Two sequences with constant values 1 and 3: all variance is between inputs.
  at::Tensor a = at::cat({at::full({1, 4, 1}, 1.0), at::full({1, 4, 1}, 3.0)}, 0);
  Variation v = ComputeVariation({a}, sites);
  EXPECT_NEAR(v.families[0].between_input_variance, 1.0, 1e-12);
  EXPECT_NEAR(v.families[0].within_input_variance, 0.0, 1e-12);
  // Random values: the two parts add up to the within-site variance.
  SiteTensors r = RandomSites(2, 6, 7, 3, 2);
  Variation w = ComputeVariation(r, {{"g.0", "g", 0, 3}, {"g.1", "g", 1, 3}});
  const FamilyVariation& f = w.families[0];
  EXPECT_NEAR(f.between_input_variance + f.within_input_variance, f.within_site_variance, 1e-12);
  EXPECT_GT(f.within_input_variance, f.between_input_variance);
}

TEST(VariationTest, ConstantCoefficientsHaveUndefinedEta2) {
  std::vector<CoefficientSite> sites = {{"g.0", "g", 0, 2}, {"g.1", "g", 1, 2}};
  Variation v = ComputeVariation({at::ones({3, 4, 2}), at::ones({3, 4, 2})}, sites);
  EXPECT_FALSE(v.families[0].eta2.has_value());
  EXPECT_EQ(v.families[0].total_variance, 0.0);
}

}  // namespace
}  // namespace fca::engine
