#include "server/engine/audit/statistics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/random.h"

namespace fca::engine {
namespace {

TEST(StatisticsTest, MeanAndMedian) {
  EXPECT_DOUBLE_EQ(Mean({1, 2, 3, 6}), 3.0);
  EXPECT_DOUBLE_EQ(Median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(Median({})));
}

TEST(StatisticsTest, BootstrapOfAConstantDifferenceIsThatDifference) {
  std::vector<double> ref = {1.0, 2.0, 3.5, 0.25};
  std::vector<double> treated = {1.5, 2.5, 4.0, 0.75};
  Interval ci = PairedBootstrapCI(treated, ref, 1000, 0.95, 7);
  EXPECT_NEAR(ci.low, 0.5, 1e-12);
  EXPECT_NEAR(ci.high, 0.5, 1e-12);
}

TEST(StatisticsTest, BootstrapCIIsPairedSeededAndCoversTheMean) {
  Rng rng(3);
  std::vector<double> ref, treated;
  for (int i = 0; i < 200; ++i) {
    const double base = 5.0 * (rng.Uniform(1000) / 1000.0);  // large between-unit spread
    const double noise = (rng.Uniform(1000) / 1000.0 - 0.5) * 0.2;
    ref.push_back(base);
    treated.push_back(base + 0.1 + noise);
  }
  Interval ci = PairedBootstrapCI(treated, ref, 2000, 0.95, 11);
  const double diff = Mean(treated) - Mean(ref);
  EXPECT_LT(ci.low, diff);
  EXPECT_GT(ci.high, diff);
  // Pairing removes the between-unit spread: the CI is narrow (an unpaired
  // interval would be ~50x wider) and excludes zero.
  EXPECT_GT(ci.low, 0.08);
  EXPECT_LT(ci.high, 0.12);
  Interval again = PairedBootstrapCI(treated, ref, 2000, 0.95, 11);
  EXPECT_EQ(ci.low, again.low);
  EXPECT_EQ(ci.high, again.high);
  Interval other = PairedBootstrapCI(treated, ref, 2000, 0.95, 12);
  EXPECT_NE(ci.low, other.low);
}

TEST(StatisticsTest, GapRetention) {
  // R = (G - P) / (G - C): global 3.0, correct 2.0.
  EXPECT_DOUBLE_EQ(*GapRetentionPercent(3.0, 2.0, 2.0, 1e-5), 100.0);
  EXPECT_DOUBLE_EQ(*GapRetentionPercent(3.0, 3.0, 2.0, 1e-5), 0.0);
  EXPECT_DOUBLE_EQ(*GapRetentionPercent(3.0, 2.1, 2.0, 1e-5), 90.0);
  // A profile better than the model's own coefficients exceeds 100%.
  EXPECT_GT(*GapRetentionPercent(3.0, 1.9, 2.0, 1e-5), 100.0);
  // ~0 gap: undefined, never a huge number.
  EXPECT_FALSE(GapRetentionPercent(2.0, 2.5, 2.0, 1e-5).has_value());
  EXPECT_FALSE(GapRetentionPercent(2.0 + 1e-9, 2.5, 2.0, 1e-5).has_value());
  EXPECT_FALSE(GapRetentionPercent(NAN, 2.5, 2.0, 1e-5).has_value());
}

TEST(StatisticsTest, Summarize) {
  Summary s = Summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.sd, std::sqrt(32.0 / 7.0), 1e-12);  // sample sd
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 9);
  EXPECT_EQ(s.n, 8);
  Summary one = Summarize({3});
  EXPECT_EQ(one.sd, 0);
}

TEST(RandomTest, PermutationsAndDerangementsAreValidAndSeeded) {
  Rng a(1), b(1);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> p = a.Derangement(7);
    EXPECT_EQ(p, b.Derangement(7));
    std::vector<bool> seen(7, false);
    for (int i = 0; i < 7; ++i) {
      EXPECT_NE(p[i], i);
      seen[p[i]] = true;
    }
    for (bool s : seen) EXPECT_TRUE(s);
  }
  // Uniform(n) covers its range roughly evenly.
  Rng r(5);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 40000; ++i) ++counts[r.Uniform(4)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

}  // namespace
}  // namespace fca::engine

