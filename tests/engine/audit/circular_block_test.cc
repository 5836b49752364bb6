// Issue 38: the circular block bootstrap, and the decisions taken on its
// resamples (fca.md "Correlated windows and many penalties").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/random.h"
#include "server/engine/audit/statistics.h"
#include "tests/engine/audit/series_testing.h"

namespace fca::engine {
namespace {

// The moving-block bootstrap the audit used before issue 38, kept here to
// show what the circular one fixes: blocks start uniformly in [0, n - L]
// only, so the first and last L - 1 windows lie in fewer blocks.
std::vector<int64_t> MovingBlockResample(int64_t n, int64_t l, Rng* rng) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    const int64_t start = static_cast<int64_t>(rng->Uniform(n - l + 1));
    for (int64_t j = 0; j < l && static_cast<int64_t>(out.size()) < n; ++j) {
      out.push_back(start + j);
    }
  }
  return out;
}

std::vector<double> MovingBlockMeans(const std::vector<double>& x, int resamples, uint64_t seed,
                                     int64_t l) {
  Rng rng(seed);
  std::vector<double> means;
  for (int r = 0; r < resamples; ++r) {
    double s = 0;
    for (int64_t i : MovingBlockResample(x.size(), l, &rng)) s += x[i];
    means.push_back(s / x.size());
  }
  return means;
}

struct Design {
  size_t n;
  int64_t l;
};
// The reviewer's two cases: a tiny audit, and 191 windows with
// L = round(191^(1/3)) = 6.
constexpr Design kSmall{8, 2}, kLarge{191, 6};

// Every window lies in exactly L of the n circular blocks, so each is
// drawn once per resample in expectation; a moving block draws window 0
// only from the block starting at 0, (n / L) / (n - L + 1) times per
// resample (4/7 at n = 8, L = 2).
TEST(StatisticsTest, CircularBlocksDrawEveryWindowEquallyOften) {
  for (const Design d : {kSmall, kLarge}) {
    SCOPED_TRACE(d.n);
    const int resamples = 20000;
    std::vector<double> circular(d.n, 0), moving(d.n, 0);
    Rng a(3), b(3);
    for (int r = 0; r < resamples; ++r) {
      for (int64_t i : CircularBlockResample(d.n, d.l, &a)) circular[i] += 1.0 / resamples;
      for (int64_t i : MovingBlockResample(d.n, d.l, &b)) moving[i] += 1.0 / resamples;
    }
    // A count per resample has sd below sqrt(L): 20000 resamples put its
    // mean within 4 sqrt(L / 20000) of 1 (4 standard errors).
    const double tolerance = 4 * std::sqrt(double(d.l) / resamples);
    for (size_t i = 0; i < d.n; ++i) EXPECT_NEAR(circular[i], 1.0, tolerance) << i;
    const double blocks = double(d.n) / d.l;
    EXPECT_NEAR(moving[0], blocks / (d.n - d.l + 1), tolerance);
    EXPECT_LT(moving[0], 1 - 3 * tolerance);
  }
}

// Centring: the mean over resamples of the circular bootstrap means is
// the sample mean (exactly in expectation: every window has weight 1/N).
// Measured in units of the bootstrap sd over 20 AR(1) series (phi = 0.5):
// 20000 resamples put it within 4 / sqrt(20000) = 0.028 sd (4 Monte Carlo
// standard errors). The moving-block bootstrap misses by more than that
// on average, at 8 windows with L = 2 and at 191 with L = 6.
TEST(StatisticsTest, CircularBlockBootstrapIsCentredOnTheSampleMean) {
  for (const Design d : {kSmall, kLarge}) {
    SCOPED_TRACE(d.n);
    const int resamples = 20000, series = 20;
    const double tolerance = 4 / std::sqrt(double(resamples));
    Rng rng(31);
    double circular_worst = 0, moving_average = 0;
    for (int k = 0; k < series; ++k) {
      const std::vector<double> x = Ar1(&rng, d.n, 0.5);
      const std::vector<double> circular = BlockBootstrapMeans(x, resamples, 100 + k, d.l);
      const std::vector<double> moving = MovingBlockMeans(x, resamples, 100 + k, d.l);
      const double sd = std::sqrt(Variance(circular));
      circular_worst = std::max(circular_worst, std::fabs(Mean(circular) - Mean(x)) / sd);
      moving_average += std::fabs(Mean(moving) - Mean(x)) / sd / series;
    }
    EXPECT_LT(circular_worst, tolerance);
    EXPECT_GT(moving_average, tolerance);
  }
}

