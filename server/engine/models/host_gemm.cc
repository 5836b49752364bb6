#include "server/engine/models/host_gemm.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace fca::engine {
namespace {

// How OpenBLAS 0.3.21's sgemm sums each output over the input width
// (param.h, driver/level3/level3.c): in blocks of SGEMM_DEFAULT_Q; the last
// two blocks, when together under 2 Q, split in halves rounded up to
// SGEMM_DEFAULT_UNROLL_M. Each block is one chain of fused multiply-adds per
// output (the kernels keep one accumulator per output). At or below
// `small_work` multiply-adds (rows x out x in) its small-matrix kernels run
// instead (sgemm_small_kernel_permit; 0: it has none). The probe picks the
// rule whose bits at::linear has here.
//
// Haswell's kernels (sgemm_kernel_8x4_haswell_2.c, also Zen's) sum most
// outputs so too but split some tiles' sums in two: a tile of 8 outputs by 6
// or 4 rows of x computed by their m8n6 or m8n4 code adds the products of
// each group of 8 in pairs, the first of a pair to one sum and the second to
// another, the products left over after the groups to the first, and adds the
// two sums: block = (a + b). Which tiles depends on where each lies in the
// driver's chunks of outputs (SGEMM_DEFAULT_P) and rows (SplitTiles).
struct Summation {
  const char* kernels;  // the OpenBLAS kernels with this rule
  int64_t block, round;
  double small_work;
  int64_t output_chunk;  // SGEMM_DEFAULT_P, where some tiles split; 0: none do
};
constexpr Summation kSummations[] = {
    {"SkylakeX", 448, 16, 100.0 * 100.0 * 100.0, 0},
    {"Cooperlake", 320, 16, 100.0 * 100.0 * 100.0, 0},
    {"Haswell", 320, 8, 0.0, 320},
};

// A tile: 12 rows of x by 32 outputs (two vectors of 16): 24 accumulators,
// two weight vectors and one broadcast among the 32 registers.
constexpr int kTileRows = 12;
constexpr int64_t kTileOutputs = 32;

// How far ahead along the input width a tile asks for w's rows: 16 steps
// (about 200 cycles of its multiply-adds). A forward reads each weight once
// per tile of rows, and the first tile finds it cold: olmoe-s1's experts
// read four times its twin's weights per token (18.9 against 4.7 MB a
// forward), and without the prefetch its experts' GEMMs ran about 1.15 times
// the twin's per FLOP within an audit's timing, its slowdown +12-14% on an
// Intel Xeon with AMX; with it, +7-8% (8, 12 and 24 steps alike), and the
// featuregate-s1 audit 1-5% faster (docs/moe.md, step 10). A prefetch changes no
// bits and cannot fault, so it may point past w.
constexpr int64_t kPrefetchAhead = 16;

// The largest weight stored for the kernel: 1 MiB of float32. Beyond it
// OpenBLAS, which packs w into contiguous panels, was faster
// (docs/results/host_gemm.txt): the columns of a wide w^T are far apart.
constexpr int64_t kMaxWeights = 256 * 1024;

// (Every processor with AVX-512 has FMA, which the 8-wide split tiles use.)
#define FCA_AVX512 __attribute__((target("avx512f,fma")))

struct Problem {
  const float* x;  // [rows, in], row stride ldx
  int64_t ldx, rows, in;
  const float* wt;  // [in, out] (w column-major), row stride ldw
  int64_t ldw, out;
  float* y;  // [rows, out], row stride ldy
  int64_t ldy;
  const float* bias;  // [out], what the first block adds to; null: 0
  const Summation* sum;
};

// The next chunk of `left` as OpenBLAS's driver takes it: `size`, or, when
// the last two together are under 2 x size, half of them rounded up to
// `round`.
int64_t DriverChunk(int64_t left, int64_t size, int64_t round) {
  if (left >= 2 * size) return size;
  if (left > size) return (left / 2 + round - 1) / round * round;
  return left;
}

// The next block of the input width from `start`, as OpenBLAS splits it.
int64_t BlockLength(const Summation& sum, int64_t in, int64_t start) {
  return DriverChunk(in - start, sum.block, sum.round);
}

// y[r, j .. j + 32) for the first R rows from `row`, over the block
// [k0, k0 + len) of the input width: y = (0 or y) + the chain of
// multiply-adds from 0. Masked, the masks cut the outputs past the last.
template <int R, bool kMasked>
FCA_AVX512 void Tile(const Problem& p, int64_t row, int64_t j, int64_t k0, int64_t len,
                     __mmask16 m0, __mmask16 m1) {
  __m512 a0[R], a1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  const float* w = p.wt + k0 * p.ldw + j;
  // Row r of x at base_{r / 3} + (r % 3) * stride bytes: four pointers and
  // one stride address the twelve rows (base + index * scale), so a step along
  // the width costs four additions. (Four variables, not an array, which GCC
  // at -O2 keeps on the stack.)
  const int64_t stride = p.ldx * static_cast<int64_t>(sizeof(float));
  const char* b0 = reinterpret_cast<const char*>(p.x + row * p.ldx + k0);
  const char *b1 = b0 + 3 * stride, *b2 = b0 + 6 * stride, *b3 = b0 + 9 * stride;
  // The address as an integer: w + kPrefetchAhead * ldw may lie past w's end.
  const uintptr_t ahead = kPrefetchAhead * p.ldw * sizeof(float);
  for (int64_t k = 0; k < len; ++k, w += p.ldw) {
    const uintptr_t next = reinterpret_cast<uintptr_t>(w) + ahead;
    _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next + 16 * sizeof(float)), _MM_HINT_T0);
    const __m512 w0 = kMasked ? _mm512_maskz_loadu_ps(m0, w) : _mm512_loadu_ps(w);
    const __m512 w1 = kMasked ? _mm512_maskz_loadu_ps(m1, w + 16) : _mm512_loadu_ps(w + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const char* b = r < 3 ? b0 : r < 6 ? b1 : r < 9 ? b2 : b3;
      const __m512 v = _mm512_set1_ps(*reinterpret_cast<const float*>(b + (r % 3) * stride));
      a0[r] = _mm512_fmadd_ps(v, w0, a0[r]);
      a1[r] = _mm512_fmadd_ps(v, w1, a1[r]);
    }
    b0 += sizeof(float);
    b1 += sizeof(float);
    b2 += sizeof(float);
    b3 += sizeof(float);
  }
  // The first block adds to the bias (addmm's output starts as it) or to 0,
  // as OpenBLAS adds to the zeroed output: a chain of -0 becomes +0.
  const bool first = k0 == 0;
  const __m512 start0 = p.bias ? _mm512_maskz_loadu_ps(m0, p.bias + j) : _mm512_setzero_ps();
  const __m512 start1 = p.bias ? _mm512_maskz_loadu_ps(m1, p.bias + j + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (row + r) * p.ldy + j;
    const __m512 y0 = first ? start0 : _mm512_maskz_loadu_ps(m0, y);
    const __m512 y1 = first ? start1 : _mm512_maskz_loadu_ps(m1, y + 16);
    _mm512_mask_storeu_ps(y, m0, _mm512_add_ps(y0, a0[r]));
    _mm512_mask_storeu_ps(y + 16, m1, _mm512_add_ps(y1, a1[r]));
  }
}

