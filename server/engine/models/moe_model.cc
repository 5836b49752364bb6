// The `olmoe`, `qwen2_moe` and `mixtral` families: checkpoint layout, the forward pass
// and MoeModel, the ControlledModel that runs it.
//
// The forward follows the Hugging Face eager forward op by op, in the same
// dtypes (docs/moe.md pins each convention): RMSNorm upcast to float32 and
// rounded before its weight, rotary with the half split and cos/sin rounded
// to the model dtype, attention scores divided by sqrt(head_dim), an
// additive mask of the dtype's lowest value, softmax in float32 rounded back,
// the router's softmax in float32, the routing weights cast to the model
// dtype after the optional renormalisation, and the experts' outputs added
// into a zero tensor one expert after the other in expert order.
#include "server/engine/models/moe_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

constexpr char kRouterFamily[] = "router";

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
  s->push_back({absl::StrCat(prefix, ".", names.gate, ".weight"), {width, d}});
  s->push_back({absl::StrCat(prefix, ".", names.up, ".weight"), {width, d}});
  s->push_back({absl::StrCat(prefix, ".", names.down, ".weight"), {d, width}});
}

absl::StatusOr<TensorView> CheckedView(const TensorSource& src, const WeightSpec& spec,
                                       const std::string& family) {
  if (!src.Has(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("checkpoint has no tensor '%s', which a %s model with this config.json "
                        "needs",
                        spec.name, family));
  }
  FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(spec.name));
  if (view.shape != spec.shape) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' has shape [%s]; config.json implies [%s]", spec.name,
                        absl::StrJoin(view.shape, ", "), absl::StrJoin(spec.shape, ", ")));
  }
  if (view.dtype != DType::kF32 && view.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' is stored as %s; %s weights must be F32 or BF16", spec.name,
                        std::string(DTypeName(view.dtype)), family));
  }
  return view;
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
};

