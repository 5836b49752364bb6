// The `olmoe`, `qwen2_moe` and `mixtral` families' network: checkpoint
// layout, initial weights, and the forward pass.
//
// The forward follows the Hugging Face eager forward op by op, in the same
// dtypes (docs/moe.md pins each convention): RMSNorm upcast to float32 and
// rounded before its weight, rotary with the half split and cos/sin rounded
// to the model dtype, attention scores divided by sqrt(head_dim), an
// additive mask of the dtype's lowest value, softmax in float32 rounded back,
// the router's softmax in float32, the routing weights cast to the model
// dtype after the optional renormalisation, and the experts' outputs added
// into a zero tensor one expert after the other in expert order. It uses no
// inference-only operation, so autograd can train through it (fca-train).
#include "server/engine/models/moe_net.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/models/attention.h"
#include "server/engine/models/host_gemm.h"
#include "server/engine/models/moe_host.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

struct Linear {
  at::Tensor w, b;  // [out, in], [out] (b undefined without bias)
};
struct Mlp {
  Linear gate, up, down;  // SwiGLU: down(silu(gate(x)) * up(x))
};
struct Layer {
  at::Tensor input_norm, post_attention_norm;
  Linear q, k, v, o;
  at::Tensor q_norm, k_norm;  // olmoe: over the full projection width
  at::Tensor router;          // [E, D]
  std::vector<Mlp> experts;
  Mlp shared;              // qwen2_moe
  at::Tensor shared_gate;  // qwen2_moe: [1, D]
};
struct Weights {
  at::Tensor embed, norm, head;
  std::vector<Layer> layers;
};

std::string LayerName(int64_t l, const std::string& rest) {
  return absl::StrCat("model.layers.", l, ".", rest);
}
// Where a layer's router and experts live: "mlp" (olmoe, qwen2_moe) or
// "block_sparse_moe" (mixtral).
std::string MoeName(const MoeConfig& c, int64_t l, const std::string& rest) {
  return LayerName(l, absl::StrCat(c.is_mixtral() ? "block_sparse_moe." : "mlp.", rest));
}

// The gate, up and down projections of an expert: Mixtral's w1, w3, w2.
struct MlpNames {
  const char *gate, *up, *down;
};
MlpNames ExpertNames(const MoeConfig& c) {
  return c.is_mixtral() ? MlpNames{"w1", "w3", "w2"}
                        : MlpNames{"gate_proj", "up_proj", "down_proj"};
}
constexpr MlpNames kSharedExpertNames{"gate_proj", "up_proj", "down_proj"};

void AddMlp(std::vector<WeightSpec>* s, const std::string& prefix, const MlpNames& names, int64_t d,
            int64_t width) {
  s->push_back({absl::StrCat(prefix, ".", names.gate, ".weight"), {width, d}, /*linear=*/true});
  s->push_back({absl::StrCat(prefix, ".", names.up, ".weight"), {width, d}, /*linear=*/true});
  s->push_back({absl::StrCat(prefix, ".", names.down, ".weight"), {d, width}, /*linear=*/true});
}