using TileFn = void (*)(const Problem&, int64_t, int64_t, int64_t, int64_t, __mmask16, __mmask16);

template <bool kMasked, int... R>
constexpr auto MakeTiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&Tile<R + 1, kMasked>...};
}
// By rows - 1: full panels of 32 outputs, and the last one cut by masks.
constexpr auto kTiles = MakeTiles<false>(std::make_integer_sequence<int, kTileRows>{});
constexpr auto kMaskedTiles = MakeTiles<true>(std::make_integer_sequence<int, kTileRows>{});

__mmask16 Mask(int64_t lanes) {
  if (lanes <= 0) return 0;
  return lanes >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << lanes) - 1);
}

// How many bytes of x and of w a pass keeps in L2 (2 MB a core where the
// kernel runs): a quarter of it each.
constexpr int64_t kL2Share = 512 * 1024;

// Rows [begin, end): block after block of the input width. Within a block,
// chunks of rows by groups of outputs, so that the chunk's x and the group's
// w stay in L2; within those, each tile of 12 rows against every 32 outputs
// of the group (the tile's rows in L1, w streaming from L2).
void RowRange(const Problem& p, int64_t begin, int64_t end) {
  for (int64_t k0 = 0; k0 < p.in;) {
    const int64_t len = BlockLength(*p.sum, p.in, k0);
    const int64_t fit = kL2Share / (len * static_cast<int64_t>(sizeof(float)));
    const int64_t chunk = std::max<int64_t>(1, fit / kTileRows) * kTileRows;
    const int64_t group = std::max<int64_t>(1, fit / kTileOutputs) * kTileOutputs;
    for (int64_t first = begin; first < end; first += chunk) {
      const int64_t last = std::min(end, first + chunk);
      for (int64_t g = 0; g < p.out; g += group) {
        const int64_t g_end = std::min(p.out, g + group);
        for (int64_t row = first; row < last; row += kTileRows) {
          const int64_t r = std::min<int64_t>(kTileRows, last - row);
          for (int64_t j = g; j < g_end; j += kTileOutputs) {
            const bool full = p.out - j >= kTileOutputs;
            (full ? kTiles : kMaskedTiles)[r - 1](p, row, j, k0, len, Mask(p.out - j),
                                                  Mask(p.out - j - 16));
          }
        }
      }
    }
    k0 += len;
  }
}

