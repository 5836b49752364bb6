#include "server/engine/audit/statistics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/random.h"
#include "tests/engine/audit/series_testing.h"

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

RetentionPlan Plan(int resamples = 500, double level = 0.95) {
  RetentionPlan plan;
  plan.resamples = resamples;
  plan.level = level;
  plan.gap_seed = 3;
  plan.retention_seed = 4;
  return plan;
}

TEST(StatisticsTest, RetentionCIIsNarrowForAClearGap) {
  Rng rng(1);
  std::vector<double> g, p, c;
  for (int i = 0; i < 100; ++i) {
    const double base = 2.0 + (rng.Uniform(1000) / 1000.0);
    c.push_back(base);
    g.push_back(base + 1.0);
    p.push_back(base + 0.1 + (rng.Uniform(1000) / 1000.0 - 0.5) * 0.02);
  }
  const RetentionEstimate e = EstimateRetention(g, p, c, Plan());
  ASSERT_TRUE(e.value.has_value());
  ASSERT_TRUE(e.ci.has_value());
  EXPECT_NEAR(*e.value, 90.0, 1.0);
  EXPECT_NEAR(e.gap, 1.0, 1e-12);
  EXPECT_NEAR(e.gap_ci.low, 1.0, 1e-12);  // a constant gap
  EXPECT_LT(e.ci->low, *e.value);
  EXPECT_GT(e.ci->high, *e.value);
  EXPECT_LT(e.ci->high - e.ci->low, 2.0);
  EXPECT_EQ(e.dropped_resamples, 0);
}

// fca.md "Gap retention": no gap, no R (and no resampling of R at all).
TEST(StatisticsTest, RetentionIsUndefinedWithoutAGap) {
  std::vector<double> g, p, c;
  for (int i = 0; i < 64; ++i) {
    c.push_back(2.0 + 0.01 * i);
    g.push_back(c.back() + (i % 2 ? 0.05 : -0.05));  // gap exactly 0 on average
    p.push_back(c.back() + 0.3);
  }
  const RetentionEstimate e = EstimateRetention(g, p, c, Plan());
  EXPECT_NEAR(e.gap, 0.0, 1e-12);
  EXPECT_LT(e.gap_ci.low, 0.0);
  EXPECT_GT(e.gap_ci.high, 0.0);
  EXPECT_FALSE(e.value.has_value());
  EXPECT_FALSE(e.ci.has_value());
  EXPECT_EQ(e.dropped_resamples, 0);
}

// The case: a true gap of 0.01 nats under noise of 0.05. The point
// gap is positive (the old rule, |gap| >= 1e-5, printed R = some wild
// percentage) but its CI changes sign: R is undefined.
TEST(StatisticsTest, RetentionIsUndefinedWhenTheGapsCIChangesSign) {
  std::vector<double> g, p, c;
  for (int i = 0; i < 40; ++i) {
    c.push_back(3.0);
    g.push_back(3.0 + 0.01 + (i % 2 ? 0.05 : -0.05));
    p.push_back(3.0 + 0.04);
  }
  ASSERT_TRUE(GapRetentionPercent(Mean(g), Mean(p), Mean(c), 1e-5).has_value());  // -300%
  const RetentionEstimate e = EstimateRetention(g, p, c, Plan());
  EXPECT_NEAR(e.gap, 0.01, 1e-12);
  EXPECT_LT(e.gap_ci.low, 0.0);
  EXPECT_GT(e.gap_ci.high, 0.0);
  EXPECT_FALSE(e.value.has_value());
  EXPECT_FALSE(e.ci.has_value());
}

// A gap whose 50% CI lies above 0 while some resamples still have a gap
// <= 0: R is defined, those resamples are dropped and counted (the count
// recomputed here from the same draws), and with more than 5% dropped R's
// CI is undefined.
TEST(StatisticsTest, RetentionResamplesWithoutAPositiveGapAreDroppedAndCounted) {
  std::vector<double> g, p, c;
  for (int i = 0; i < 40; ++i) {
    c.push_back(3.0);
    g.push_back(3.0 + 0.008 + (i % 2 ? 0.05 : -0.05));
    p.push_back(3.0 + 0.004);
  }
  const RetentionPlan plan = Plan(400, 0.5);
  const RetentionEstimate e = EstimateRetention(g, p, c, plan);
  ASSERT_GT(e.gap_ci.low, 0.0);
  ASSERT_TRUE(e.value.has_value());
  EXPECT_NEAR(*e.value, 50.0, 1e-9);
  Rng rng(plan.retention_seed);
  int64_t dropped = 0;
  for (int r = 0; r < plan.resamples; ++r) {
    double gap = 0;
    for (size_t k = 0; k < c.size(); ++k) {
      const size_t i = rng.Uniform(c.size());
      gap += g[i] - c[i];
    }
    dropped += !(gap / c.size() >= plan.min_gap);
  }
  EXPECT_EQ(e.dropped_resamples, dropped);
  EXPECT_GT(dropped, plan.resamples / 20);
  EXPECT_FALSE(e.ci.has_value());
}

