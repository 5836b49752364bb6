#include "common/random.h"

#include <cassert>
#include <utility>

namespace fca {
namespace {

uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix(&seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Uniform(uint64_t n) {
  assert(n > 0);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % n;
}

std::vector<int64_t> Rng::Permutation(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[Uniform(i + 1)]);
  return p;
}

std::vector<int64_t> Rng::Derangement(int64_t n) {
  assert(n >= 2);
  while (true) {
    std::vector<int64_t> p = Permutation(n);
    bool fixed = false;
    for (int64_t i = 0; i < n && !fixed; ++i) fixed = p[i] == i;
    if (!fixed) return p;
  }
}

uint64_t DeriveSeed(uint64_t seed, const char* purpose, uint64_t index) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the purpose
  for (const char* c = purpose; *c; ++c) h = (h ^ static_cast<uint8_t>(*c)) * 1099511628211ull;
  uint64_t x = seed ^ h ^ (index * 0x9e3779b97f4a7c15ull);
  return SplitMix(&x);
}

}  // namespace fca