// A tile of 8 outputs by R rows whose sums Haswell's kernel splits.
struct SplitJob {
  int64_t first, row;
  int rows;  // 4 or 6
};

// The outputs [first, first + 8) of rows [row, row + R) again, each block's
// sum split in two as Haswell's m8n6 and m8n4 code sums it. The R rows go
// together: 2 R independent chains keep the FMA units busy (one row at a
// time, its two chains waited on the FMA latency); each output's chains are
// the same either way.
template <int R>
FCA_AVX512 void SplitTile(const Problem& p, int64_t first, int64_t row) {
  const __m256 start = p.bias ? _mm256_loadu_ps(p.bias + first) : _mm256_setzero_ps();
  __m256 y[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) y[r] = start;
  for (int64_t k0 = 0; k0 < p.in;) {
    const int64_t len = BlockLength(*p.sum, p.in, k0);
    const float* x = p.x + row * p.ldx + k0;
    const float* w = p.wt + k0 * p.ldw + first;
    __m256 a[R], b[R];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) a[r] = b[r] = _mm256_setzero_ps();
    const int64_t paired = len / 8 * 8;
    int64_t k = 0;
    for (; k < paired; k += 2) {
      const __m256 w0 = _mm256_loadu_ps(w + k * p.ldw), w1 = _mm256_loadu_ps(w + (k + 1) * p.ldw);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        a[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r * p.ldx + k]), w0, a[r]);
        b[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r * p.ldx + k + 1]), w1, b[r]);
      }
    }
    for (; k < len; ++k) {
      const __m256 w0 = _mm256_loadu_ps(w + k * p.ldw);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r)
        a[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r * p.ldx + k]), w0, a[r]);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) y[r] = _mm256_add_ps(y[r], _mm256_add_ps(a[r], b[r]));
    k0 += len;
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(p.y + (row + r) * p.ldy + first, y[r]);
}

