// A small seeded generator with platform-independent results (the standard
// library's distributions are implementation-defined, so audits would not
// reproduce across toolchains with them).
#ifndef FCA_COMMON_RANDOM_H_
#define FCA_COMMON_RANDOM_H_

#include <cstdint>
#include <vector>

namespace fca {

// SplitMix64-seeded xoshiro256**.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n), unbiased (rejection); n > 0.
  uint64_t Uniform(uint64_t n);
  // Uniform permutation of 0..n-1 (Fisher-Yates).
  std::vector<int64_t> Permutation(int64_t n);
  // Uniform derangement of 0..n-1 (no i with p[i] == i), by rejection of
  // uniform permutations (expected e tries). Requires n >= 2.
  std::vector<int64_t> Derangement(int64_t n);

 private:
  uint64_t s_[4];
};

// Derives an independent seed for a named purpose from a job seed, so adding
// an intervention does not shift the random streams of the others.
uint64_t DeriveSeed(uint64_t seed, const char* purpose, uint64_t index = 0);

}  // namespace fca

#endif  // FCA_COMMON_RANDOM_H_