// fca.md "Correlated windows": for AR(1), x_t = phi x_{t-1} + e_t with unit
// innovations, n Var(mean) -> 1 / (1 - phi)^2 (= 4 at phi = 0.5), while the
// i.i.d. bootstrap sees only Var(x) = 1 / (1 - phi^2) (= 4/3). Averaged over
// 32 series of 2000 values, the circular block bootstrap (blocks of 50)
// recovers the first, the i.i.d. one the second; and the lag-1
// autocorrelation is phi.
TEST(StatisticsTest, BlockBootstrapRecoversTheVarianceOfAnAR1Mean) {
  const double phi = 0.5;
  const size_t n = 2000;
  Rng rng(5);
  double block = 0, iid = 0, lag1 = 0;
  const int series = 32;
  for (int k = 0; k < series; ++k) {
    const std::vector<double> e = Normals(&rng, n + 100);
    std::vector<double> x;
    double prev = 0;
    for (size_t t = 0; t < e.size(); ++t) {
      prev = phi * prev + e[t];
      if (t >= 100) x.push_back(prev);  // past the burn-in
    }
    block += n * Variance(BlockBootstrapMeans(x, 1000, 10 + k, 50)) / series;
    iid += n * Variance(BlockBootstrapMeans(x, 1000, 10 + k, 1)) / series;
    lag1 += *Lag1Autocorrelation(x) / series;
  }
  EXPECT_NEAR(block, 4.0, 0.4);
  EXPECT_NEAR(iid, 4.0 / 3.0, 0.13);
  EXPECT_NEAR(lag1, phi, 0.03);
}

// Block length 1 is the i.i.d. bootstrap: the same draws from the same seed.
TEST(StatisticsTest, BlockBootstrapOfLengthOneIsTheIidBootstrap) {
  const std::vector<double> x = {0.3, -1.0, 2.5, 0.7, 0.1, -0.4};
  Rng rng(9);
  const std::vector<double> means = BlockBootstrapMeans(x, 50, 9, 1);
  for (int r = 0; r < 50; ++r) {
    double s = 0;
    for (size_t k = 0; k < x.size(); ++k) s += x[rng.Uniform(x.size())];
    EXPECT_DOUBLE_EQ(means[r], s / x.size());
  }
  EXPECT_EQ(AutoBlockLength(1), 1);
  EXPECT_EQ(AutoBlockLength(64), 4);
  EXPECT_EQ(AutoBlockLength(4096), 16);
  EXPECT_FALSE(Lag1Autocorrelation({1, 1, 1, 1}).has_value());
  EXPECT_NEAR(*Lag1Autocorrelation({1, -1, 1, -1}), -0.75, 1e-12);
}

// fca.md "Calibration uncertainty": replicates that do not differ leave
// the block CI as it is, draw for draw.
TEST(StatisticsTest, CalibratedBootstrapOfEqualReplicatesIsTheBlockCI) {
  Rng rng(21);
  const std::vector<double> ref = Normals(&rng, 60), treated = Normals(&rng, 60);
  const Interval block = PairedBootstrapCI(treated, ref, 500, 0.9, 7, 3);
  const Interval calib = CalibratedBootstrapCI({treated, treated, treated}, ref, 500, 0.9, 7, 3);
  EXPECT_EQ(calib.low, block.low);
  EXPECT_EQ(calib.high, block.high);
}