namespace fca::engine {
namespace {

TEST(StatisticsTest, RetentionCIIsNarrowForAClearGapAndWideForNoise) {
  Rng rng(1);
  std::vector<double> g, p, c, noise_g;
  for (int i = 0; i < 100; ++i) {
    const double base = 2.0 + (rng.Uniform(1000) / 1000.0);
    c.push_back(base);
    g.push_back(base + 1.0);
    p.push_back(base + 0.1 + (rng.Uniform(1000) / 1000.0 - 0.5) * 0.02);
    noise_g.push_back(base + (rng.Uniform(1000) / 1000.0 - 0.5) * 0.01);
  }
  auto ci = RetentionBootstrapCI(g, p, c, 1e-5, 500, 0.95, 3);
  ASSERT_TRUE(ci.has_value());
  const double r = *GapRetentionPercent(Mean(g), Mean(p), Mean(c), 1e-5);
  EXPECT_NEAR(r, 90.0, 1.0);
  EXPECT_LT(ci->low, r);
  EXPECT_GT(ci->high, r);
  EXPECT_LT(ci->high - ci->low, 2.0);
  auto wide = RetentionBootstrapCI(noise_g, p, c, 1e-5, 500, 0.95, 3);
  ASSERT_TRUE(wide.has_value());
  EXPECT_GT(wide->high - wide->low, 100.0);
}

// fca.md "Execution": slowdown = exp(mean log(t_model / t_twin)) - 1.
TEST(StatisticsTest, PairedSlowdownOfAConstantRatioIsThatRatio) {
  const std::vector<double> twin = {10, 20, 15, 40};  // the machine's speed drifts
  std::vector<double> model;
  for (double t : twin) model.push_back(1.25 * t);
  const SlowdownEstimate e = PairedSlowdown(model, twin, 1000, 0.95, 5);
  EXPECT_NEAR(e.slowdown, 0.25, 1e-12);
  EXPECT_NEAR(e.ci.low, 0.25, 1e-12);
  EXPECT_NEAR(e.ci.high, 0.25, 1e-12);
  EXPECT_EQ(e.verdict, 1);
  EXPECT_EQ(e.pairs, 4);
  // The other way round: faster by 1 - 1/1.25 = 20%.
  const SlowdownEstimate f = PairedSlowdown(twin, model, 1000, 0.95, 5);
  EXPECT_NEAR(f.slowdown, -0.2, 1e-12);
  EXPECT_EQ(f.verdict, -1);
}

TEST(StatisticsTest, PairedSlowdownIsTheGeometricMeanOfPairRatios) {
  // Ratios 2 and 1/2: the geometric mean is 1 and the CI spans 0.
  const SlowdownEstimate e = PairedSlowdown({2, 1}, {1, 2}, 2000, 0.95, 3);
  EXPECT_NEAR(e.slowdown, 0.0, 1e-12);
  EXPECT_NEAR(e.ci.low, -0.5, 1e-12);  // resamples of only the fast pair
  EXPECT_NEAR(e.ci.high, 1.0, 1e-12);  // ... of only the slow one
  EXPECT_EQ(e.verdict, 0);
  // Ratios 1.1 and 1.21: geometric mean 1.1^1.5, inside [0.1, 0.21].
  const SlowdownEstimate g = PairedSlowdown({1.1, 12.1}, {1, 10}, 2000, 0.95, 3);
  EXPECT_NEAR(g.slowdown, std::pow(1.1, 1.5) - 1, 1e-12);
  EXPECT_NEAR(g.ci.low, 0.1, 1e-12);
  EXPECT_NEAR(g.ci.high, 0.21, 1e-12);
  EXPECT_EQ(g.verdict, 1);
}

TEST(StatisticsTest, PairedSlowdownCIOfNoisyPairsCoversTheTrueRatio) {
  // 400 pairs: common drift (shared by both members) plus independent noise
  // around a true ratio of 1.05.
  Rng rng(17);
  std::vector<double> model, twin;
  for (int i = 0; i < 400; ++i) {
    const double drift = 1.0 + rng.Uniform(1000) / 1000.0;
    const double noise = 1.0 + (rng.Uniform(1000) / 1000.0 - 0.5) * 0.1;
    twin.push_back(100 * drift);
    model.push_back(105 * drift * noise);
  }
  const SlowdownEstimate e = PairedSlowdown(model, twin, 2000, 0.95, 1);
  EXPECT_LT(e.ci.low, 0.05);
  EXPECT_GT(e.ci.high, 0.05);
  EXPECT_LT(e.half_width(), 0.01);  // pairing removes the drift
  EXPECT_EQ(e.verdict, 1);
}

}  // namespace
}  // namespace fca::engine