Weights BindWeights(const MoeConfig& c, const std::map<std::string, at::Tensor>& all) {
  auto t = [&](const std::string& name) {
    auto it = all.find(name);
    return it == all.end() ? at::Tensor() : it->second;
  };
  auto lin = [&](const std::string& n) { return Linear{t(n + ".weight"), t(n + ".bias")}; };
  auto mlp = [&](const std::string& n, const MlpNames& names) {
    return Mlp{lin(absl::StrCat(n, ".", names.gate)), lin(absl::StrCat(n, ".", names.up)),
               lin(absl::StrCat(n, ".", names.down))};
  };
  Weights w;
  w.embed = t("model.embed_tokens.weight");
  w.norm = t("model.norm.weight");
  w.head = c.tie_word_embeddings ? w.embed : t("lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Layer layer;
    layer.input_norm = t(LayerName(l, "input_layernorm.weight"));
    layer.post_attention_norm = t(LayerName(l, "post_attention_layernorm.weight"));
    layer.q = lin(LayerName(l, "self_attn.q_proj"));
    layer.k = lin(LayerName(l, "self_attn.k_proj"));
    layer.v = lin(LayerName(l, "self_attn.v_proj"));
    layer.o = lin(LayerName(l, "self_attn.o_proj"));
    layer.q_norm = t(LayerName(l, "self_attn.q_norm.weight"));
    layer.k_norm = t(LayerName(l, "self_attn.k_norm.weight"));
    layer.router = t(MoeName(c, l, "gate.weight"));
    for (int64_t e = 0; e < c.num_experts; ++e) {
      layer.experts.push_back(mlp(MoeName(c, l, absl::StrCat("experts.", e)), ExpertNames(c)));
    }
    if (c.has_shared_expert()) {
      layer.shared = mlp(LayerName(l, "mlp.shared_expert"), kSharedExpertNames);
      layer.shared_gate = t(LayerName(l, "mlp.shared_expert_gate.weight"));
    }
    w.layers.push_back(std::move(layer));
  }
  return w;
}

// The experts each token goes to and with what weight, grouped per expert:
// expert e runs over tokens[offset[e], offset[e] + count[e]).
struct Routing {
  at::Tensor tokens;   // int64 [N * k]
  at::Tensor weights;  // [N * k] in the model dtype
  std::vector<int64_t> count;
  at::Tensor rows;  // int64 [N, k]: each token's rows, increasing; host loops only
};

// ---------------------------------------------------------------------------
// Forward

class ForwardPass {
 public:
  // `expert_parameters`: the parameters of one routed expert; the model's
  // other parameters are read by every token.
  ForwardPass(const MoeConfig& config, const Weights& w, int64_t parameters,
              int64_t expert_parameters, ExecutionCounters* counters)
      : c_(config),
        w_(w),
        shared_parameters_(parameters -
                           config.num_hidden_layers * config.num_experts * expert_parameters),
        expert_parameters_(expert_parameters),
        counters_(counters) {}

