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

Interval PairedBootstrapCI(const std::vector<double>& treated, const std::vector<double>& reference,
                           int resamples, double level, uint64_t seed) {
  const size_t n = treated.size();
  std::vector<double> diff(n);
  for (size_t i = 0; i < n; ++i) diff[i] = treated[i] - reference[i];
  Rng rng(seed);
  std::vector<double> means(resamples);
  for (int r = 0; r < resamples; ++r) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += diff[rng.Uniform(n)];
    means[r] = s / n;
  }
  std::sort(means.begin(), means.end());
  return {Quantile(means, (1 - level) / 2), Quantile(means, (1 + level) / 2)};
}

SlowdownEstimate PairedSlowdown(const std::vector<double>& model, const std::vector<double>& twin,
                                int resamples, double level, uint64_t seed) {
  // Log times: a ratio is a difference of logs, so the paired bootstrap of
  // differences gives the CI of the mean log ratio.
  std::vector<double> log_model(model.size()), log_twin(twin.size());
  for (size_t i = 0; i < model.size(); ++i) {
    log_model[i] = std::log(model[i]);
    log_twin[i] = std::log(twin[i]);
  }
  const Interval log_ci = PairedBootstrapCI(log_model, log_twin, resamples, level, seed);
  SlowdownEstimate e;
  e.slowdown = std::expm1(Mean(log_model) - Mean(log_twin));
  e.ci = {std::expm1(log_ci.low), std::expm1(log_ci.high)};
  e.verdict = e.ci.low > 0 ? 1 : e.ci.high < 0 ? -1 : 0;
  e.pairs = static_cast<int64_t>(model.size());
  return e;
}

std::optional<double> GapRetentionPercent(double nll_global_mean, double nll_profile,
                                          double nll_correct, double min_gap) {
  const double gap = nll_global_mean - nll_correct;
  if (!(std::fabs(gap) >= min_gap)) return std::nullopt;
  return 100.0 * (nll_global_mean - nll_profile) / gap;
}

std::optional<Interval> RetentionBootstrapCI(const std::vector<double>& nll_global_mean,
                                             const std::vector<double>& nll_profile,
                                             const std::vector<double>& nll_correct, double min_gap,
                                             int resamples, double level, uint64_t seed) {
  const size_t n = nll_correct.size();
  Rng rng(seed);
  std::vector<double> values;
  for (int r = 0; r < resamples; ++r) {
    double g = 0, p = 0, c = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = rng.Uniform(n);
      g += nll_global_mean[i];
      p += nll_profile[i];
      c += nll_correct[i];
    }
    std::optional<double> v = GapRetentionPercent(g / n, p / n, c / n, min_gap);
    if (v) values.push_back(*v);
  }
  if (values.empty() || values.size() < 0.95 * resamples) return std::nullopt;
  std::sort(values.begin(), values.end());
  return Interval{Quantile(values, (1 - level) / 2), Quantile(values, (1 + level) / 2)};
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