// The share of 95% percentile CIs of the mean that contain the true mean
// 0, over `series` seeded AR(1) series (phi = 0.5), with the circular
// (true) or the moving-block (false) bootstrap.
double Coverage(const Design& d, bool circular, int series, int resamples) {
  Rng rng(77);
  int covered = 0;
  for (int k = 0; k < series; ++k) {
    const std::vector<double> x = Ar1(&rng, d.n, 0.5);
    const std::vector<double> means = circular ? BlockBootstrapMeans(x, resamples, 500 + k, d.l)
                                               : MovingBlockMeans(x, resamples, 500 + k, d.l);
    const Interval ci = PercentileInterval(means, 0.95);
    covered += ci.low <= 0 && 0 <= ci.high;
  }
  return double(covered) / series;
}

// Coverage of the circular block 95% CI over 2000 seeded AR(1) series
// (phi = 0.5, true mean 0; Monte Carlo standard error about 0.007).
// N = 191, L = 6: the block variance sum_{|k| < L} (1 - |k| / L) gamma(k)
// = 3.125 misses n Var(mean) = 3.97 (the correlation beyond the block), so
// its sd is 0.887 of the true one and a normal interval would cover
// 2 Phi(1.96 * 0.887) - 1 = 0.918; the noise of the variance estimate
// lowers that further (measured: 0.8965). Near nominal: assert [0.87,
// 0.95]. N = 8, L = 2: four blocks carry almost no information about the
// variance and the interval undercovers badly (measured: 0.629); assert
// what it is, [0.55, 0.75], and that it is no worse than the moving-block
// interval on the same series (0.6215) beyond noise.
TEST(StatisticsTest, CircularBlockCICoverageOnAR1) {
  const int series = 2000, resamples = 500;
  const double large = Coverage(kLarge, true, series, resamples);
  const double small = Coverage(kSmall, true, series, resamples);
  const double small_moving = Coverage(kSmall, false, series, resamples);
  std::cout << "95% CI coverage: N = 191, L = 6: " << large << "; N = 8, L = 2: " << small
            << " (moving blocks: " << small_moving << ")\n";
  EXPECT_GE(large, 0.87);
  EXPECT_LE(large, 0.95);
  EXPECT_GE(small, 0.55);
  EXPECT_LE(small, 0.75);
  EXPECT_GE(small, small_moving - 0.01);
}

// fca.md "Correlated windows": Holm's p and the block CI come from the
// same resample means. On a correlated series shifted across 0, the p-value
// is BootstrapPValue of exactly the means the CI's quantiles are taken
// from, and p < 1 - level agrees with "the CI excludes 0" wherever the
// count of means on the far side of 0 is more than 2 from (1 - level) R /
// 2 (at R = 999, level 0.95: the counts 23 to 27 are the boundary).
TEST(StatisticsTest, BlockPValueAndBlockCIReadTheSameResamples) {
  const int resamples = 999;
  const double level = 0.95;
  const int64_t l = 4;
  Rng rng(41);
  const std::vector<double> x = Ar1(&rng, 64, 0.5), zero(64, 0.0);
  int excluded = 0, included = 0;
  for (int step = -20; step <= 20; ++step) {
    std::vector<double> treated = x;
    for (double& v : treated) v += 0.05 * step - Mean(x);
    const BootstrapTest t = PairedBootstrapTest(treated, zero, resamples, level, 7, l);
    const Interval ci = PairedBootstrapCI(treated, zero, resamples, level, 7, l);
    EXPECT_EQ(t.ci.low, ci.low);
    EXPECT_EQ(t.ci.high, ci.high);
    const std::vector<double> means = BlockBootstrapMeans(treated, resamples, 7, l);
    EXPECT_EQ(t.p_value, BootstrapPValue(means));
    int64_t at_most = 0, at_least = 0;
    for (double m : means) {
      at_most += m <= 0;
      at_least += m >= 0;
    }
    const double far = double(std::min(at_most, at_least));
    const bool outside = ci.low > 0 || ci.high < 0;
    if (std::fabs(far - (1 - level) / 2 * resamples) > 2) {
      EXPECT_EQ(t.p_value < 1 - level, outside) << step;
    }
    (outside ? excluded : included) += 1;
  }
  // The shifts reach both decisions.
  EXPECT_GT(excluded, 5);
  EXPECT_GT(included, 5);
}

