#include "server/engine/models/moe_host.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace fca::engine {
namespace {

// Whether a is ranked before b in a descending sort: NaN first, as torch's
// sort puts it.
bool RanksBefore(float a, float b) { return (std::isnan(a) && !std::isnan(b)) || a > b; }

// x [B, T, heads, hd], cos and sin [T, hd].
void RotaryRows(const float* x, const float* cos, const float* sin,
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

// ys [P, D] -> out [N, D] (zeros), rows added in increasing p.
void CombineRows(const float* ys, const float* weights, const int64_t* tokens, int64_t P, int64_t D,
                 float* out) {
  for (int64_t p = 0; p < P; ++p) {
    float* __restrict row = out + tokens[p] * D;
    const float* __restrict src = ys + p * D;
    for (int64_t d = 0; d < D; ++d) row[d] = row[d] + src[d] * weights[p];
  }
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
  count->assign(num_experts, 0);
  for (int64_t p = 0; p < P; ++p) ++(*count)[id[p]];
  std::vector<int64_t> next(num_experts, 0);
  for (int64_t e = 1; e < num_experts; ++e) next[e] = next[e - 1] + (*count)[e - 1];
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

at::Tensor HostCombine(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& tokens,
                       int64_t num_tokens) {
  at::Tensor out = at::zeros({num_tokens, ys.size(1)}, ys.options());
  const at::Tensor w = weights.contiguous(), t = tokens.contiguous();
  CombineRows(ys.data_ptr<float>(), w.data_ptr<float>(), t.data_ptr<int64_t>(), ys.size(0),
              ys.size(1), out.data_ptr<float>());
  return out;
}

}  // namespace fca::engine