// One call of Haswell's kernel: outputs [first, first + count) by the row
// groups its loops take, 12 at a time, then 8, 4, 2 and 1; the tiles it
// splits added to `jobs`. Of a group of 12 rows, with 16 outputs or more, the
// kernel splits the left 6 rows of the first 8 outputs and one half of the
// last 8 it reaches in its alternating loop; of a group of 4, every 8
// outputs.
void SplitTiles(int64_t first, int64_t count, int64_t row, int64_t rows,
                std::vector<SplitJob>* jobs) {
  const int64_t panels = count / 8;
  while (rows > 0) {
    const int64_t group = rows >= 12 ? 12 : rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
    if (group == 4) {
      for (int64_t q = 0; q < panels; ++q) jobs->push_back({first + 8 * q, row, 4});
    } else if (group == 12 && count >= 16) {
      jobs->push_back({first, row, 6});
      // Right halves of panels (i, i + 1), then left halves of (i + 1,
      // i + 2), while 16 outputs are left; the last panel alone, split.
      for (int64_t left = count, i = 0;; i += 2) {
        left -= 8;
        if (left < 16) {
          jobs->push_back({first + 8 * (i + 1), row, 6});
          break;
        }
        left -= 8;
        if (left < 16) {
          jobs->push_back({first + 8 * (i + 2), row + 6, 6});
          break;
        }
      }
    }
    row += group;
    rows -= group;
  }
}

// The driver's chunks (driver/level3/level3.c, one thread): outputs in
// chunks of the output_chunk (halved as the width's blocks are); the first
// chunk's rows taken 12 at a time, then 4, then what is left; the other
// chunks' rows in one call. The split tiles are disjoint, so they are
// recomputed on torch's intra-op threads as the rows are.
void FixSplitTiles(const Problem& p) {
  const Summation& sum = *p.sum;
  const auto chunk = [&](int64_t left) { return DriverChunk(left, sum.output_chunk, sum.round); };
  std::vector<SplitJob> jobs;
  const int64_t first = chunk(p.out);
  for (int64_t row = 0; row < p.rows;) {
    const int64_t left = p.rows - row;
    const int64_t rows = left >= 12 ? 12 : left > 4 ? 4 : left;
    SplitTiles(0, first, row, rows, &jobs);
    row += rows;
  }
  for (int64_t out = first; out < p.out;) {
    const int64_t count = chunk(p.out - out);
    SplitTiles(out, count, 0, p.rows, &jobs);
    out += count;
  }
  at::parallel_for(0, static_cast<int64_t>(jobs.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const SplitJob& job = jobs[i];
      if (job.rows == 6) {
        SplitTile<6>(p, job.first, job.row);
      } else {
        SplitTile<4>(p, job.first, job.row);
      }
    }
  });
}

void Run(const Problem& p) {
  const int64_t tiles = (p.rows + kTileRows - 1) / kTileRows;
  // Rows are independent (each output is summed within one), so the split
  // over torch's intra-op threads leaves the bits alone.
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    RowRange(p, begin * kTileRows, std::min(end * kTileRows, p.rows));
  });
  if (p.sum->output_chunk > 0) FixSplitTiles(p);
}

// y = bias + x2 w^T, bias first (undefined: 0), as addmm sums under `sum`.
// x2 [rows, in] with contiguous rows, w column-major [out, in], y [rows, out]
// with contiguous rows.
void Multiply(const Summation& sum, const at::Tensor& x2, const at::Tensor& w,
              const at::Tensor& bias, const at::Tensor& y) {
  const int64_t rows = x2.size(0), in = x2.size(1), out = w.size(0);
  TORCH_CHECK(y.scalar_type() == at::kFloat && y.dim() == 2 && y.size(0) == rows &&
                  y.size(1) == out && y.stride(1) == 1,
              "HostLinear: the output must be float32 [", rows, ", ", out,
              "] with contiguous rows");
  if (rows == 0 || out == 0) return;
  // OpenBLAS's small-matrix kernels round otherwise, and only on the
  // row-major w: a copy of it (at most 1 MiB) for these few multiply-adds.
  if (static_cast<double>(rows) * out * in <= sum.small_work) {
    at::Tensor into = y;
    const at::Tensor row_major = w.contiguous().t();
    if (bias.defined()) {
      at::addmm_out(into, bias, x2, row_major);
    } else {
      at::mm_out(into, x2, row_major);
    }
    return;
  }
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  Run(Problem{x2.data_ptr<float>(), x2.stride(0), rows, in, w.data_ptr<float>(), w.stride(1), out,
              y.data_ptr<float>(), y.stride(0), b.defined() ? b.data_ptr<float>() : nullptr, &sum});
}

