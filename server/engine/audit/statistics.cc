#include "server/engine/audit/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/random.h"

namespace fca::engine {
namespace {

// Quantile with linear interpolation between order statistics (type 7).
double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
}

}  // namespace

double Mean(const std::vector<double>& x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double v : x) s += v;
  return s / x.size();
}

double Median(std::vector<double> x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

namespace {

// The block bootstrap of BlockBootstrapMeans over series[r % series.size()]
// for resample r: one stream of block starts whatever the series, so one
// series gives BlockBootstrapMeans's means exactly. Every series has x's
// length.
std::vector<double> BlockMeansOver(const std::vector<std::vector<double>>& series, int resamples,
                                   uint64_t seed, int64_t block_length) {
  const size_t n = series[0].size();
  const size_t l = static_cast<size_t>(std::clamp<int64_t>(block_length, 1, n));
  const size_t starts = n - l + 1;
  Rng rng(seed);
  std::vector<double> means(resamples);
  for (int r = 0; r < resamples; ++r) {
    const std::vector<double>& x = series[r % series.size()];
    double s = 0;
    for (size_t k = 0; k < n;) {
      const size_t start = rng.Uniform(starts);
      for (size_t j = 0; j < l && k < n; ++j, ++k) s += x[start + j];
    }
    means[r] = s / n;
  }
  return means;
}

}  // namespace

std::vector<double> BlockBootstrapMeans(const std::vector<double>& x, int resamples, uint64_t seed,
                                        int64_t block_length) {
  return BlockMeansOver({x}, resamples, seed, block_length);
}

std::vector<int64_t> BlockResampleIndices(int64_t n, int64_t block_length, uint64_t seed) {
  const int64_t l = std::clamp<int64_t>(block_length, 1, n);
  Rng rng(seed);
  std::vector<int64_t> out;
  out.reserve(n);
  while (static_cast<int64_t>(out.size()) < n) {
    const int64_t start = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(n - l + 1)));
    for (int64_t j = 0; j < l && static_cast<int64_t>(out.size()) < n; ++j) {
      out.push_back(start + j);
    }
  }
  return out;
}

int64_t AutoBlockLength(int64_t n) {
  return std::max<int64_t>(1, std::llround(std::cbrt(static_cast<double>(n))));
}

std::optional<double> Lag1Autocorrelation(const std::vector<double>& x) {
  if (x.size() < 3) return std::nullopt;
  const double m = Mean(x);
  double num = 0, den = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    den += (x[t] - m) * (x[t] - m);
    if (t + 1 < x.size()) num += (x[t] - m) * (x[t + 1] - m);
  }
  if (!(den > 0)) return std::nullopt;
  return num / den;
}

namespace {

std::vector<double> Differences(const std::vector<double>& treated,
                                const std::vector<double>& reference) {
  std::vector<double> diff(treated.size());
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = treated[i] - reference[i];
  return diff;
}

}  // namespace

Interval PairedBootstrapCI(const std::vector<double>& treated, const std::vector<double>& reference,
                           int resamples, double level, uint64_t seed, int64_t block_length) {
  std::vector<double> means =
      BlockBootstrapMeans(Differences(treated, reference), resamples, seed, block_length);
  std::sort(means.begin(), means.end());
  return {Quantile(means, (1 - level) / 2), Quantile(means, (1 + level) / 2)};
}

Interval CalibratedBootstrapCI(const std::vector<std::vector<double>>& replicates,
                               const std::vector<double>& reference, int resamples, double level,
                               uint64_t seed, int64_t block_length) {
  std::vector<std::vector<double>> diffs;
  for (const std::vector<double>& t : replicates) diffs.push_back(Differences(t, reference));
  std::vector<double> means = BlockMeansOver(diffs, resamples, seed, block_length);
  std::sort(means.begin(), means.end());
  return {Quantile(means, (1 - level) / 2), Quantile(means, (1 + level) / 2)};
}

double BootstrapPValue(const std::vector<double>& treated, const std::vector<double>& reference,
                       int resamples, uint64_t seed, int64_t block_length) {
  const std::vector<double> means =
      BlockBootstrapMeans(Differences(treated, reference), resamples, seed, block_length);
  int64_t at_most = 0, at_least = 0;
  for (double m : means) {
    at_most += m <= 0;
    at_least += m >= 0;
  }
  return std::min(1.0, 2.0 * (std::min(at_most, at_least) + 1) / (resamples + 1.0));
}

std::vector<double> HolmAdjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  for (size_t i = 0; i < m; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(m);
  double running = 0;
  for (size_t j = 0; j < m; ++j) {
    running = std::max(running, std::min(1.0, double(m - j) * p[order[j]]));
    out[order[j]] = running;
  }
  return out;
}