// The top-k of each row of `probs` [N, E] float32 by a stable descending
// sort, so ties go to the lower expert index: the k values and the k experts,
// both [N, k], largest first. The forward's routing (LIVE and REPLAY) and
// ChosenExperts both choose here.
std::pair<at::Tensor, at::Tensor> TopK(const at::Tensor& probs, int64_t k) {
  auto sorted = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  return {std::get<0>(sorted).slice(-1, 0, k), std::get<1>(sorted).slice(-1, 0, k)};
}

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
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const Layer& layer = w_.layers[l];
      h = h + Attention(Rms(h, layer.input_norm), layer);
      const at::Tensor x = Rms(h, layer.post_attention_norm).view({B * T, c_.hidden_size});
      const bool last = l + 1 == c_.num_hidden_layers;
      at::Tensor probs, gate;  // [N, E] float32; [N, 1] model dtype (qwen2_moe)
      if (mode == CoefficientMode::kReplay) {
        probs = (*coeff)[next_site++].reshape({B * T, c_.num_experts}).to(at::kFloat);
        if (c_.has_shared_expert()) {
          gate = (*coeff)[next_site++].reshape({B * T, 1}).to(x.scalar_type());
        }
      } else {
        probs = at::softmax(Lin(x, Linear{layer.router, at::Tensor()}), 1, at::kFloat);
        if (c_.has_shared_expert()) {
          gate = at::sigmoid(Lin(x, Linear{layer.shared_gate, at::Tensor()}));
        }
        if (Records(mode)) {
          coeff->push_back(probs.view({B, T, c_.num_experts}));
          if (gate.defined()) coeff->push_back(gate.to(at::kFloat).view({B, T, 1}));
        }
        // The last router known, every coefficient is.
        if (last && mode == CoefficientMode::kRecordOnly) break;
      }
      h = h + Moe(l, x, probs, gate).view({B, T, c_.hidden_size});
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
    if (counters_) {
      const double rows = static_cast<double>(x.numel() / std::max<int64_t>(x.size(-1), 1));
      counters_->flops += 2.0 * rows * static_cast<double>(l.w.size(0) * l.w.size(1));
    }
    return at::linear(x, l.w, l.b);
  }

  // Upcast to float32, normalise, round back to the model dtype, then scale.
  at::Tensor Rms(const at::Tensor& x, const at::Tensor& weight) const {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
    return weight * (xf * at::rsqrt(var + c_.rms_norm_eps)).to(x.scalar_type());
  }

  // inv_freq = 1 / theta^(2i / head_dim) and the angles in float32, the
  // frequencies repeated for both halves, cos and sin rounded to the dtype.
  void MakeRope(int64_t T, const at::TensorOptions& options) {
    const int64_t hd = c_.head_dim();
    const auto f32 = options.dtype(at::kFloat);
    const at::Tensor exponents = at::arange(0, hd, 2, options.dtype(at::kLong)).to(at::kFloat) / hd;
    const at::Tensor inv_freq = at::reciprocal(at::pow(c_.rope_theta, exponents));
    const at::Tensor freqs = at::outer(at::arange(T, f32), inv_freq);  // [T, hd/2]
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    cos_ = emb.cos().to(options.dtype()).view({1, 1, T, hd});
    sin_ = emb.sin().to(options.dtype()).view({1, 1, T, hd});
  }

  // x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
  at::Tensor Rotary(const at::Tensor& x) const {
    const int64_t half = x.size(-1) / 2;
    const at::Tensor rotated = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
    return x * cos_ + rotated * sin_;
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
    q = Rotary(q.view({B, T, H, hd}).transpose(1, 2));
    k = RepeatKv(Rotary(k.view({B, T, KV, hd}).transpose(1, 2)));
    v = RepeatKv(v.view({B, T, KV, hd}).transpose(1, 2));
    at::Tensor scores = at::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(hd));
    scores = scores + mask_;
    const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    const at::Tensor ctx = at::matmul(probs, v);
    if (counters_) counters_->flops += 2.0 * 2.0 * B * H * T * T * hd;
    return Lin(ctx.transpose(1, 2).contiguous().reshape({B, T, H * hd}), l.o);
  }

  // The top-k of `probs` [N, E] float32 by a stable descending sort (ties go
  // to the lower expert index), renormalised when configured, cast to the
  // model dtype, and grouped per expert in the order (slot, token).
  Routing Route(const at::Tensor& probs, at::ScalarType dtype) const {
    const int64_t N = probs.size(0);
    auto [w, experts] = TopK(probs, c_.num_experts_per_tok);
    if (c_.norm_topk_prob) w = w / w.sum(-1, /*keepdim=*/true);
    w = w.to(dtype);
    // Slot-major positions p = slot * N + token, grouped by expert; a stable
    // sort keeps each expert's positions in increasing order.
    const at::Tensor flat = experts.t().reshape(-1);
    const at::Tensor pos = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));
    Routing r;
    r.tokens = pos.remainder(N);
    r.weights = w.t().reshape(-1).index_select(0, pos);
    const at::Tensor count = at::bincount(flat, {}, c_.num_experts).cpu();
    const int64_t* data = count.data_ptr<int64_t>();
    r.count.assign(data, data + c_.num_experts);
    return r;
  }

  at::Tensor RunMlp(const at::Tensor& x, const Mlp& m) {
    return Lin(at::silu(Lin(x, m.gate)) * Lin(x, m.up), m.down);
  }

  // x [N, D] -> the MoE output [N, D]: each routed expert once over its
  // tokens, weighted and added in expert order; the shared expert (qwen2_moe)
  // scaled by its gate and added last.
  at::Tensor Moe(int64_t layer, const at::Tensor& x, const at::Tensor& probs,
                 const at::Tensor& gate) {
    const Layer& l = w_.layers[layer];
    const int64_t N = x.size(0);
    const Routing r = Route(probs, x.scalar_type());
    at::Tensor out = at::zeros_like(x);
    int64_t offset = 0;
    for (int64_t e = 0; e < c_.num_experts; ++e) {
      const int64_t n = r.count[e];
      if (n == 0) continue;
      const at::Tensor tokens = r.tokens.slice(0, offset, offset + n);
      const at::Tensor y = RunMlp(x.index_select(0, tokens), l.experts[e]) *
                           r.weights.slice(0, offset, offset + n).unsqueeze(1);
      out.index_add_(0, tokens, y);
      offset += n;
      if (counters_) {
        counters_->expert_tokens[layer * c_.num_experts + e] += n;
        counters_->parameters_read += static_cast<double>(n * expert_parameters_);
      }
    }
    int64_t blocks_run = N * c_.num_experts_per_tok, blocks = N * c_.num_experts;
    if (gate.defined()) {
      out = out + gate * RunMlp(x, l.shared);
      blocks_run += N;
      blocks += N;
    }
    if (counters_) {
      counters_->blocks_executed += blocks_run;
      counters_->blocks_total += blocks;
    }
    return out;
  }

  const MoeConfig& c_;
  const Weights& w_;
  const int64_t shared_parameters_, expert_parameters_;
  ExecutionCounters* counters_;
  at::Tensor mask_;       // [T, T] additive causal mask
  at::Tensor cos_, sin_;  // [1, 1, T, hd] in the model dtype
};

// ---------------------------------------------------------------------------
// The model

class MoeModel : public ControlledModel {
 public:
  MoeModel(MoeConfig config, ModelInfo info) : config_(std::move(config)), info_(std::move(info)) {
    sites_ = DescribeMoe(config_, &info_);
  }

