#include "server/engine/models/moe_host.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x

#include <algorithm>
#include <cmath>

namespace fca::engine {
namespace {

// The loops over rows are compiled for the widest vectors the processor has,
// chosen at load. Still no contracted multiply-adds (CMakeLists.txt): the
// same bits at every width.
#define FCA_HOST_LOOP __attribute__((target_clones("avx512f", "avx2", "default")))

// Whether a is ranked before b in a descending sort: NaN first, as torch's
// sort puts it.
bool RanksBefore(float a, float b) { return (std::isnan(a) && !std::isnan(b)) || a > b; }

// x [B, T, heads, hd], cos and sin [T, hd].
FCA_HOST_LOOP void RotaryRows(const float* x, const float* cos, const float* sin,
                              const std::vector<int64_t>& size, float* out) {
  const int64_t B = size[0], positions = size[1], heads = size[2], hd = size[3], half = hd / 2;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < positions; ++t) {
      const float* c = cos + t * hd;
      const float* s = sin + t * hd;
      for (int64_t h = 0; h < heads; ++h, x += hd, out += hd) {
        const float* __restrict a = x;
        float* __restrict r = out;
        for (int64_t i = 0; i < half; ++i) r[i] = a[i] * c[i] + a[i + half] * s[i];
        for (int64_t i = half; i < hd; ++i) r[i] = a[i] * c[i] + a[i - half] * s[i];
      }
    }
  }
}

// out[n] = sum over n's k rows of ys[r] * weights[r], from 0 in the rows'
// order. `0 +` stays: it turns a product of -0 into +0, as adding into zeros
// does.
FCA_HOST_LOOP void CombineRows(const float* ys, const float* weights, const int64_t* rows,
                               int64_t N, int64_t k, int64_t D, float* out) {
  for (int64_t n = 0; n < N; ++n, rows += k) {
    float* __restrict o = out + n * D;
    const float* __restrict first = ys + rows[0] * D;
    const float w0 = weights[rows[0]];
    for (int64_t d = 0; d < D; ++d) o[d] = 0.0f + first[d] * w0;
    for (int64_t j = 1; j < k; ++j) {
      const float* __restrict src = ys + rows[j] * D;
      const float w = weights[rows[j]];
      for (int64_t d = 0; d < D; ++d) o[d] = o[d] + src[d] * w;
    }
  }
}

// The counting sort's first pass over `P` expert ids: each expert's count in
// `count`, and returned, where each expert's first row goes.
std::vector<int64_t> CountPerExpert(const int64_t* id, int64_t P, int64_t num_experts,
                                    std::vector<int64_t>* count) {
  count->assign(num_experts, 0);
  for (int64_t p = 0; p < P; ++p) ++(*count)[id[p]];
  std::vector<int64_t> start(num_experts, 0);
  for (int64_t e = 1; e < num_experts; ++e) start[e] = start[e - 1] + (*count)[e - 1];
  return start;
}

}  // namespace

bool HostLoopsApply(const at::Tensor& t) {
  return t.is_cpu() && !at::GradMode::is_enabled() && t.is_contiguous() &&
         t.scalar_type() == at::kFloat;
}

// An expert displaces only a strictly lower-ranked one, so ties keep the
// lower index first, as the stable sort does.
at::Tensor HostTopKExperts(const at::Tensor& probs, int64_t k) {
  const at::Tensor p = probs.contiguous();
  const int64_t N = p.size(0), E = p.size(1);
  at::Tensor experts = at::empty({N, k}, p.options().dtype(at::kLong));
  const float* row = p.data_ptr<float>();
  int64_t* chosen = experts.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n, row += E, chosen += k) {
    int64_t size = 0;
    for (int64_t e = 0; e < E; ++e) {
      int64_t slot = size;
      while (slot > 0 && RanksBefore(row[e], row[chosen[slot - 1]])) --slot;
      if (slot >= k) continue;
      for (int64_t j = std::min(size, k - 1); j > slot; --j) chosen[j] = chosen[j - 1];
      chosen[slot] = e;
      size = std::min(size + 1, k);
    }
  }
  return experts;
}

at::Tensor HostGroupByExpert(const at::Tensor& flat, int64_t num_experts,
                             std::vector<int64_t>* count) {
  const at::Tensor ids = flat.contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t P = ids.numel();
  std::vector<int64_t> next = CountPerExpert(id, P, num_experts, count);
  at::Tensor pos = at::empty({P}, ids.options());
  int64_t* out = pos.data_ptr<int64_t>();
  for (int64_t p = 0; p < P; ++p) out[next[id[p]]++] = p;
  return pos;
}

at::Tensor HostRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin_signed) {
  at::Tensor out = at::empty_like(x);
  const at::Tensor c = cos.contiguous(), s = sin_signed.contiguous();
  RotaryRows(x.data_ptr<float>(), c.data_ptr<float>(), s.data_ptr<float>(), x.sizes().vec(),
             out.data_ptr<float>());
  return out;
}

void HostGroupRoutes(const at::Tensor& experts, const at::Tensor& weights, int64_t num_experts,
                     at::Tensor* tokens, at::Tensor* grouped_weights, at::Tensor* rows,
                     std::vector<int64_t>* count) {
  const at::Tensor ex = experts.contiguous(), w = weights.contiguous();
  const int64_t N = ex.size(0), k = ex.size(1);
  const int64_t* expert = ex.data_ptr<int64_t>();
  const float* weight = w.data_ptr<float>();
  std::vector<int64_t> next = CountPerExpert(expert, N * k, num_experts, count);
  *tokens = at::empty({N * k}, ex.options());
  *grouped_weights = at::empty({N * k}, w.options());
  *rows = at::empty({N, k}, ex.options());
  int64_t* token = tokens->data_ptr<int64_t>();
  float* grouped = grouped_weights->data_ptr<float>();
  int64_t* row = rows->data_ptr<int64_t>();
  // Slot-major, as HostGroupByExpert takes the positions.
  for (int64_t slot = 0; slot < k; ++slot) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = next[expert[n * k + slot]]++;
      token[r] = n;
      grouped[r] = weight[n * k + slot];
      row[n * k + slot] = r;
    }
  }
  // Each token's rows in increasing order: the order of its experts' indices.
  for (int64_t n = 0; n < N; ++n) std::sort(row + n * k, row + (n + 1) * k);
}

at::Tensor HostCombine(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& rows) {
  const at::Tensor w = weights.contiguous(), r = rows.contiguous();
  at::Tensor out = at::empty({r.size(0), ys.size(1)}, ys.options());
  CombineRows(ys.data_ptr<float>(), w.data_ptr<float>(), r.data_ptr<int64_t>(), r.size(0),
              r.size(1), ys.size(1), out.data_ptr<float>());
  return out;
}

}  // namespace fca::engine
