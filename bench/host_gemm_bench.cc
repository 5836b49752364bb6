// fca_host_gemm_bench: the engine's float32 projections through HostLinear
// (host_gemm.h: w stored column-major once, read in place) against
// at::linear on the row-major w (OpenBLAS, which packs w again every call),
// in speed and bits, at one thread as an audit's forwards run.
//
// Shapes and timing: bench/gemm_bench.h. OLMoE-1B-7B's are wider than the kernel takes
// (HostGemmLayout leaves them to OpenBLAS; the row says so and times the
// kernel anyway). Each pair is timed alternately, 3 times, the best of 5 runs of
// --seconds each. Bits: the two results compared at the shape and at row
// counts 1-300. Then olmoe-s1's MLP layers against its twin's, with warm
// weights, with a forward's, and alternating with the twin's as an audit's
// timing runs them (PrintMoeLayers; fca.md, "Where a mixture of experts' time
// goes"). bench/host_gemm.sh runs it and records the table
// (docs/results/host_gemm.txt).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/gemm_bench.h"
#include "server/engine/models/host_gemm.h"
#include "server/engine/models/torch_util.h"

ABSL_FLAG(double, seconds, 0.2, "time per measurement (the best of 5 runs of this long)");

namespace {

using Shape = fca::bench::GemmShape;
using fca::bench::kGemmShapes;
using fca::bench::SecondsPerCall;

// Row counts from 1 to 300 whose results differ, as "none" or a list.
std::string RowsThatDiffer(const at::Tensor& w, const at::Tensor& stored, at::Generator& gen) {
  std::string differ;
  for (int64_t n = 1; n <= 300; ++n) {
    const at::Tensor x = at::randn({n, w.size(1)}, gen);
    if (!at::equal(fca::engine::HostLinear(x, stored), at::linear(x, w))) {
      absl::StrAppend(&differ, differ.empty() ? "" : ",", n);
    }
  }
  return differ.empty() ? "none" : differ;
}

// One SwiGLU MLP's GEMMs as the engine runs them outside autograd
// (gate, up, silu(gate) * up, down), on x [rows, 192].
struct MlpWeights {
  at::Tensor gate, up, down;  // column-major, as HostGemmLayout stores them
};
void RunMlp(const at::Tensor& x, const MlpWeights& m) {
  at::Tensor hidden = fca::engine::HostLinear(x, m.gate);
  at::silu_(hidden).mul_(fca::engine::HostLinear(x, m.up));
  fca::engine::HostLinear(hidden, m.down);
}

// Why olmoe-s1's experts cost more per FLOP than its twin's MLP: a forward's
// MoE layers (4 layers of 8 experts of width 256, each over 256 of 1024
// tokens' 2048 routed rows) against the twin's (4 layers, one MLP of width
// 512 over the 1024 tokens), the same FLOPs. "warm": one layer's weights
// every time (in L2); "a forward's": the 4 layers' weights in turn, as a
// forward reads them: 18.9 MB for the experts, 4.7 MB for the twin. The
// inputs stay warm either way (the engine's gathered rows are fresh).
void PrintMoeLayers(at::Generator& gen, double seconds) {
  constexpr int kLayers = 4, kExperts = 8;
  constexpr int64_t kIn = 192, kTokens = 1024, kExpertWidth = 256;
  const auto weights = [&](int64_t width) {
    const auto stored = [&](int64_t out, int64_t in) {
      return at::randn({out, in}, gen).t().contiguous().t();
    };
    return MlpWeights{stored(width, kIn), stored(width, kIn), stored(kIn, width)};
  };
  std::vector<MlpWeights> experts, twin;
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) experts.push_back(weights(kExpertWidth));
    twin.push_back(weights(2 * kExpertWidth));
  }
  const at::Tensor expert_rows = at::randn({kTokens * 2 / kExperts, kIn}, gen);
  const at::Tensor tokens = at::randn({kTokens, kIn}, gen);
  // A forward's MLP work: every layer's MLPs (the experts, each over its
  // rows, or the twin's one) in turn; `warm` repeats the first layer's.
  const auto forward = [&](const std::vector<MlpWeights>& mlps, const at::Tensor& x, bool warm) {
    const size_t per_layer = mlps.size() / kLayers;
    for (size_t i = 0; i < mlps.size(); ++i) RunMlp(x, mlps[warm ? i % per_layer : i]);
  };
  std::printf(
      "\nolmoe-s1's MLP layers for 1024 tokens (4 layers; 8 experts over 256 rows each "
      "against the twin's one MLP over 1024), ms per forward's worth\n");
  std::printf("%-22s %9s %9s %8s\n", "weights", "experts", "twin", "ratio");
  for (const bool warm : {true, false}) {
    double e = 1e30, t = 1e30;
    for (int round = 0; round < 3; ++round) {  // alternating
      e = std::min(e, SecondsPerCall([&] { forward(experts, expert_rows, warm); }, seconds));
      t = std::min(t, SecondsPerCall([&] { forward(twin, tokens, warm); }, seconds));
    }
    std::printf("%-22s %9.3f %9.3f %7.3fx\n",
                warm ? "warm (one layer's)" : "a forward's (4 layers)", e * 1e3, t * 1e3, e / t);
  }
  // As an audit's timing pairs the model with its twin: each forward's MLP
  // work right after the other's, each timed, means (not the best).
  using Clock = std::chrono::steady_clock;
  constexpr int kPairs = 200;
  double e = 0, t = 0;
  for (int pair = 0; pair < kPairs; ++pair) {
    const Clock::time_point start = Clock::now();
    forward(experts, expert_rows, false);
    const Clock::time_point middle = Clock::now();
    forward(twin, tokens, false);
    e += std::chrono::duration<double>(middle - start).count();
    t += std::chrono::duration<double>(Clock::now() - middle).count();
  }
  std::printf("%-22s %9.3f %9.3f %7.3fx\n", "alternating (means)", e / kPairs * 1e3,
              t / kPairs * 1e3, e / t);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // The engine's runtime: its OpenBLAS kernels (torch_util.h), one thread.
  fca::engine::ConfigureRuntime({1, fca::engine::Parallelism::kWithinOps});
  if (!fca::engine::HostGemmAvailable()) {
    std::printf("HostLinear does not run here (no AVX-512, or the BLAS rounds otherwise)\n");
    return 0;
  }
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::printf("float32, 1 thread, torch %s, OpenBLAS kernels %s; GFLOP/s\n",
              fca::engine::TorchVersion().c_str(), fca::engine::BlasKernels().c_str());
  std::printf("%-34s %18s %8s %8s %6s %7s  %s\n", "shape", "rows x in -> out", "linear", "host",
              "ratio", "stored", "rows 1-300 whose bits differ");
  for (const Shape& s : kGemmShapes) {
    const at::Tensor w = at::randn({s.out, s.in}, gen);
    const at::Tensor x = at::randn({s.rows, s.in}, gen);
    const at::Tensor stored = w.t().contiguous().t();  // the kernel's layout, at any width
    const bool kept = !fca::engine::HostGemmLayout(w).is_same(w);
    at::Tensor a, b;
    double linear = 1e30, host = 1e30;
    for (int round = 0; round < 3; ++round) {  // alternating
      linear = std::min(linear, SecondsPerCall([&] { a = at::linear(x, w); }, seconds));
      host =
          std::min(host, SecondsPerCall([&] { b = fca::engine::HostLinear(x, stored); }, seconds));
    }
    const double flop = 2.0 * s.rows * s.in * s.out;
    const bool same = at::equal(a, b);
    std::printf("%-34s %18s %8.1f %8.1f %5.2fx %7s  %s%s\n", s.name,
                absl::StrFormat("%d x %d -> %d", s.rows, s.in, s.out).c_str(), flop / linear / 1e9,
                flop / host / 1e9, linear / host, kept ? "yes" : "no",
                same ? "" : "(differs at the shape) ", RowsThatDiffer(w, stored, gen).c_str());
  }
  PrintMoeLayers(gen, seconds);
  std::printf(
      "\nlinear: at::linear on the row-major w; host: HostLinear on w stored column-major; "
      "ratio: linear's time over host's; stored: whether HostGemmLayout stores w for the "
      "kernel (at most 1 MiB), else the engine runs at::linear\n");
  return 0;
}