  absl::Status Load(const TensorSource& src) {
    const std::vector<WeightSpec> specs = MoeWeightSpecs(config_);
    std::vector<TensorView> views;
    std::set<std::string> expected;
    int64_t params = 0;
    for (const WeightSpec& spec : specs) {
      FCA_ASSIGN_OR_RETURN(TensorView view, CheckedView(src, spec, config_.model_type));
      params += view.numel();
      expected.insert(spec.name);
      views.push_back(std::move(view));
    }
    for (const std::string& name : src.Names()) {
      if (expected.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor '%s' is not part of a %s model with this config.json", name,
                            config_.model_type));
      }
    }
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> loaded, LoadTensors(src, views, info_.compute));
    std::map<std::string, at::Tensor> tensors;
    for (size_t i = 0; i < specs.size(); ++i) tensors[specs[i].name] = std::move(loaded[i]);
    info_.num_parameters = params;
    weights_ = BindWeights(config_, tensors);
    return absl::OkStatus();
  }

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return sites_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  ExecutionCounters counters() const override { return counters_.Get(); }
  void ResetCounters() override { counters_.Reset(); }

  // The coefficients of zero controller logits: router probabilities 1/E
  // (the top-k then takes experts 0..k-1, ties going to the lower index),
  // a shared-expert gate of sigmoid(0) = 0.5.
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return GuardTorch("model '" + info_.name + "' neutral coefficients",
                      [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
                        const auto f32 =
                            at::TensorOptions().dtype(at::kFloat).device(weights_.embed.device());
                        std::vector<at::Tensor> out;
                        for (const CoefficientSite& s : sites_) {
                          const double value = s.family == kRouterFamily ? 1.0 / s.channels : 0.5;
                          out.push_back(at::full({s.channels}, value, f32));
                        }
                        return out;
                      });
  }

  std::vector<int64_t> RoutedExperts() const override {
    std::vector<int64_t> k;
    for (const CoefficientSite& s : sites_) {
      k.push_back(s.family == kRouterFamily ? config_.num_experts_per_tok : 0);
    }
    return k;
  }

  // What REPLAY would choose from `coefficients`: converted to float32 and
  // through the forward's own TopK.
  absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const override {
    if (coefficients.size() != sites_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chosen experts: %d coefficient tensors for %d sites",
                          coefficients.size(), sites_.size()));
    }
    return GuardTorch("model '" + info_.name + "' chosen experts",
                      [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
                        c10::InferenceMode guard;
                        std::vector<at::Tensor> out;
                        for (size_t s = 0; s < sites_.size(); ++s) {
                          if (sites_[s].family != kRouterFamily) {
                            out.emplace_back();
                            continue;
                          }
                          FCA_ASSIGN_OR_RETURN(at::Tensor chosen, ChosenAt(coefficients[s], s));
                          out.push_back(std::move(chosen));
                        }
                        return out;
                      });
  }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    FCA_RETURN_IF_ERROR(CheckForwardInputs(ids, mode, coefficients, info_, sites_,
                                           config_.max_position_embeddings, config_.vocab_size));
    return GuardTorch("model '" + info_.name + "' forward", [&]() -> absl::StatusOr<at::Tensor> {
      c10::InferenceMode guard;
      std::vector<at::Tensor> recorded;
      const at::Tensor on_device = ids.to(weights_.embed.device());
      ExecutionCounters counted;
      at::Tensor logits =
          ForwardPass(config_, weights_, info_.num_parameters, ExpertParameters(), &counted)
              .Run(on_device, mode, Records(mode) ? &recorded : coefficients);
      counters_.Add(counted);
      if (Records(mode)) *coefficients = std::move(recorded);
      return logits;
    });
  }

 private:
  // A router site's [B, T, E] coefficients -> the chosen experts [B, T, k]
  // in increasing index.
  absl::StatusOr<at::Tensor> ChosenAt(const at::Tensor& a, size_t site) const {
    const int64_t E = config_.num_experts, k = config_.num_experts_per_tok;
    if (a.dim() != 3 || a.size(2) != E) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chosen experts: site '%s' needs [B, T, %d] coefficients", sites_[site].name, E));
    }
    const at::Tensor experts = TopK(a.reshape({-1, E}).to(at::kFloat), k).second;
    return std::get<0>(at::sort(experts, -1)).view({a.size(0), a.size(1), k});
  }

  int64_t ExpertParameters() const {
    return 3 * config_.hidden_size * config_.expert_intermediate_size;
  }

  MoeConfig config_;
  ModelInfo info_;
  std::vector<CoefficientSite> sites_;
  ByteTokenizer tokenizer_;
  SharedCounters counters_;
  Weights weights_;
};

}  // namespace

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
      s.push_back({name + ".weight", {p.out, p.in}});
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

std::vector<CoefficientSite> DescribeMoe(const MoeConfig& config, ModelInfo* info) {
  info->family = config.model_type;
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_position_embeddings;
  info->num_layers = config.num_hidden_layers;
  std::vector<CoefficientSite> sites;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    sites.push_back({absl::StrCat("router.", l), kRouterFamily, l, config.num_experts});
    if (config.has_shared_expert()) {
      sites.push_back({absl::StrCat("shared_gate.", l), "shared_gate", l, 1});
    }
  }
  return sites;
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateMoeModel(const MoeConfig& config,
                                                                const TensorSource& weights,
                                                                ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateCompute(info.compute));
  if (info.compute.dtype != ComputeDType::kFloat32 &&
      info.compute.dtype != ComputeDType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrFormat("%s computes in float32 or bfloat16, not %s",
                                                      config.model_type,
                                                      ComputeDTypeName(info.compute.dtype)));
  }
  auto model = std::make_unique<MoeModel>(config, std::move(info));
  FCA_RETURN_IF_ERROR(model->Load(weights));
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
