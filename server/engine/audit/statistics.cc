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

std::vector<int64_t> CircularBlockResample(int64_t n, int64_t block_length, Rng* rng) {
  const int64_t l = std::clamp<int64_t>(block_length, 1, n);
  std::vector<int64_t> out;
  out.reserve(n);
  while (static_cast<int64_t>(out.size()) < n) {
    // Any start, wrapping past the end: every unit lies in L of the n
    // possible blocks, the edges included, so none is under-drawn.
    const int64_t start = static_cast<int64_t>(rng->Uniform(static_cast<uint64_t>(n)));
    for (int64_t j = 0; j < l && static_cast<int64_t>(out.size()) < n; ++j) {
      out.push_back((start + j) % n);
    }
  }
  return out;
}

namespace {

// Calls visit(r, indices) for each of `resamples` circular block resamples
// of n units, drawn one after another from one generator seeded `seed`.
template <typename Visit>
void ForEachResample(int64_t n, int resamples, uint64_t seed, int64_t block_length, Visit visit) {
  Rng rng(seed);
  for (int r = 0; r < resamples; ++r) visit(r, CircularBlockResample(n, block_length, &rng));
}

double MeanAt(const std::vector<double>& x, const std::vector<int64_t>& indices) {
  double s = 0;
  for (int64_t i : indices) s += x[i];
  return s / indices.size();
}

}  // namespace

std::vector<std::vector<double>> BlockBootstrapMeansOf(
    const std::vector<const std::vector<double>*>& series, int resamples, uint64_t seed,
    int64_t block_length) {
  std::vector<std::vector<double>> means(resamples, std::vector<double>(series.size()));
  ForEachResample(static_cast<int64_t>(series[0]->size()), resamples, seed, block_length,
                  [&](int r, const std::vector<int64_t>& indices) {
                    for (size_t k = 0; k < series.size(); ++k) {
                      means[r][k] = MeanAt(*series[k], indices);
                    }
                  });
  return means;
}

std::vector<double> BlockBootstrapMeans(const std::vector<double>& x, int resamples, uint64_t seed,
                                        int64_t block_length) {
  std::vector<double> out;
  out.reserve(resamples);
  for (const std::vector<double>& m : BlockBootstrapMeansOf({&x}, resamples, seed, block_length)) {
    out.push_back(m[0]);
  }
  return out;
}

std::vector<int64_t> BlockResampleIndices(int64_t n, int64_t block_length, uint64_t seed) {
  Rng rng(seed);
  return CircularBlockResample(n, block_length, &rng);
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

Interval PercentileInterval(std::vector<double> values, double level) {
  std::sort(values.begin(), values.end());
  return {Quantile(values, (1 - level) / 2), Quantile(values, (1 + level) / 2)};
}

Interval PairedBootstrapCI(const std::vector<double>& treated, const std::vector<double>& reference,
                           int resamples, double level, uint64_t seed, int64_t block_length) {
  return PercentileInterval(
      BlockBootstrapMeans(Differences(treated, reference), resamples, seed, block_length), level);
}

Interval CalibratedBootstrapCI(const std::vector<std::vector<double>>& replicates,
                               const std::vector<double>& reference, int resamples, double level,
                               uint64_t seed, int64_t block_length) {
  std::vector<std::vector<double>> diffs;
  for (const std::vector<double>& t : replicates) diffs.push_back(Differences(t, reference));
  std::vector<double> means(resamples);
  ForEachResample(static_cast<int64_t>(reference.size()), resamples, seed, block_length,
                  [&](int r, const std::vector<int64_t>& indices) {
                    means[r] = MeanAt(diffs[r % diffs.size()], indices);
                  });
  return PercentileInterval(std::move(means), level);
}

double BootstrapPValue(const std::vector<double>& means) {
  int64_t at_most = 0, at_least = 0;
  for (double m : means) {
    at_most += m <= 0;
    at_least += m >= 0;
  }
  return std::min(1.0, 2.0 * (std::min(at_most, at_least) + 1) / (means.size() + 1.0));
}

BootstrapTest PairedBootstrapTest(const std::vector<double>& treated,
                                  const std::vector<double>& reference, int resamples, double level,
                                  uint64_t seed, int64_t block_length) {
  const std::vector<double> means =
      BlockBootstrapMeans(Differences(treated, reference), resamples, seed, block_length);
  return {PercentileInterval(means, level), BootstrapPValue(means)};
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

namespace {

// A ratio's resamples leave out those where it has none; more than 5% left
// out and what remains is no longer a resample of the estimate.
std::optional<Interval> IntervalOfKept(std::vector<double> kept, int resamples, double level) {
  if (kept.empty() || kept.size() < 0.95 * resamples) return std::nullopt;
  return PercentileInterval(std::move(kept), level);
}

}  // namespace

RetentionEstimate EstimateRetention(const std::vector<double>& nll_baseline,
                                    const std::vector<double>& nll_profile,
                                    const std::vector<double>& nll_correct,
                                    const RetentionPlan& plan) {
  RetentionEstimate out;
  out.gap = Mean(nll_baseline) - Mean(nll_correct);
  out.gap_ci = PairedBootstrapCI(nll_baseline, nll_correct, plan.resamples, plan.level,
                                 plan.gap_seed, plan.block_length);
  if (!(out.gap_ci.low > 0)) return out;
  out.value =
      GapRetentionPercent(Mean(nll_baseline), Mean(nll_profile), Mean(nll_correct), plan.min_gap);
  if (!out.value) return out;
  std::vector<double> values;
  for (const std::vector<double>& m :
       BlockBootstrapMeansOf({&nll_baseline, &nll_profile, &nll_correct}, plan.resamples,
                             plan.retention_seed, plan.block_length)) {
    std::optional<double> v = GapRetentionPercent(m[0], m[1], m[2], plan.min_gap);
    if (v) {
      values.push_back(*v);
    } else {
      ++out.dropped_resamples;
    }
  }
  out.ci = IntervalOfKept(std::move(values), plan.resamples, plan.level);
  return out;
}

AdditivityEstimate EstimateAdditivity(const std::vector<std::vector<double>>& nll_groups,
                                      const std::vector<double>& nll_joint,
                                      const std::vector<double>& nll_correct, int resamples,
                                      double level, uint64_t seed, int64_t block_length) {
  AdditivityEstimate out;
  // sum_g mean_b(d_g) = mean_b(sum_g d_g): one summed vector resamples
  // every group at once.
  const std::vector<double> joint = Differences(nll_joint, nll_correct);
  std::vector<double> summed(nll_correct.size(), 0.0);
  for (const std::vector<double>& g : nll_groups) {
    out.penalty_sum += Mean(g) - Mean(nll_correct);
    for (size_t i = 0; i < summed.size(); ++i) summed[i] += g[i] - nll_correct[i];
  }
  const std::vector<std::vector<double>> means =
      BlockBootstrapMeansOf({&joint, &summed}, resamples, seed, block_length);
  std::vector<double> joint_means;
  for (const std::vector<double>& m : means) joint_means.push_back(m[0]);
  out.joint_ci = PercentileInterval(std::move(joint_means), level);
  const double penalty = Mean(nll_joint) - Mean(nll_correct);
  if (!(out.joint_ci.low > 0) || !(penalty > 0)) return out;
  out.ratio = out.penalty_sum / penalty;
  std::vector<double> ratios;
  for (const std::vector<double>& m : means) {
    if (m[0] > 0) {
      ratios.push_back(m[1] / m[0]);
    } else {
      ++out.dropped_resamples;
    }
  }
  out.ci = IntervalOfKept(std::move(ratios), resamples, level);
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
