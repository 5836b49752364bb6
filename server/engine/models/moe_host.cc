#include "server/engine/models/moe_host.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace fca::engine {
namespace {

// Whether a is ranked before b in a descending sort: NaN first, as torch's
// sort puts it.
bool RanksBefore(float a, float b) { return (std::isnan(a) && !std::isnan(b)) || a > b; }

template <typename T>
void RotaryRows(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                at::Tensor* out) {
  const int64_t B = x.size(0), positions = x.size(1), heads = x.size(2), hd = x.size(3);
  const int64_t half = hd / 2;
  const T* in = x.data_ptr<T>();
  T* o = out->data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < positions; ++t) {
      const T* c = cos.data_ptr<T>() + t * hd;
      const T* s = sin.data_ptr<T>() + t * hd;
      for (int64_t h = 0; h < heads; ++h, in += hd, o += hd) {
        for (int64_t i = 0; i < half; ++i) o[i] = in[i] * c[i] + in[i + half] * s[i];
        for (int64_t i = half; i < hd; ++i) o[i] = in[i] * c[i] + in[i - half] * s[i];
      }
    }
  }
}

template <typename T>
void CombineRows(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& tokens,
                 at::Tensor* out) {
  const int64_t P = ys.size(0), D = ys.size(1);
  const T* y = ys.data_ptr<T>();
  const T* w = weights.data_ptr<T>();
  const int64_t* token = tokens.data_ptr<int64_t>();
  T* o = out->data_ptr<T>();
  for (int64_t p = 0; p < P; ++p) {
    T* row = o + token[p] * D;
    const T* src = y + p * D;
    for (int64_t d = 0; d < D; ++d) row[d] = row[d] + src[d] * w[p];
  }
}

}  // namespace

bool HostLoopsApply(const at::Tensor& t) {
  return t.is_cpu() && !at::GradMode::is_enabled() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
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
  if (x.scalar_type() == at::kFloat) {
    RotaryRows<float>(x, c, s, &out);
  } else {
    RotaryRows<c10::BFloat16>(x, c, s, &out);
  }
  return out;
}

at::Tensor HostCombine(const at::Tensor& ys, const at::Tensor& weights, const at::Tensor& tokens,
                       int64_t num_tokens) {
  at::Tensor out = at::zeros({num_tokens, ys.size(1)}, ys.options());
  const at::Tensor w = weights.contiguous(), t = tokens.contiguous();
  if (ys.scalar_type() == at::kFloat) {
    CombineRows<float>(ys, w, t, &out);
  } else {
    CombineRows<c10::BFloat16>(ys, w, t, &out);
  }
  return out;
}

}  // namespace fca::engine