  at::Tensor Run(const at::Tensor& ids, CoefficientMode mode, std::vector<at::Tensor>* coeff) {
    const int64_t B = ids.size(0), T = ids.size(1);
    if (counters_) {
      counters_->experts_per_layer = c_.num_experts;
      counters_->expert_tokens.assign(c_.num_hidden_layers * c_.num_experts, 0);
      counters_->parameters_read += static_cast<double>(B * T * shared_parameters_);
    }
    at::Tensor h = w_.embed.index_select(0, ids.reshape(-1)).view({B, T, c_.hidden_size});
    MakeRope(T, h.options());
    // The additive causal mask: 0 on and below the diagonal, the dtype's
    // lowest value above it.
    mask_ = at::full({T, T}, LowestOf(h.scalar_type()), h.options()).triu(1);
    size_t next_site = 0;
    PartTimer part(counters_ != nullptr && ids.is_cpu() ? &counters_->seconds : nullptr);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const Layer& layer = w_.layers[l];
      h = h + Attention(Rms(h, layer.input_norm), layer);
      const at::Tensor x = Rms(h, layer.post_attention_norm).view({B * T, c_.hidden_size});
      part.Restart();
      const bool last = l + 1 == c_.num_hidden_layers;
      at::Tensor probs, gate;  // [N, E] float32; [N, 1] model dtype (qwen2_moe)
      if (mode == CoefficientMode::kReplay) {
        // Replayed coefficients may come from the host (ModelAudit moves
        // them first; another caller may not).
        probs = (*coeff)[next_site++].reshape({B * T, c_.num_experts}).to(x.device(), at::kFloat);
        if (c_.has_shared_expert()) {
          gate = (*coeff)[next_site++].reshape({B * T, 1}).to(x.options());
        }
      } else if (OneDenseExpert()) {
        // Not computed: a softmax over one logit is exp(0) / exp(0) = 1.
        if (Records(mode)) coeff->push_back(at::ones({B, T, 1}, x.options().dtype(at::kFloat)));
      } else {
        probs = at::softmax(Lin(x, Linear{layer.router, at::Tensor()}), 1, at::kFloat);
        if (c_.has_shared_expert()) {
          gate = at::sigmoid(Lin(x, Linear{layer.shared_gate, at::Tensor()}));
        }
        if (Records(mode)) {
          coeff->push_back(probs.view({B, T, c_.num_experts}));
          if (gate.defined()) coeff->push_back(gate.to(at::kFloat).view({B, T, 1}));
        }
      }
      // The last router known, every coefficient is.
      if (last && mode == CoefficientMode::kRecordOnly) break;
      if (OneDenseExpert()) {
        h = h + DenseExpert(l, x, probs, &part).view({B, T, c_.hidden_size});
        continue;
      }
      part.Lap(&ExecutionCounters::PartSeconds::router);
      h = h + Moe(l, x, probs, gate, &part).view({B, T, c_.hidden_size});
    }
    if (counters_) counters_->tokens += B * T;
    if (mode == CoefficientMode::kRecordOnly) return at::Tensor();
    return Lin(Rms(h, w_.norm), Linear{w_.head, at::Tensor()});
  }

 private:
  static double LowestOf(at::ScalarType t) {
    return t == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                              : static_cast<double>(std::numeric_limits<float>::lowest());
  }

  at::Tensor Lin(const at::Tensor& x, const Linear& l) {
    CountFlops(x, l.w);
    if (HostLinearApplies(x, l.w)) return HostLinear(x, l.w, l.b);
    return at::linear(x, l.w, l.b);
  }

  // The multiply-adds of x [.., in] times w [out, in]^T, counted as FLOPs.
  void CountFlops(const at::Tensor& x, const at::Tensor& w) {
    if (!counters_) return;
    const double rows = static_cast<double>(x.numel() / std::max<int64_t>(x.size(-1), 1));
    counters_->flops += 2.0 * rows * static_cast<double>(w.size(0) * w.size(1));
  }

  // Upcast to float32, normalise, round back to the model dtype, then scale.
  at::Tensor Rms(const at::Tensor& x, const at::Tensor& weight) const {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
    return weight * (xf * at::rsqrt(var + c_.rms_norm_eps)).to(x.scalar_type());
  }

  // inv_freq = 1 / theta^(2i / head_dim) and the angles in float32, the
  // frequencies repeated for both halves, cos and sin rounded to the dtype.
  // sin_signed_ = cat(-sin, sin): rotate_half's sign folded into the sine (a
  // negation is exact, so the products round as rotate_half(x) * sin does).
  void MakeRope(int64_t T, const at::TensorOptions& options) {
    const int64_t hd = c_.head_dim();
    const auto f32 = options.dtype(at::kFloat);
    const at::Tensor exponents = at::arange(0, hd, 2, options.dtype(at::kLong)).to(at::kFloat) / hd;
    const at::Tensor inv_freq = at::reciprocal(at::pow(c_.rope_theta, exponents));
    const at::Tensor freqs = at::outer(at::arange(T, f32), inv_freq);  // [T, hd/2]
    const at::Tensor sin = freqs.sin();
    cos_ = at::cat({freqs, freqs}, -1).cos().to(options.dtype()).view({1, T, 1, hd});
    sin_signed_ = at::cat({-sin, sin}, -1).to(options.dtype()).view({1, T, 1, hd});
  }

  // x [B, T, heads, hd] -> x * cos + rotate_half(x) * sin, rotate_half(x) =
  // cat(-x2, x1), each product and the sum rounded to the dtype; on the CPU
  // outside autograd in one pass (moe_host.h).
  at::Tensor Rotary(const at::Tensor& x) const {
    if (HostLoopsApply(x)) return HostRotary(x, cos_, sin_signed_);
    const int64_t half = x.size(-1) / 2;
    at::Tensor rotated = at::cat({x.slice(-1, half), x.slice(-1, 0, half)}, -1);
    rotated.mul_(sin_signed_);
    return (x * cos_).add_(rotated);
  }

  // [B, KV, T, hd] -> [B, H, T, hd], each key/value head shared by H/KV
  // query heads in turn.
  at::Tensor RepeatKv(const at::Tensor& x) const {
    const int64_t rep = c_.num_attention_heads / c_.num_key_value_heads;
    if (rep == 1) return x;
    const int64_t B = x.size(0), KV = x.size(1), T = x.size(2), hd = x.size(3);
    return x.unsqueeze(2).expand({B, KV, rep, T, hd}).reshape({B, KV * rep, T, hd});
  }

  at::Tensor Attention(const at::Tensor& x, const Layer& l) {
    const int64_t B = x.size(0), T = x.size(1), H = c_.num_attention_heads,
                  KV = c_.num_key_value_heads, hd = c_.head_dim();
    at::Tensor q = Lin(x, l.q), k = Lin(x, l.k), v = Lin(x, l.v);
    if (c_.has_qk_norm()) {
      q = Rms(q, l.q_norm);
      k = Rms(k, l.k_norm);
    }
    if (c_.clip_qkv) {
      const double clip = *c_.clip_qkv;
      q = q.clamp(-clip, clip);
      k = k.clamp(-clip, clip);
      v = v.clamp(-clip, clip);
    }
    q = Rotary(q.view({B, T, H, hd})).transpose(1, 2);
    k = RepeatKv(Rotary(k.view({B, T, KV, hd})).transpose(1, 2));
    v = RepeatKv(v.view({B, T, KV, hd}).transpose(1, 2));
    if (counters_) counters_->flops += 2.0 * 2.0 * B * H * T * T * hd;
    const double root = std::sqrt(static_cast<double>(hd));
    // The dense twin's attention runs by the same blocks (attention.h).
    if (AttentionByBlocksApplies(B, x.is_cpu(), x.scalar_type())) {
      const at::Tensor ctx =
          CausalAttentionByBlocks(q.contiguous(), k.contiguous(), v.contiguous(),
                                  [&](at::Tensor& s, int64_t r0, int64_t r1) {
                                    s.div_(root).add_(mask_.slice(0, r0, r1).slice(1, 0, r1));
                                    return at::softmax(s, -1, at::kFloat).to(q.scalar_type());
                                  });
      return Lin(ctx.view({B, T, H * hd}), l.o);
    }
    at::Tensor scores = at::matmul(q, k.transpose(2, 3)) / root;
    scores = scores + mask_;
    const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    const at::Tensor ctx = at::matmul(probs, v);
    return Lin(ctx.transpose(1, 2).contiguous().reshape({B, T, H * hd}), l.o);
  }

  // The top-k of `probs` [N, E] float32 by a stable descending sort (ties go
  // to the lower expert index), renormalised when configured, cast to the
  // model dtype, and grouped per expert in the order (slot, token).
  Routing Route(const at::Tensor& probs, at::ScalarType dtype) const {
    const int64_t N = probs.size(0);
    auto [w, experts] = RouterTopK(probs, c_.num_experts_per_tok);
    if (c_.norm_topk_prob) w = w / w.sum(-1, /*keepdim=*/true);
    w = w.to(dtype);
    Routing r;
    if (HostLoopsApply(w)) {  // the grouping below in one pass (moe_host.h)
      HostGroupRoutes(experts, w, c_.num_experts, &r.tokens, &r.weights, &r.rows, &r.count);
      return r;
    }
    // Slot-major positions p = slot * N + token, grouped by expert, each
    // expert's positions in increasing order.
    const at::Tensor pos = GroupByExpert(experts.t().reshape(-1), &r.count);
    r.tokens = pos.remainder(N);
    r.weights = w.t().reshape(-1).index_select(0, pos);
    return r;
  }

  // flat [P] int64 expert ids -> the positions 0..P-1 stably sorted by expert,
  // and each expert's count in `count` (on the CPU a counting sort,
  // moe_host.h). Elsewhere in torch, the counts read on the host in one copy
  // per layer: they size the experts' slices.
  at::Tensor GroupByExpert(const at::Tensor& flat, std::vector<int64_t>* count) const {
    const int64_t E = c_.num_experts;
    if (flat.is_cpu()) return HostGroupByExpert(flat, E, count);
    const at::Tensor pos = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));
    const at::Tensor host =
        at::zeros({E}, flat.options()).scatter_add_(0, flat, at::ones_like(flat)).cpu();
    count->assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + E);
    return pos;
  }

  // silu(gate(x)) * up(x), in place where no gradient is recorded (the
  // projection is ours).
  at::Tensor SwiGluHidden(const at::Tensor& x, const Mlp& m, bool autograd) {
    at::Tensor hidden = Lin(x, m.gate);
    return autograd ? at::silu(hidden) * Lin(x, m.up) : at::silu_(hidden).mul_(Lin(x, m.up));
  }

  at::Tensor RunMlp(const at::Tensor& x, const Mlp& m) {
    return Lin(at::silu(Lin(x, m.gate)) * Lin(x, m.up), m.down);
  }

  // xs [N * k, D], the rows grouped per expert as Route orders them -> each
  // expert's SwiGLU over its own contiguous rows, in the same rows of the
  // result. Each expert's GEMMs read a slice of xs (no per-expert gather) and,
  // outside autograd, its down projection writes straight into the result (no
  // per-expert output to copy). Under autograd (fca-train) the experts'
  // outputs are concatenated instead: an out= GEMM records no gradient. The
  // same GEMMs on the same rows either way, so the numbers are the same.
  at::Tensor RunExperts(int64_t layer, const at::Tensor& xs, const std::vector<int64_t>& count) {
    const Layer& l = w_.layers[layer];
    const bool autograd = at::GradMode::is_enabled();
    at::Tensor ys = autograd ? at::Tensor() : at::empty_like(xs);
    std::vector<at::Tensor> outputs;
    int64_t offset = 0;
    for (int64_t e = 0; e < c_.num_experts; ++e) {
      const int64_t n = count[e];
      if (n == 0) continue;
      const Mlp& m = l.experts[e];
      const at::Tensor xe = xs.slice(0, offset, offset + n);
      const at::Tensor hidden = SwiGluHidden(xe, m, autograd);
      if (autograd) {
        outputs.push_back(Lin(hidden, m.down));
      } else {
        CountFlops(hidden, m.down.w);
        at::Tensor into = ys.slice(0, offset, offset + n);
        if (HostLinearApplies(hidden, m.down.w)) {
          HostLinearInto(hidden, m.down.w, into);
        } else {
          at::mm_out(into, hidden, m.down.w.t());
        }
      }
      offset += n;
      if (counters_) {
        counters_->expert_tokens[layer * c_.num_experts + e] += n;
        counters_->parameters_read += static_cast<double>(n * expert_parameters_);
      }
    }
    if (!autograd) return ys;
    return outputs.empty() ? xs : at::cat(outputs);  // no rows: nothing ran
  }

  // x [N, D] -> the MoE output [N, D]: the tokens gathered once in expert
  // order, each routed expert once over its rows, each row weighted, and all
  // added into a zero tensor in one pass whose rows go expert after expert
  // (Combine), so each token sums its experts in increasing expert index (the
  // reference's order: one index_add per expert). The shared expert
  // (qwen2_moe) is scaled by its gate and added last.
  // `part` times the dispatch and the experts.
  at::Tensor Moe(int64_t layer, const at::Tensor& x, const at::Tensor& probs,
                 const at::Tensor& gate, PartTimer* part) {
    const Layer& l = w_.layers[layer];
    const int64_t N = x.size(0);
    const Routing r = Route(probs, x.scalar_type());
    const at::Tensor xs = x.index_select(0, r.tokens);
    part->Lap(&ExecutionCounters::PartSeconds::dispatch);
    const at::Tensor ys = RunExperts(layer, xs, r.count);
    part->Lap(&ExecutionCounters::PartSeconds::experts);
    at::Tensor out = Combine(x, ys, r);
    part->Lap(&ExecutionCounters::PartSeconds::dispatch);
    int64_t blocks_run = N * c_.num_experts_per_tok, blocks = N * c_.num_experts;
    if (gate.defined()) {
      out = out + gate * RunMlp(x, l.shared);
      blocks_run += N;
      blocks += N;
      part->Lap(&ExecutionCounters::PartSeconds::experts);
    }
    if (counters_) {
      counters_->blocks_executed += blocks_run;
      counters_->blocks_total += blocks;
    }
    return out;
  }

  // A dense config (MoeConfig::is_dense) outside autograd: each layer is its
  // expert's SwiGLU over every token in token order. Its router's softmax
  // gives each token weight exactly 1 (for any finite logit), so the top-k,
  // the gather and the combine only move rows: Hugging Face's
  // zeros.index_add_(y * 1) has these values. A dense twin of an olmoe model
  // is such a folder (fca.md "A matched twin"), timed as a dense MLP is.
  // fca-train keeps the routed path (its optimiser steps the router too).
  bool OneDenseExpert() const { return c_.is_dense() && !at::GradMode::is_enabled(); }

  // x [N, D] -> the expert's output [N, D], each row scaled by its replayed
  // weight when `replayed` [N, 1] float32 is given (REPLAY of LIVE's ones is
  // then LIVE bitwise: y * 1 = y); LIVE skips the product.
  at::Tensor DenseExpert(int64_t layer, const at::Tensor& x, const at::Tensor& replayed,
                         PartTimer* part) {
    const Mlp& m = w_.layers[layer].experts[0];
    const int64_t N = x.size(0);
    at::Tensor y = Lin(SwiGluHidden(x, m, /*autograd=*/false), m.down);
    if (replayed.defined()) y.mul_(replayed.to(y.scalar_type()));
    part->Lap(&ExecutionCounters::PartSeconds::mlp);
    if (counters_) {
      counters_->expert_tokens[layer] += N;
      counters_->parameters_read += static_cast<double>(N * expert_parameters_);
      counters_->blocks_executed += N;
      counters_->blocks_total += N;
    }
    return y;
  }

  // Each row of ys [P, D] weighted and added into its token's row of a zero
  // tensor like x, rows in order: out[t] = (0 + y_a * w_a) + y_b * w_b ...,
  // each product and sum rounded to the dtype; on the CPU outside autograd in
  // one pass (moe_host.h).
  static at::Tensor Combine(const at::Tensor& x, const at::Tensor& ys, const Routing& r) {
    if (r.rows.defined() && HostLoopsApply(ys)) return HostCombine(ys, r.weights, r.rows);
    return at::zeros_like(x).index_add_(0, r.tokens, ys * r.weights.unsqueeze(1));
  }

  const MoeConfig& c_;
  const Weights& w_;
  const int64_t shared_parameters_, expert_parameters_;
  ExecutionCounters* counters_;
  at::Tensor mask_;              // [T, T] additive causal mask
  at::Tensor cos_, sin_signed_;  // [1, T, 1, hd] in the model dtype
};

}  // namespace