// Replicate r of n windows is ref + e_i + c_r: per-window noise of sd s_e
// (shared by the replicates: the same windows) and a calibration shift of
// known sd s_c. The CI of the mean penalty then has width 2 z sqrt(s_e^2 /
// n + s_c^2), against 2 z s_e / sqrt(n) with the calibration fixed.
TEST(StatisticsTest, CalibratedBootstrapAddsTheCalibrationVariance) {
  const size_t n = 400, replicates = 400;
  const double s_e = 1.0, s_c = 0.1, z = 1.959964;
  Rng rng(8);
  const std::vector<double> ref = Normals(&rng, n), e = Normals(&rng, n),
                            c = Normals(&rng, replicates);
  std::vector<double> fixed(n);
  for (size_t i = 0; i < n; ++i) fixed[i] = ref[i] + s_e * e[i];
  std::vector<std::vector<double>> reps;
  for (size_t r = 0; r < replicates; ++r) {
    std::vector<double> x = fixed;
    for (double& v : x) v += s_c * c[r];
    reps.push_back(std::move(x));
  }
  const Interval without = PairedBootstrapCI(fixed, ref, 4000, 0.95, 4);
  const Interval with = CalibratedBootstrapCI(reps, ref, 4000, 0.95, 4);
  const double width_e = 2 * z * s_e / std::sqrt(double(n));
  const double width = 2 * z * std::sqrt(s_e * s_e / n + s_c * s_c);
  EXPECT_NEAR(without.high - without.low, width_e, 0.1 * width_e);
  EXPECT_NEAR(with.high - with.low, width, 0.1 * width);
  EXPECT_GT(with.high - with.low, 1.8 * (without.high - without.low));
}

// A circular block resample of n indices: n of them, in runs of
// consecutive indices that wrap from n - 1 to 0, the same from the same
// seed; a block as long as the series is a rotation of it.
TEST(StatisticsTest, BlockResampleIndices) {
  const std::vector<int64_t> a = BlockResampleIndices(10, 3, 5);
  ASSERT_EQ(a.size(), 10u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_GE(a[k], 0);
    EXPECT_LT(a[k], 10);
    if (k % 3 != 0) {
      EXPECT_EQ(a[k], (a[k - 1] + 1) % 10) << k;
    }
  }
  EXPECT_EQ(a, BlockResampleIndices(10, 3, 5));
  EXPECT_NE(a, BlockResampleIndices(10, 3, 6));
  for (uint64_t seed = 1; seed < 20; ++seed) {
    const std::vector<int64_t> r = BlockResampleIndices(4, 9, seed);
    ASSERT_EQ(r.size(), 4u);
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(r[k], (r[0] + int64_t(k)) % 4);
  }
  // Some draw wraps: blocks really start anywhere in [0, n - 1].
  bool wrapped = false;
  for (uint64_t seed = 1; seed < 50 && !wrapped; ++seed) {
    const std::vector<int64_t> r = BlockResampleIndices(10, 3, seed);
    for (size_t k = 1; k < r.size(); ++k) wrapped = wrapped || (k % 3 != 0 && r[k] == 0);
  }
  EXPECT_TRUE(wrapped);
}

TEST(StatisticsTest, HolmAdjustment) {
  // Sorted 0.01, 0.02, 0.04, 0.3 (m = 4): 0.04, 0.06, 0.08, 0.3; in input order.
  const std::vector<double> adj = HolmAdjust({0.3, 0.01, 0.04, 0.02});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_NEAR(adj[0], 0.3, 1e-12);
  EXPECT_NEAR(adj[1], 0.04, 1e-12);
  EXPECT_NEAR(adj[2], 0.08, 1e-12);
  EXPECT_NEAR(adj[3], 0.06, 1e-12);
  // Monotone: a later p never gets a smaller adjustment; capped at 1.
  const std::vector<double> mono = HolmAdjust({0.02, 0.021, 0.9});
  EXPECT_NEAR(mono[0], 0.06, 1e-12);
  EXPECT_NEAR(mono[1], 0.06, 1e-12);  // max(0.06, 2 * 0.021)
  EXPECT_NEAR(mono[2], 0.9, 1e-12);
}

TEST(StatisticsTest, BootstrapPValue) {
  // Every resample mean is 0.5 > 0: p = 2 (0 + 1) / (R + 1).
  EXPECT_NEAR(PairedBootstrapTest({1.5, 2.5}, {1.0, 2.0}, 99, 0.95, 1, 1).p_value, 0.02, 1e-12);
  // Symmetric noise around 0: p is large.
  EXPECT_GT(PairedBootstrapTest({1, -1, 1, -1, 2, -2}, {0, 0, 0, 0, 0, 0}, 999, 0.95, 1, 1).p_value,
            0.5);
  // 0 counts on both sides: 2 means <= 0 of 9, so p = 2 (2 + 1) / 10.
  EXPECT_NEAR(BootstrapPValue({-1, 0, 1, 2, 3, 4, 5, 6, 7}), 0.6, 1e-12);
}