at::Tensor Rows(const at::Tensor& x) {
  at::Tensor x2 = x.reshape({-1, x.size(-1)});
  return x2.stride(1) == 1 ? x2 : x2.contiguous();
}

at::Tensor ColumnMajor(const at::Tensor& w) { return w.t().contiguous().t(); }

bool ColumnMajorLayout(const at::Tensor& w) {
  return w.dim() == 2 && w.stride(0) == 1 && w.stride(1) == w.size(0);
}

// Whether the kernel under `sum` has at::linear's bits on shapes that cover
// several blocks of the width (1000: 448 + 288 + 264, or 320 + 320 + 192 +
// 168), a half-full last panel, a part tile of rows and a product small
// enough for the small-matrix kernels.
bool ProbeMatches(const Summation& sum) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20261206);
  const struct {
    int64_t rows, in, out;
  } shapes[] = {{40, 1000, 48}, {33, 192, 200}, {13, 520, 176}, {7, 300, 40}};
  at::NoGradGuard no_grad;
  for (const auto& s : shapes) {
    const at::Tensor x = at::randn({s.rows, s.in}, gen);
    const at::Tensor w = at::randn({s.out, s.in}, gen);
    const at::Tensor y = at::empty({s.rows, s.out});
    Multiply(sum, x, ColumnMajor(w), at::Tensor(), y);
    if (!at::equal(y, at::linear(x, w))) return false;
  }
  return true;
}

// The summation at::linear has here (decided once per process), or null.
const Summation* ThisSummation() {
  static const Summation* const found = []() -> const Summation* {
    if (!__builtin_cpu_supports("avx512f")) return nullptr;
    for (const Summation& sum : kSummations) {
      if (ProbeMatches(sum)) return &sum;
    }
    return nullptr;
  }();
  return found;
}

// The summation of a HostLinear call, which callers guard with
// HostLinearApplies.
const Summation& CheckedSummation() {
  const Summation* sum = ThisSummation();
  TORCH_CHECK(sum != nullptr, "HostLinear: the kernel does not run here (HostGemmAvailable)");
  return *sum;
}

}  // namespace

bool HostGemmAvailable() { return ThisSummation() != nullptr; }

const char* HostGemmSummation() {
  const Summation* sum = ThisSummation();
  return sum == nullptr ? "none" : sum->kernels;
}

at::Tensor HostGemmLayout(const at::Tensor& w) {
  const bool suits = w.dim() == 2 && w.is_cpu() && w.scalar_type() == at::kFloat &&
                     w.numel() <= kMaxWeights && HostGemmAvailable();
  return suits ? ColumnMajor(w) : w;
}

bool HostLinearApplies(const at::Tensor& x, const at::Tensor& w) {
  return x.is_cpu() && w.is_cpu() && x.scalar_type() == at::kFloat &&
         w.scalar_type() == at::kFloat && !at::GradMode::is_enabled() && ColumnMajorLayout(w) &&
         x.dim() >= 1 && x.size(-1) == w.size(1) && HostGemmAvailable();
}

at::Tensor HostLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  // at::linear adds the bias first (addmm) for a matrix or a contiguous 3-d
  // x, and after the product (matmul, then add_) otherwise.
  const bool bias_first = x.dim() == 2 || (x.dim() == 3 && x.is_contiguous());
  const at::Tensor x2 = Rows(x);
  at::Tensor y = at::empty({x2.size(0), w.size(0)}, x.options());
  Multiply(CheckedSummation(), x2, w, bias_first ? bias : at::Tensor(), y);
  if (bias.defined() && !bias_first) y.add_(bias);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  return y.view(shape);
}

at::Tensor HostLinear(const at::Tensor& x, const at::Tensor& w) {
  return HostLinear(x, w, at::Tensor());
}

void HostLinearInto(const at::Tensor& x, const at::Tensor& w, const at::Tensor& out) {
  Multiply(CheckedSummation(), Rows(x), w, at::Tensor(), out);
}

}  // namespace fca::engine