// Retention on the block resamples (fca.md "Gap retention"): the gap's CI
// is the baseline's block CI (same seed, same L), and R's resamples are
// circular blocks of the same L: the dropped count is recomputed here from
// BlockBootstrapMeans of the gap with R's seed.
TEST(StatisticsTest, RetentionResamplesWindowsInCircularBlocks) {
  Rng rng(12);
  const std::vector<double> noise = Ar1(&rng, 60, 0.5);
  std::vector<double> g, p, c, gap;
  for (size_t i = 0; i < noise.size(); ++i) {
    c.push_back(3.0);
    g.push_back(3.0 + 0.15 + 0.3 * noise[i]);
    p.push_back(3.0 + 0.05);
    gap.push_back(g.back() - c.back());
  }
  RetentionPlan plan;
  plan.resamples = 400;
  plan.level = 0.5;
  plan.gap_seed = 3;
  plan.retention_seed = 4;
  plan.block_length = 5;
  const RetentionEstimate e = EstimateRetention(g, p, c, plan);
  const Interval gap_ci = PairedBootstrapCI(g, c, 400, 0.5, plan.gap_seed, 5);
  EXPECT_EQ(e.gap_ci.low, gap_ci.low);
  EXPECT_EQ(e.gap_ci.high, gap_ci.high);
  ASSERT_TRUE(e.value.has_value());
  int64_t dropped = 0;
  for (double m : BlockBootstrapMeans(gap, 400, plan.retention_seed, 5)) {
    dropped += !(m >= plan.min_gap);
  }
  EXPECT_EQ(e.dropped_resamples, dropped);
  EXPECT_GT(dropped, 0);
}