// Tabulated two-sided 95% t quantiles.
TEST(StatisticsTest, StudentTQuantileAndTheAcrossModelsInterval) {
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.706204736, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 2), 4.302652730, 1e-7);
  EXPECT_NEAR(StudentTQuantile(0.975, 10), 2.228138852, 1e-7);
  EXPECT_NEAR(StudentTQuantile(0.95, 30), 1.697260887, 1e-7);
  EXPECT_NEAR(StudentTQuantile(0.025, 2), -4.302652730, 1e-7);
  const Summary s = Summarize({1.39, 1.5, 1.61});
  const std::optional<Interval> ci = MeanTInterval(s, 0.95);
  ASSERT_TRUE(ci.has_value());
  EXPECT_NEAR(ci->low, 1.5 - 4.302652730 * 0.11 / std::sqrt(3.0), 1e-7);
  EXPECT_NEAR(ci->high, 1.5 + 4.302652730 * 0.11 / std::sqrt(3.0), 1e-7);
  EXPECT_FALSE(MeanTInterval(Summarize({1.0}), 0.95).has_value());
}

// fca.md "Execution": slowdown = exp(mean log(t_model / t_twin)) - 1.
TEST(StatisticsTest, PairedSlowdownOfAConstantRatioIsThatRatio) {
  const std::vector<double> twin = {10, 20, 15, 40};  // the machine's speed drifts
  std::vector<double> model;
  for (double t : twin) model.push_back(1.25 * t);
  const SlowdownEstimate e = PairedSlowdown(model, twin, 0.95);
  EXPECT_NEAR(e.slowdown, 0.25, 1e-12);
  EXPECT_NEAR(e.ci.low, 0.25, 1e-12);
  EXPECT_NEAR(e.ci.high, 0.25, 1e-12);
  EXPECT_EQ(e.verdict, 1);
  EXPECT_EQ(e.pairs, 4);
  // The other way round: faster by 1 - 1/1.25 = 20%.
  const SlowdownEstimate f = PairedSlowdown(twin, model, 0.95);
  EXPECT_NEAR(f.slowdown, -0.2, 1e-12);
  EXPECT_EQ(f.verdict, -1);
}

TEST(StatisticsTest, PairedSlowdownIsTheGeometricMeanOfPairRatios) {
  // Ratios 2 and 1/2: the geometric mean is 1 and the CI spans 0. The log
  // ratios +-ln 2 have sd ln(2) sqrt(2): the t-interval (1 degree of
  // freedom, t = 12.7062047) is 0 +- 12.7062047 ln 2.
  const double t1 = 12.706204736;
  const SlowdownEstimate e = PairedSlowdown({2, 1}, {1, 2}, 0.95);
  EXPECT_NEAR(e.slowdown, 0.0, 1e-12);
  EXPECT_NEAR(e.ci.low, std::expm1(-t1 * std::log(2.0)), 1e-9);
  EXPECT_NEAR(e.ci.high, std::expm1(t1 * std::log(2.0)), 1e-3);
  EXPECT_EQ(e.verdict, 0);
  // Ratios 1.1 and 1.21: geometric mean 1.1^1.5; log sd ln(1.1) / sqrt(2),
  // so the interval is 1.5 ln 1.1 +- t1 ln(1.1) / 2 and contains 0: two
  // pairs cannot tell.
  const SlowdownEstimate g = PairedSlowdown({1.1, 12.1}, {1, 10}, 0.95);
  EXPECT_NEAR(g.slowdown, std::pow(1.1, 1.5) - 1, 1e-12);
  EXPECT_NEAR(g.ci.low, std::expm1((1.5 - t1 / 2) * std::log(1.1)), 1e-9);
  EXPECT_NEAR(g.ci.high, std::expm1((1.5 + t1 / 2) * std::log(1.1)), 1e-9);
  EXPECT_EQ(g.verdict, 0);
  // One pair: no interval, no verdict.
  const SlowdownEstimate one = PairedSlowdown({2}, {1}, 0.95);
  EXPECT_NEAR(one.slowdown, 1.0, 1e-12);
  EXPECT_EQ(one.verdict, 0);
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
  const SlowdownEstimate e = PairedSlowdown(model, twin, 0.95);
  EXPECT_LT(e.ci.low, 0.05);
  EXPECT_GT(e.ci.high, 0.05);
  EXPECT_LT(e.half_width(), 0.01);  // pairing removes the drift
  EXPECT_EQ(e.verdict, 1);
}

}  // namespace
}  // namespace fca::engine
