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

}  // namespace
}  // namespace fca::engine