// Additivity (fca.md "Per-group dependence"): per-window differences d_g
// = c_g d_I with sum_g c_g = 0.8 give the ratio 0.8 in every resample, so
// the CI is [0.8, 0.8]. With independent noise e_g of sd 0.05 added to
// each group, resample b's ratio is 0.8 + mean_b(sum_g e_g) / mean_b(d_I):
// about 0.8 give or take s = 0.05 sqrt(3) / sqrt(n) / 0.5, and its 95% CI
// about 2 * 1.96 s wide.
TEST(StatisticsTest, AdditivityCIOfGroupsThatAddUpToAKnownShare) {
  const size_t n = 120;
  const int resamples = 1000;
  const uint64_t seed = 9;
  const int64_t l = 5;
  Rng rng(13);
  const std::vector<double> correct = Normals(&rng, n), noise = Ar1(&rng, n, 0.5);
  std::vector<double> joint(n), d_joint(n);
  for (size_t i = 0; i < n; ++i) {
    d_joint[i] = 0.5 + 0.3 * noise[i];
    joint[i] = correct[i] + d_joint[i];
  }
  const std::vector<double> shares = {0.5, 0.2, 0.1};
  std::vector<std::vector<double>> exact, noisy;
  for (double share : shares) {
    const std::vector<double> e = Normals(&rng, n);
    std::vector<double> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = correct[i] + share * d_joint[i];
      b[i] = a[i] + 0.05 * e[i];
    }
    exact.push_back(a);
    noisy.push_back(b);
  }
  const AdditivityEstimate x = EstimateAdditivity(exact, joint, correct, resamples, 0.95, seed, l);
  const Interval joint_ci = PairedBootstrapCI(joint, correct, resamples, 0.95, seed, l);
  EXPECT_EQ(x.joint_ci.low, joint_ci.low);  // the joint penalty's block CI
  EXPECT_EQ(x.joint_ci.high, joint_ci.high);
  ASSERT_GT(joint_ci.low, 0);
  ASSERT_TRUE(x.ratio.has_value());
  ASSERT_TRUE(x.ci.has_value());
  EXPECT_NEAR(*x.ratio, 0.8, 1e-9);
  EXPECT_NEAR(x.ci->low, 0.8, 1e-9);
  EXPECT_NEAR(x.ci->high, 0.8, 1e-9);
  EXPECT_EQ(x.dropped_resamples, 0);

  const AdditivityEstimate y = EstimateAdditivity(noisy, joint, correct, resamples, 0.95, seed, l);
  double sum = 0;
  for (const std::vector<double>& b : noisy) sum += Mean(b) - Mean(correct);
  ASSERT_TRUE(y.ratio.has_value());
  ASSERT_TRUE(y.ci.has_value());
  EXPECT_NEAR(y.penalty_sum, sum, 1e-12);
  EXPECT_NEAR(*y.ratio, sum / (Mean(joint) - Mean(correct)), 1e-12);
  const double se = 0.05 * std::sqrt(3.0) / std::sqrt(double(n)) / 0.5;
  EXPECT_NEAR(*y.ratio, 0.8, 3 * se);
  EXPECT_LT(y.ci->low, *y.ratio);
  EXPECT_GT(y.ci->high, *y.ratio);
  EXPECT_NEAR(y.ci->high - y.ci->low, 2 * 1.96 * se, 0.3 * 2 * 1.96 * se);
}

// No ratio where the joint penalty's block CI reaches 0; resamples with a
// joint mean <= 0 are dropped and counted, and with more than 5% dropped
// the CI is undefined while the ratio stays defined.
TEST(StatisticsTest, AdditivityIsUndefinedWithoutAJointPenalty) {
  const size_t n = 40;
  Rng rng(5);
  const std::vector<double> noise = Ar1(&rng, n, 0.5);
  // Joint penalty 0.08 exactly, under correlated noise of long-run sd 0.6
  // per window (0.095 on the mean): its 95% CI reaches below 0.
  std::vector<double> correct(n, 3.0), joint(n), half(n);
  for (size_t i = 0; i < n; ++i) {
    joint[i] = 3.0 + 0.08 + 0.3 * (noise[i] - Mean(noise));
    half[i] = 3.0 + 0.5 * (joint[i] - 3.0);
  }
  const AdditivityEstimate x = EstimateAdditivity({half}, joint, correct, 400, 0.95, 3, 3);
  EXPECT_LT(x.joint_ci.low, 0);
  EXPECT_FALSE(x.ratio.has_value());
  EXPECT_FALSE(x.ci.has_value());
  EXPECT_NEAR(x.penalty_sum, 0.04, 1e-12);
  // At level 0.5 the joint CI lies above 0 while many resamples do not.
  const AdditivityEstimate y = EstimateAdditivity({half}, joint, correct, 400, 0.5, 3, 3);
  ASSERT_GT(y.joint_ci.low, 0);
  ASSERT_TRUE(y.ratio.has_value());
  EXPECT_NEAR(*y.ratio, 0.5, 1e-9);
  int64_t dropped = 0;
  std::vector<double> d_joint;
  for (double v : joint) d_joint.push_back(v - 3.0);
  for (double m : BlockBootstrapMeans(d_joint, 400, 3, 3)) dropped += !(m > 0);
  EXPECT_EQ(y.dropped_resamples, dropped);
  EXPECT_GT(dropped, 400 / 20);
  EXPECT_FALSE(y.ci.has_value());
}

}  // namespace
}  // namespace fca::engine