std::pair<at::Tensor, at::Tensor> RouterTopK(const at::Tensor& probs, int64_t k) {
  // The values are gathered from `probs`, so autograd (fca-train) sees them.
  if (probs.is_cpu() && probs.scalar_type() == at::kFloat && probs.dim() == 2) {
    at::Tensor experts = HostTopKExperts(probs, k);
    return {probs.gather(-1, experts), std::move(experts)};
  }
  auto sorted = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  return {std::get<0>(sorted).slice(-1, 0, k), std::get<1>(sorted).slice(-1, 0, k)};
}

std::vector<WeightSpec> MoeWeightSpecs(const MoeConfig& c) {
  const int64_t d = c.hidden_size, qw = c.num_attention_heads * c.head_dim(), kw = c.kv_width();
  std::vector<WeightSpec> s;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, d}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    s.push_back({LayerName(l, "input_layernorm.weight"), {d}});
    s.push_back({LayerName(l, "post_attention_layernorm.weight"), {d}});
    const struct {
      const char* name;
      int64_t out, in;
      bool bias;
    } projections[] = {
        {"q_proj", qw, d, c.attention_bias},
        {"k_proj", kw, d, c.attention_bias},
        {"v_proj", kw, d, c.attention_bias},
        // Qwen2-MoE's o_proj has no bias; OLMoE's has one with attention_bias.
        {"o_proj", d, qw, c.attention_bias && c.is_olmoe()},
    };
    for (const auto& p : projections) {
      const std::string name = LayerName(l, absl::StrCat("self_attn.", p.name));
      s.push_back({name + ".weight", {p.out, p.in}, /*linear=*/true});
      if (p.bias) s.push_back({name + ".bias", {p.out}});
    }
    if (c.has_qk_norm()) {
      s.push_back({LayerName(l, "self_attn.q_norm.weight"), {qw}});
      s.push_back({LayerName(l, "self_attn.k_norm.weight"), {kw}});
    }
    s.push_back({MoeName(c, l, "gate.weight"), {c.num_experts, d}});
    for (int64_t e = 0; e < c.num_experts; ++e) {
      AddMlp(&s, MoeName(c, l, absl::StrCat("experts.", e)), ExpertNames(c), d,
             c.expert_intermediate_size);
    }
    if (c.has_shared_expert()) {
      AddMlp(&s, LayerName(l, "mlp.shared_expert"), kSharedExpertNames, d,
             c.shared_expert_intermediate_size);
      s.push_back({LayerName(l, "mlp.shared_expert_gate.weight"), {1, d}});
    }
  }
  s.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

