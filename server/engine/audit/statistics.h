// Scalar statistics of an audit (fca.md "Metrics"). Torch-free.
#ifndef FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_
#define FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/random.h"

namespace fca::engine {

double Mean(const std::vector<double>& x);
// Median (mean of the two middle values for an even count); NaN when empty.
double Median(std::vector<double> x);

struct Interval {
  double low = 0;
  double high = 0;
};

// Percentile bootstrap CI of mean(treated - reference) over paired units
// (sequences): `resamples` draws of n units with replacement, seeded; the CI
// is the (1-level)/2 and (1+level)/2 quantiles (linear interpolation).
// Requires treated.size() == reference.size() >= 1 and resamples >= 1.
// `block_length` > 1: the circular block bootstrap (BlockBootstrapMeans).
Interval PairedBootstrapCI(const std::vector<double>& treated, const std::vector<double>& reference,
                           int resamples, double level, uint64_t seed, int64_t block_length = 1);

// The (1-level)/2 and (1+level)/2 quantiles of `values` (type 7, linear
// interpolation between order statistics). Requires values non-empty.
Interval PercentileInterval(std::vector<double> values, double level);

// One circular block bootstrap resample of n units (Politis-Romano 1992;
// fca.md "Correlated windows") drawn from `rng`: blocks of `block_length`
// consecutive indices, each starting uniformly in [0, n - 1] and wrapping
// (index (start + j) mod n), until n are drawn (the last block cut short).
// Every unit is drawn once per resample in expectation, the edges included.
// block_length 1 draws n indices uniformly, one Uniform(n) each: the i.i.d.
// bootstrap. Requires n >= 1; block_length is clamped to [1, n].
std::vector<int64_t> CircularBlockResample(int64_t n, int64_t block_length, Rng* rng);

// The means of several equally long vectors over the same `resamples`
// circular block resamples, drawn one after another from one generator
// seeded `seed`: means[r][k] is the mean of *series[k] over resample r. The
// one stream that every CI, p-value, retention and additivity interval of
// a model reads, so that they cannot drift apart. Requires a non-empty
// series list of equal, non-zero lengths.
std::vector<std::vector<double>> BlockBootstrapMeansOf(
    const std::vector<const std::vector<double>*>& series, int resamples, uint64_t seed,
    int64_t block_length);

// The means of `resamples` circular block bootstrap resamples of x
// (BlockBootstrapMeansOf of x alone). block_length 1 is the i.i.d.
// bootstrap, drawing the same indices from the same seed.
std::vector<double> BlockBootstrapMeans(const std::vector<double>& x, int resamples, uint64_t seed,
                                        int64_t block_length);

// The indices of one circular block resample of n units from a generator
// seeded `seed` (the calibration windows' resampling, fca.md "Calibration
// uncertainty"). Requires n >= 1; block_length is clamped to [1, n].
std::vector<int64_t> BlockResampleIndices(int64_t n, int64_t block_length, uint64_t seed);

// The penalty's CI with calibration uncertainty (fca.md "Calibration
// uncertainty"): replicates[r] are the per-window NLLs on E of a profile
// re-estimated on calibration resample r; bootstrap resample b draws the
// evaluation windows as PairedBootstrapCI does (the same seed draws the
// same blocks) and averages treated - reference of replicate b mod R. With
// every replicate equal to one vector it is that vector's
// PairedBootstrapCI; the spread between replicates widens it. Requires R
// >= 1 replicates of reference's length.
Interval CalibratedBootstrapCI(const std::vector<std::vector<double>>& replicates,
                               const std::vector<double>& reference, int resamples, double level,
                               uint64_t seed, int64_t block_length = 1);

// The block length the audit uses for n windows when none is given:
// round(n^(1/3)), at least 1 (the rate-optimal order for the variance of a
// mean; fca.md "Correlated windows").
int64_t AutoBlockLength(int64_t n);

// Lag-1 autocorrelation of x in window order: sum_t (x_t - m)(x_{t+1} - m)
// / sum_t (x_t - m)^2; nullopt for fewer than 3 values or zero variance.
std::optional<double> Lag1Autocorrelation(const std::vector<double>& x);

// The bootstrap p-value of "mean = 0" from resample means m_r:
// min(1, 2 (min(#{m_r <= 0}, #{m_r >= 0}) + 1) / (R + 1)).
double BootstrapPValue(const std::vector<double>& means);

// A paired penalty's CI and its p-value from the same resample means
// (PairedBootstrapCI's), so the test and the interval read one set of
// resamples: p < 1 - level and "the CI excludes 0" agree except when the
// count of means on the far side of 0 is within 2 of (1 - level) R / 2
// (the p-value's +1 and the quantile's interpolation).
struct BootstrapTest {
  Interval ci;
  double p_value = 1;
};
BootstrapTest PairedBootstrapTest(const std::vector<double>& treated,
                                  const std::vector<double>& reference, int resamples, double level,
                                  uint64_t seed, int64_t block_length);

// Holm's step-down adjustment of p-values (family-wise error): with p
// sorted ascending, p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j)), in the
// input's order.
std::vector<double> HolmAdjust(const std::vector<double>& p);

// Student t quantile: P(T_df <= t) = q, df >= 1, q in (0, 1).
double StudentTQuantile(double q, double df);

// The slowdown of a model against its dense twin from paired timings
// (fca.md "Execution"): model[i] and twin[i] are the times of pair i, run
// back to back. slowdown = exp(mean_i log(model[i] / twin[i])) - 1, the
// geometric mean of the per-pair ratios minus 1; the CI is the Student t
// interval of the mean log ratio, mean +- t_{(1+level)/2, n-1} sd / sqrt(n)
// (exact for normal log ratios at a number of pairs fixed in advance),
// mapped through exp(.) - 1. verdict: +1 when the CI lies above 0 (slower),
// -1 below 0 (faster), 0 when it contains 0 (no detectable difference) or
// with a single pair (no interval: the CI is the point).
// Requires model.size() == twin.size() >= 1, every time > 0.
struct SlowdownEstimate {
  double slowdown = 0;
  Interval ci;
  int verdict = 0;
  int64_t pairs = 0;
  double half_width() const { return 0.5 * (ci.high - ci.low); }
};
SlowdownEstimate PairedSlowdown(const std::vector<double>& model, const std::vector<double>& twin,
                                double level);

// R(P) = (NLL(B) - NLL(P)) / (NLL(B) - NLL(correct)) in percent, B the
// baseline; nullopt (undefined) when the gap NLL(B) - NLL(correct) is below
// min_gap (not positive).
std::optional<double> GapRetentionPercent(double nll_baseline, double nll_profile,
                                          double nll_correct, double min_gap);

// How retention is estimated (fca.md "Gap retention").
struct RetentionPlan {
  int resamples = 1000;
  double level = 0.95;
  uint64_t gap_seed = 0;        // the gap's CI: the baseline's block CI seed
  uint64_t retention_seed = 0;  // R's own bootstrap
  int64_t block_length = 1;     // L of both (1: the i.i.d. bootstrap)
  double min_gap = 1e-5;
};

// R(P) against one baseline, defined only where the gap is: the gap's
// circular block bootstrap CI (resamples of NLL(B) - NLL(correct), seeded
// and blocked as the baseline's penalty_block CI) must lie above 0 and the
// gap be >= min_gap. Then R's percentile bootstrap over windows (the three
// NLL vectors resampled together in circular blocks of the same length): a
// resample whose gap is below min_gap (not positive) has no R and is
// dropped and counted; the CI is undefined when more than 5% are dropped.
struct RetentionEstimate {
  std::optional<double> value;  // percent
  std::optional<Interval> ci;
  double gap = 0;  // NLL(B) - NLL(correct)
  Interval gap_ci;
  int64_t dropped_resamples = 0;
};
RetentionEstimate EstimateRetention(const std::vector<double>& nll_baseline,
                                    const std::vector<double>& nll_profile,
                                    const std::vector<double>& nll_correct,
                                    const RetentionPlan& plan);

// The additivity of an intervention I's per-group replays (fca.md
// "Per-group dependence"): ratio = sum_g penalty(I at g) / penalty(I),
// defined only when I's block CI (`joint_ci`, the same as its
// penalty_block) lies above 0. Its CI is the percentile interval over the
// same circular block resamples of sum_g mean_b(d_g) / mean_b(d_I), d the
// per-window differences against correct; a resample with mean_b(d_I) <= 0
// has no ratio and is dropped and counted, and the CI is undefined when
// more than 5% are dropped.
struct AdditivityEstimate {
  double penalty_sum = 0;  // sum_g mean(d_g)
  std::optional<double> ratio;
  std::optional<Interval> ci;
  Interval joint_ci;
  int64_t dropped_resamples = 0;
};
AdditivityEstimate EstimateAdditivity(const std::vector<std::vector<double>>& nll_groups,
                                      const std::vector<double>& nll_joint,
                                      const std::vector<double>& nll_correct, int resamples,
                                      double level, uint64_t seed, int64_t block_length);

// Mean, sample standard deviation (0 for one value), min and max.
struct Summary {
  double mean = 0, sd = 0, min = 0, max = 0;
  int64_t n = 0;
};
Summary Summarize(const std::vector<double>& x);

// The t-interval of the mean across n >= 2 values (models): mean +- t_{(1 +
// level)/2, n - 1} sd / sqrt(n); nullopt for n < 2.
std::optional<Interval> MeanTInterval(const Summary& s, double level);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_