namespace {

// Continued fraction of the regularized incomplete beta (modified Lentz).
double BetaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1 + m2) * (a + m2));
    for (int step = 0; step < 2; ++step) {
      d = 1 + aa * d;
      if (std::fabs(d) < kTiny) d = kTiny;
      c = 1 + aa / c;
      if (std::fabs(c) < kTiny) c = kTiny;
      d = 1 / d;
      h *= d * c;
      aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2));
    }
    if (std::fabs(d * c - 1) < 1e-15) break;
  }
  return h;
}

// I_x(a, b).
double RegularizedBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * BetaContinuedFraction(a, b, x) / a;
  return 1 - front * BetaContinuedFraction(b, a, 1 - x) / b;
}

double StudentTCdf(double t, double df) {
  const double tail = 0.5 * RegularizedBeta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

}  // namespace

double StudentTQuantile(double q, double df) {
  if (q == 0.5) return 0;
  if (q < 0.5) return -StudentTQuantile(1 - q, df);
  double lo = 0, hi = 1;
  while (StudentTCdf(hi, df) < q) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (StudentTCdf(mid, df) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

SlowdownEstimate PairedSlowdown(const std::vector<double>& model, const std::vector<double>& twin,
                                double level) {
  // A ratio is a difference of logs.
  std::vector<double> log_ratio(model.size());
  for (size_t i = 0; i < model.size(); ++i) log_ratio[i] = std::log(model[i]) - std::log(twin[i]);
  const Summary s = Summarize(log_ratio);
  const Interval log_ci = MeanTInterval(s, level).value_or(Interval{s.mean, s.mean});
  SlowdownEstimate e;
  e.slowdown = std::expm1(s.mean);
  e.ci = {std::expm1(log_ci.low), std::expm1(log_ci.high)};
  e.verdict = s.n < 2 ? 0 : e.ci.low > 0 ? 1 : e.ci.high < 0 ? -1 : 0;
  e.pairs = s.n;
  return e;
}

std::optional<double> GapRetentionPercent(double nll_baseline, double nll_profile,
                                          double nll_correct, double min_gap) {
  const double gap = nll_baseline - nll_correct;
  if (!(gap >= min_gap)) return std::nullopt;
  return 100.0 * (nll_baseline - nll_profile) / gap;
}

RetentionEstimate EstimateRetention(const std::vector<double>& nll_baseline,
                                    const std::vector<double>& nll_profile,
                                    const std::vector<double>& nll_correct,
                                    const RetentionPlan& plan) {
  RetentionEstimate out;
  out.gap = Mean(nll_baseline) - Mean(nll_correct);
  out.gap_ci =
      PairedBootstrapCI(nll_baseline, nll_correct, plan.resamples, plan.level, plan.gap_seed);
  if (!(out.gap_ci.low > 0)) return out;
  out.value =
      GapRetentionPercent(Mean(nll_baseline), Mean(nll_profile), Mean(nll_correct), plan.min_gap);
  if (!out.value) return out;
  const size_t n = nll_correct.size();
  Rng rng(plan.retention_seed);
  std::vector<double> values;
  for (int r = 0; r < plan.resamples; ++r) {
    double g = 0, p = 0, c = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = rng.Uniform(n);
      g += nll_baseline[i];
      p += nll_profile[i];
      c += nll_correct[i];
    }
    std::optional<double> v = GapRetentionPercent(g / n, p / n, c / n, plan.min_gap);
    if (v) {
      values.push_back(*v);
    } else {
      ++out.dropped_resamples;
    }
  }
  if (values.empty() || values.size() < 0.95 * plan.resamples) return out;
  std::sort(values.begin(), values.end());
  out.ci = Interval{Quantile(values, (1 - plan.level) / 2), Quantile(values, (1 + plan.level) / 2)};
  return out;
}

Summary Summarize(const std::vector<double>& x) {
  Summary s;
  s.n = static_cast<int64_t>(x.size());
  if (x.empty()) return s;
  s.mean = Mean(x);
  s.min = *std::min_element(x.begin(), x.end());
  s.max = *std::max_element(x.begin(), x.end());
  if (x.size() > 1) {
    double ss = 0;
    for (double v : x) ss += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(ss / (x.size() - 1));
  }
  return s;
}

}  // namespace fca::engine

namespace fca::engine {

std::optional<Interval> MeanTInterval(const Summary& s, double level) {
  if (s.n < 2) return std::nullopt;
  const double half =
      StudentTQuantile((1 + level) / 2, double(s.n - 1)) * s.sd / std::sqrt(double(s.n));
  return Interval{s.mean - half, s.mean + half};
}

}  // namespace fca::engine
