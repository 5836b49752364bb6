// What the GEMM benches (fca_host_gemm_bench, fca_prepacked_gemm_bench)
// share: how they time a call, and the GEMMs they time: the bundled models' at a batch of 8 windows
// of 128 tokens (an olmoe-s1 expert over the even split of its 2048 routed rows, and over 64: a
// short batch), and OLMoE-1B-7B's at one window of 512 (its experts over the
// even split k T / E = 64 rows).
#ifndef FCA_BENCH_GEMM_BENCH_H_
#define FCA_BENCH_GEMM_BENCH_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace fca::bench {

struct GemmShape {
  const char* name;
  int64_t rows, in, out;  // x [rows, in] times w [out, in]^T
};

inline constexpr GemmShape kGemmShapes[] = {
    {"featuregate-s1 attention qkv", 1024, 192, 576},
    {"featuregate-s1 mlp up", 1024, 192, 768},
    {"featuregate-s1 mlp down", 1024, 768, 192},
    {"olmoe-s1 attention q/k/v/o", 1024, 192, 192},
    {"olmoe-s1 expert gate/up", 256, 192, 256},
    {"olmoe-s1 expert down", 256, 256, 192},
    {"olmoe-s1 expert gate/up, 64 rows", 64, 192, 256},
    {"olmoe-dense mlp gate/up", 1024, 192, 512},
    {"olmoe-dense mlp down", 1024, 512, 192},
    {"olmoe-1b-7b attention q", 512, 2048, 2048},
    {"olmoe-1b-7b expert gate/up", 64, 2048, 1024},
    {"olmoe-1b-7b expert down", 64, 1024, 2048},
};

// Seconds per call of f: the best of 5 runs of about `seconds` each, after 5
// warm-up calls.
template <typename F>
double SecondsPerCall(F f, double seconds) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 5; ++i) f();
  const Clock::time_point probe = Clock::now();
  f();
  const double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - probe).count());
  const int calls = std::max(3, static_cast<int>(seconds / once));
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  return best;
}

}  // namespace fca::bench

#endif  // FCA_BENCH_GEMM_BENCH_H_
