// Seeded series for the bootstrap tests (statistics_test.cc,
// circular_block_test.cc).
#ifndef FCA_TESTS_ENGINE_AUDIT_SERIES_TESTING_H_
#define FCA_TESTS_ENGINE_AUDIT_SERIES_TESTING_H_

#include <cmath>
#include <vector>

#include "common/random.h"
#include "server/engine/audit/statistics.h"

namespace fca::engine {

// Standard normal draws (Box-Muller on the seeded generator).
inline std::vector<double> Normals(Rng* rng, size_t n) {
  std::vector<double> out;
  while (out.size() < n) {
    const double u1 = (rng->Uniform(1ull << 52) + 0.5) / double(1ull << 52);
    const double u2 = rng->Uniform(1ull << 52) / double(1ull << 52);
    out.push_back(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }
  return out;
}

inline double Variance(const std::vector<double>& x) {
  const double m = Mean(x);
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return ss / (x.size() - 1);
}

// A stationary AR(1): x_0 from its stationary law, then x_t = phi x_{t-1}
// + e_t with unit normal innovations. Its mean is 0.
inline std::vector<double> Ar1(Rng* rng, size_t n, double phi) {
  const std::vector<double> e = Normals(rng, n);
  std::vector<double> x(n);
  x[0] = e[0] / std::sqrt(1 - phi * phi);
  for (size_t t = 1; t < n; ++t) x[t] = phi * x[t - 1] + e[t];
  return x;
}

}  // namespace fca::engine

#endif  // FCA_TESTS_ENGINE_AUDIT_SERIES_TESTING_H_