struct MoeNet::Layout {
  std::vector<at::Tensor> all;  // MoeWeightSpecs order
  Weights w;
};

MoeNet::MoeNet(MoeConfig config, std::unique_ptr<Layout> layout, int64_t num_parameters)
    : config_(std::move(config)), layout_(std::move(layout)), num_parameters_(num_parameters) {}

MoeNet::~MoeNet() = default;

const std::vector<at::Tensor>& MoeNet::weights() const { return layout_->all; }

absl::StatusOr<std::unique_ptr<MoeNet>> MoeNet::Create(const MoeConfig& config,
                                                       std::vector<at::Tensor> weights) {
  const std::vector<WeightSpec> specs = MoeWeightSpecs(config);
  if (weights.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s model with this config has %d weight tensors, got %d",
                        config.model_type, specs.size(), weights.size()));
  }
  std::map<std::string, at::Tensor> named;
  int64_t parameters = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!weights[i].defined() || weights[i].sizes().vec() != specs[i].shape) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "weight '%s' must have shape [%s]", specs[i].name, absl::StrJoin(specs[i].shape, ", ")));
    }
    named[specs[i].name] = weights[i];
    parameters += weights[i].numel();
  }
  auto layout = std::make_unique<Layout>();
  layout->w = BindWeights(config, named);
  layout->all = std::move(weights);
  return std::unique_ptr<MoeNet>(new MoeNet(config, std::move(layout), parameters));
}

absl::StatusOr<at::Tensor> MoeNet::Forward(const at::Tensor& ids, CoefficientMode mode,
                                           std::vector<at::Tensor>* coefficients,
                                           ExecutionCounters* counters) const {
  return GuardTorch(config_.model_type + " forward", [&]() -> absl::StatusOr<at::Tensor> {
    return ForwardPass(config_, layout_->w, num_parameters_, expert_parameters(), counters)
        .Run(ids, mode, coefficients);
  });
}

}  // namespace fca::engine
