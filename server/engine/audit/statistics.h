// Scalar statistics of an audit (fca.md "Metrics"). Torch-free.
#ifndef FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_
#define FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_

#include <cstdint>
#include <optional>
#include <vector>

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
Interval PairedBootstrapCI(const std::vector<double>& treated, const std::vector<double>& reference,
                           int resamples, double level, uint64_t seed);

// The slowdown of a model against its dense twin from paired timings
// (fca.md "Execution"): model[i] and twin[i] are the times of pair i, run
// back to back. slowdown = exp(mean_i log(model[i] / twin[i])) - 1, the
// geometric mean of the per-pair ratios minus 1; the CI is the paired
// percentile bootstrap of the mean log ratio (PairedBootstrapCI over the logs)
// mapped through exp(.) - 1. verdict: +1 when the CI lies above 0 (slower),
// -1 below 0 (faster), 0 when it contains 0 (no detectable difference).
// Requires model.size() == twin.size() >= 1, every time > 0.
struct SlowdownEstimate {
  double slowdown = 0;
  Interval ci;
  int verdict = 0;
  int64_t pairs = 0;
  double half_width() const { return 0.5 * (ci.high - ci.low); }
};
SlowdownEstimate PairedSlowdown(const std::vector<double>& model, const std::vector<double>& twin,
                                int resamples, double level, uint64_t seed);

// R(P) = (NLL(global_mean) - NLL(P)) / (NLL(global_mean) - NLL(correct)) in
// percent; nullopt (undefined) when |denominator| < min_gap.
std::optional<double> GapRetentionPercent(double nll_global_mean, double nll_profile,
                                          double nll_correct, double min_gap);

// Percentile bootstrap CI of GapRetentionPercent over sequences (the three
// NLL vectors are paired per sequence and resampled together). nullopt when
// more than 5% of the resamples have an undefined retention.
std::optional<Interval> RetentionBootstrapCI(const std::vector<double>& nll_global_mean,
                                             const std::vector<double>& nll_profile,
                                             const std::vector<double>& nll_correct, double min_gap,
                                             int resamples, double level, uint64_t seed);

// Mean, sample standard deviation (0 for one value), min and max.
struct Summary {
  double mean = 0, sd = 0, min = 0, max = 0;
  int64_t n = 0;
};
Summary Summarize(const std::vector<double>& x);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_STATISTICS_H_
