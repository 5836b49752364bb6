// The `muddpythia` family: config.json, the checkpoint layout, the forward
// pass (design note muddpythia.md, section 2) and MuddPythiaModel, the
// SafetensorsModel that runs it.
//
// The forward copies the reference's op order and dtypes, because its
// coefficients are audited by replay and must match the reference's to the
// last bits that the platform allows: QK-norm upcasts to fp32, the rope table
// is rounded to fp16 and applied in fp32, LayerNorm is torch's own in the
// model dtype (the reference runs nn.LayerNorm natively in bf16; libtorch
// 1.13's CPU bf16 kernel keeps its moments in bf16, which no float32
// computation reproduces, so the faster LayerNormInFloat would move the NLL
// by ~4e-3: docs/fca.md, "bfloat16 numerics"), everything else (the
// controller's RMSNorm, the dense_bs add, the softmax and the MUDD sum) runs
// in the model dtype.
#include "server/engine/models/muddpythia_model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/models/safetensors_model.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

constexpr int64_t kMaxFfnWidth = 1 << 18;
// The reference fills masked attention scores with float16's lowest value in
// every model dtype (it rounds to -65536 in bfloat16).
constexpr double kMaskFill = -65504.0;
constexpr const char* kStreamFamilies[] = {"q", "k", "v", "r"};

// ---------------------------------------------------------------------------
// config.json

absl::Status ConfigError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", what));
}

absl::Status NotImplemented(const std::string& key, const std::string& supported) {
  return ConfigError(absl::StrFormat(
      "'%s' other than %s is not implemented (only the MUDDPythia-1.4B configuration is "
      "supported)",
      key, supported));
}

// Typed reads of config.json keys with "config.json: field ..." messages.
// Ranges are checked afterwards by ValidateConfig.
class ConfigReader {
 public:
  explicit ConfigReader(const json::Value& doc) : doc_(doc) {}

  absl::Status Int(const char* key, int64_t* out) const {
    absl::StatusOr<int64_t> v = json::GetInt(doc_, key);
    if (!v.ok()) return ConfigError(v.status().message());
    *out = *v;
    return absl::OkStatus();
  }

  absl::Status Number(const char* key, double* out) const {
    absl::StatusOr<double> v = json::GetDouble(doc_, key);
    if (!v.ok()) return ConfigError(v.status().message());
    *out = *v;
    return absl::OkStatus();
  }

  // A boolean switch that must have the one value we implement.
  absl::Status Switch(const char* key, bool supported) const {
    absl::StatusOr<bool> v = json::GetBool(doc_, key);
    if (!v.ok()) return ConfigError(v.status().message());
    if (*v != supported) return NotImplemented(key, supported ? "true" : "false");
    return absl::OkStatus();
  }

  absl::Status StringSwitch(const char* key, const std::string& supported) const {
    absl::StatusOr<std::string> v = json::GetString(doc_, key);
    if (!v.ok()) return ConfigError(v.status().message());
    if (*v != supported) return NotImplemented(key, "\"" + supported + "\"");
    return absl::OkStatus();
  }

  bool Has(const char* key) const { return doc_.Find(key) != nullptr; }

 private:
  const json::Value& doc_;
};

absl::Status CheckSwitches(const ConfigReader& r) {
  FCA_RETURN_IF_ERROR(r.StringSwitch("dense_type", "qkvr"));
  struct Required {
    const char* key;
    bool value;
  };
  constexpr Required kRequired[] = {
      {"dense", true},
      {"dynamic_dense", true},
      {"sepln", true},
      {"expand_last", true},
      {"round64", true},
      {"use_qk_norm", true},
      {"use_parallel_residual", true},
      {"use_linear_bias", true},
      {"tie_word_embeddings", false},
  };
  for (const Required& s : kRequired) FCA_RETURN_IF_ERROR(r.Switch(s.key, s.value));
  // The reference config class defaults stack_hidden to false, and published
  // copies of the 1.4B config.json omit the key, so absence means false.
  if (r.Has("stack_hidden")) FCA_RETURN_IF_ERROR(r.Switch("stack_hidden", false));
  return absl::OkStatus();
}

absl::Status ValidateConfig(const MuddPythiaConfig& c) {
  auto range = [](const char* key, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return ConfigError(absl::StrFormat("field '%s' is %d; it must be in [%d, %d]", key, v, lo, hi));
  };
  FCA_RETURN_IF_ERROR(range("dim", c.dim, 1, 1 << 16));
  // The reference's FFN width formula divides by n_layer - 1.
  FCA_RETURN_IF_ERROR(range("n_layer", c.n_layer, 2, 1024));
  FCA_RETURN_IF_ERROR(range("n_head", c.n_head, 1, c.dim));
  FCA_RETURN_IF_ERROR(range("vocab_size", c.vocab_size, 1, 1 << 22));
  FCA_RETURN_IF_ERROR(range("intermediate_size", c.intermediate_size, 1, kMaxFfnWidth));
  FCA_RETURN_IF_ERROR(range("block_size", c.block_size, 1, 1 << 20));
  if (c.dim % c.n_head != 0) {
    return ConfigError(absl::StrFormat("dim %d is not divisible by n_head %d", c.dim, c.n_head));
  }
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) {
    return ConfigError(absl::StrFormat("field 'norm_eps' is %g; it must be in (0, 1)", c.norm_eps));
  }
  if (!(c.rope_base > 1 && c.rope_base < 1e12)) {
    return ConfigError(
        absl::StrFormat("field 'rope_base' is %g; it must be in (1, 1e12)", c.rope_base));
  }
  // The rotated dims pair m with m + rot/2, so their count must be whole and even.
  const double rot = c.rotary_pct * static_cast<double>(c.head_dim());
  if (!(c.rotary_pct > 0 && c.rotary_pct <= 1) || rot != std::floor(rot) || rot < 2 ||
      static_cast<int64_t>(rot) % 2 != 0) {
    return ConfigError(absl::StrFormat(
        "rotary_pct %g times head_dim %d must be a whole even number of dims in [2, head_dim]",
        c.rotary_pct, c.head_dim()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Checkpoint layout

struct Linear {
  at::Tensor w, b;  // [out, in], [out] (b undefined when the layer has no bias)
};
struct Norm {
  at::Tensor w, b;
};
struct Layer {
  std::vector<Norm> attention_norms;  // layer 0: one, shared by q, k, v; then q, k, v
  Linear wq, wk, wv, wo;
  at::Tensor q_norm, k_norm;  // [head_dim]
  Norm ffn_norm;
  Linear w1, w2;  // FFN; width may be 0
  // The MUDD step after this layer.
  at::Tensor dense_bs;  // [C, L]
  Linear mudd_w1, mudd_w2;
};
struct Weights {
  at::Tensor embed, head;
  Norm norm;
  std::vector<Layer> layers;
};

std::string LayerName(int64_t l, const std::string& rest) {
  return absl::StrCat("layers.", l, ".", rest);
}
std::string MuddName(int64_t i, const std::string& rest) {
  return absl::StrCat("dynamic_dense.", i, ".", rest);
}

absl::Status MissingTensor(const std::string& name) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "checkpoint has no tensor '%s', which a muddpythia model with this config.json needs", name));
}

// The FFN width of layer l: the rows of its w1 (the reference's widths vary by
// layer and can round to 0, so they are read, not computed).
absl::StatusOr<int64_t> FfnWidth(const TensorSource& src, int64_t l, int64_t dim) {
  const std::string name = LayerName(l, "feed_forward.w1.weight");
  if (!src.Has(name)) return MissingTensor(name);
  FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(name));
  if (view.shape.size() != 2 || view.shape[1] != dim || view.shape[0] > kMaxFfnWidth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' has shape [%s]; it must be [width, %d] with width in [0, %d]",
                        name, absl::StrJoin(view.shape, ", "), dim, kMaxFfnWidth));
  }
  return view.shape[0];
}

// `all` holds every tensor of MuddPythiaWeightSpecs (checked by the caller).
Weights BindWeights(const MuddPythiaConfig& c, const std::map<std::string, at::Tensor>& all) {
  auto t = [&](const std::string& name) {
    auto it = all.find(name);
    return it == all.end() ? at::Tensor() : it->second;
  };
  auto lin = [&](const std::string& n) { return Linear{t(n + ".weight"), t(n + ".bias")}; };
  auto norm = [&](const std::string& n) { return Norm{t(n + ".weight"), t(n + ".bias")}; };
  Weights w;
  w.embed = t("tok_embeddings.weight");
  w.head = t("output.weight");
  w.norm = norm("norm");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    Layer layer;
    if (l == 0) {
      layer.attention_norms.push_back(norm(LayerName(l, "attention_norm")));
    } else {
      for (int k = 0; k < 3; ++k) {
        layer.attention_norms.push_back(norm(LayerName(l, absl::StrCat("attention_norms.", k))));
      }
    }
    layer.wq = lin(LayerName(l, "attention.wq"));
    layer.wk = lin(LayerName(l, "attention.wk"));
    layer.wv = lin(LayerName(l, "attention.wv"));
    layer.wo = lin(LayerName(l, "attention.wo"));
    layer.q_norm = t(LayerName(l, "attention.q_norm.weight"));
    layer.k_norm = t(LayerName(l, "attention.k_norm.weight"));
    layer.ffn_norm = norm(LayerName(l, "ffn_norm"));
    layer.w1 = lin(LayerName(l, "feed_forward.w1"));
    layer.w2 = lin(LayerName(l, "feed_forward.w2"));
    layer.dense_bs = t(absl::StrCat("dense_bs.", l));
    layer.mudd_w1 = Linear{t(MuddName(l, "w1.weight")), at::Tensor()};
    layer.mudd_w2 = Linear{t(MuddName(l, "w2.weight")), at::Tensor()};
    w.layers.push_back(std::move(layer));
  }
  return w;
}

// ---------------------------------------------------------------------------
// Forward

// One eager full-sequence forward pass, with FLOP counting.
class ForwardPass {
 public:
  ForwardPass(const MuddPythiaConfig& config, const Weights& w, ExecutionCounters* counters)
      : c_(config), w_(w), counters_(counters) {}

  // `coeff`: filled (kLiveRecord) or read (kReplay, shapes checked by the
  // caller) in site order.
  at::Tensor Run(const at::Tensor& ids, CoefficientMode mode, std::vector<at::Tensor>* coeff) {
    const int64_t B = ids.size(0), T = ids.size(1);
    MakeRopeTable(T, ids.device());
    causal_ = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(ids.device())).tril();
    const at::Tensor x0 = w_.embed.index_select(0, ids.reshape(-1)).view({B, T, c_.dim});
    std::vector<at::Tensor> hidden = {x0};   // embedding, out_0, out_1, ...
    std::vector<at::Tensor> streams = {x0};  // the next layer's inputs
    size_t next_site = 0;
    for (int64_t i = 0; i < c_.n_layer; ++i) {
      hidden.push_back(Block(w_.layers[i], streams));
      at::Tensor a;  // A_i [C, B, T, L]
      if (mode == CoefficientMode::kReplay) {
        a = Replayed(i, *coeff, &next_site, hidden.back().options());
      } else {
        a = Controller(i, hidden.back());
        if (Records(mode)) {
          for (int64_t s = 0; s < a.size(0); ++s) coeff->push_back(a[s].contiguous());
        }
      }
      streams = Mix(a, hidden);
      if (counters_) counters_->blocks_executed += B * T;  // this block ran for every token
    }
    if (counters_) {
      counters_->blocks_total += B * T * c_.n_layer;
      counters_->tokens += B * T;
    }
    // The last layer's coefficients mix the final streams: all are known.
    if (mode == CoefficientMode::kRecordOnly) return at::Tensor();
    return Lin(LayerNorm(streams[0], w_.norm), Linear{w_.head, at::Tensor()});
  }

 private:
  at::Tensor Lin(const at::Tensor& x, const Linear& l) {
    if (counters_) {
      // Rows from the leading sizes: x may have zero columns (an FFN of width 0).
      double rows = 1;
      for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= static_cast<double>(x.size(d));
      counters_->flops += 2.0 * rows * l.w.size(0) * l.w.size(1);
    }
    return at::linear(x, l.w, l.b);
  }
  at::Tensor LayerNorm(const at::Tensor& x, const Norm& n) const {
    return at::layer_norm(x, {x.size(-1)}, n.w, n.b, c_.norm_eps);
  }

  // The reference's table: inverse frequencies and angles in fp32, cos and sin
  // from polar, then rounded to float16 (it is not a buffer, so it stays fp16
  // in every model dtype). Kept here upcast to fp32, exactly, for the apply.
  void MakeRopeTable(int64_t T, const at::Device& device) {
    const int64_t rot = c_.rotary_dims();
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor exponents = at::arange(0, rot, 2, f32) / rot;
    const at::Tensor inv_freq = at::reciprocal(at::pow(c_.rope_base, exponents));
    const at::Tensor angle = at::outer(at::arange(T, f32), inv_freq);  // [T, rot/2]
    const at::Tensor cis = at::view_as_real(at::polar(at::ones_like(angle), angle));
    cos_ = cis.select(-1, 0).to(at::kHalf).to(at::kFloat).view({1, T, 1, rot / 2});
    sin_ = cis.select(-1, 1).to(at::kHalf).to(at::kFloat).view({1, T, 1, rot / 2});
  }

  // Rotates dims [0, rot) of each head of x [B, T, H, hd] in fp32, pairing
  // dim m with m + rot/2 and writing the pairs interleaved (out[2m] = a',
  // out[2m+1] = b') as the reference does; the other dims pass through.
  at::Tensor Rotary(const at::Tensor& x) const {
    const int64_t rot = c_.rotary_dims(), half = rot / 2;
    const at::Tensor xr = x.slice(-1, 0, rot).to(at::kFloat);
    const at::Tensor a = xr.slice(-1, 0, half), b = xr.slice(-1, half, rot);
    const at::Tensor a2 = a * cos_ - b * sin_;
    const at::Tensor b2 = b * cos_ + a * sin_;
    const at::Tensor rotated = at::stack({a2, b2}, -1).flatten(-2).to(x.scalar_type());
    return at::cat({rotated, x.slice(-1, rot, x.size(-1))}, -1);
  }

  // RMSNorm over head_dim computed in fp32, rounded back, then scaled.
  at::Tensor QkNorm(const at::Tensor& x, const at::Tensor& weight) const {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor normed = xf * at::rsqrt((xf * xf).mean(-1, /*keepdim=*/true) + c_.norm_eps);
    return normed.to(x.scalar_type()) * weight;
  }

  at::Tensor Attention(const at::Tensor& xq, const at::Tensor& xk, const at::Tensor& xv,
                       const Layer& l) {
    const int64_t B = xq.size(0), T = xq.size(1), H = c_.n_head, hd = c_.head_dim();
    const at::Tensor q =
        Rotary(QkNorm(Lin(xq, l.wq).view({B, T, H, hd}), l.q_norm)).transpose(1, 2);
    const at::Tensor k =
        Rotary(QkNorm(Lin(xk, l.wk).view({B, T, H, hd}), l.k_norm)).transpose(1, 2);
    const at::Tensor v = Lin(xv, l.wv).view({B, T, H, hd}).transpose(1, 2);
    // The product, then the scale: two roundings, as in the reference.
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
    scores = scores * (1.0 / std::sqrt(static_cast<double>(hd)));
    scores = at::where(causal_, scores, kMaskFill);
    const at::Tensor ctx = at::matmul(at::softmax(scores, -1), v);
    if (counters_) counters_->flops += 2.0 * 2.0 * B * H * T * T * hd;
    return Lin(ctx.transpose(1, 2).reshape({B, T, c_.dim}), l.wo);
  }

  // Layer 0 reads the embedding through one norm; later layers read the q, k,
  // v streams through one norm each (sepln). Parallel residual: the FFN reads
  // the norm of the residual stream, not the attention output.
  at::Tensor Block(const Layer& l, const std::vector<at::Tensor>& in) {
    at::Tensor attn;
    if (in.size() == 1) {
      const at::Tensor x = LayerNorm(in[0], l.attention_norms[0]);
      attn = Attention(x, x, x, l);
    } else {
      attn =
          Attention(LayerNorm(in[0], l.attention_norms[0]), LayerNorm(in[1], l.attention_norms[1]),
                    LayerNorm(in[2], l.attention_norms[2]), l);
    }
    const at::Tensor& res = in.back();
    const at::Tensor h = res + attn;
    return h + Lin(at::gelu(Lin(LayerNorm(res, l.ffn_norm), l.w1)), l.w2);
  }

  // A_i [C, B, T, L] from the output of layer i: a weightless RMSNorm in the
  // model dtype (no fp32 upcast, as in the reference), W1, GELU, W2, then the
  // static dense_bs.
  at::Tensor Controller(int64_t i, const at::Tensor& out) {
    const Layer& l = w_.layers[i];
    const at::Tensor z = out * at::rsqrt((out * out).mean(-1, /*keepdim=*/true) + c_.norm_eps);
    const at::Tensor a = Lin(at::gelu(Lin(z, l.mudd_w1)), l.mudd_w2);
    const int64_t C = c_.streams(i), L = c_.channels(i);
    // "B T (C L) -> C B T L": the stream is the outer part of the flat index.
    const at::Tensor dynamic = a.view({out.size(0), out.size(1), C, L}).permute({2, 0, 1, 3});
    return dynamic + l.dense_bs.view({C, 1, 1, L});
  }

  at::Tensor Replayed(int64_t i, const std::vector<at::Tensor>& coeff, size_t* next_site,
                      const at::TensorOptions& options) const {
    std::vector<at::Tensor> per_stream;
    for (int64_t s = 0; s < c_.streams(i); ++s) {
      per_stream.push_back(coeff[(*next_site)++].to(options));
    }
    return at::stack(per_stream, 0);
  }

  // Y_c = sum_j A[c, ..., j] * hidden[j], one rounded product at a time and
  // accumulated in order j = 0, 1, ... in the model dtype (the reference's
  // Python sum; an einsum would round differently).
  static std::vector<at::Tensor> Mix(const at::Tensor& a, const std::vector<at::Tensor>& hidden) {
    std::vector<at::Tensor> out;
    for (int64_t s = 0; s < a.size(0); ++s) {
      at::Tensor y;
      for (size_t j = 0; j < hidden.size(); ++j) {
        const at::Tensor term = a[s].select(-1, static_cast<int64_t>(j)).unsqueeze(-1) * hidden[j];
        y = j == 0 ? term : y + term;
      }
      out.push_back(y);
    }
    return out;
  }

  const MuddPythiaConfig& c_;
  const Weights& w_;
  ExecutionCounters* counters_;
  at::Tensor causal_;     // [T, T] bool, true where a key is visible
  at::Tensor cos_, sin_;  // [1, T, 1, rot/2] fp32 (fp16 values)
};

// ---------------------------------------------------------------------------
// The model

class MuddPythiaModel : public SafetensorsModel {
 public:
  // `info` and `sites` as DescribeMuddPythia(config) set and returned them.
  MuddPythiaModel(MuddPythiaConfig config, ModelInfo info, std::vector<CoefficientSite> sites)
      : SafetensorsModel(
            std::move(info), std::move(sites),
            CheckpointRules{"muddpythia", true, "config.json and the checkpoint imply"}),
        config_(std::move(config)) {}

 private:
  // The FFN widths are the checkpoint's (FfnWidth); every other shape
  // follows from the config.
  absl::StatusOr<std::vector<WeightSpec>> WeightSpecs(const TensorSource& src) const override {
    std::vector<int64_t> ffn(config_.n_layer);
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      FCA_ASSIGN_OR_RETURN(ffn[l], FfnWidth(src, l, config_.dim));
    }
    return MuddPythiaWeightSpecs(config_, ffn);
  }

  absl::Status Bind(const std::vector<WeightSpec>& specs, std::vector<at::Tensor> loaded) override {
    std::map<std::string, at::Tensor> tensors;
    for (size_t i = 0; i < specs.size(); ++i) tensors[specs[i].name] = std::move(loaded[i]);
    weights_ = BindWeights(config_, tensors);
    return absl::OkStatus();
  }

  // A_i = dense_bs.i with the controller's dynamic part removed: row c of
  // dense_bs.i for stream c, in sites() order.
  std::vector<at::Tensor> Neutral() const override {
    std::vector<at::Tensor> out;
    for (int64_t i = 0; i < config_.n_layer; ++i) {
      const at::Tensor& bs = weights_.layers[i].dense_bs;  // [C, L]
      for (int64_t c = 0; c < bs.size(0); ++c) out.push_back(bs[c].clone());
    }
    return out;
  }

  const at::Tensor& AnyWeight() const override { return weights_.embed; }

  absl::StatusOr<at::Tensor> Run(const at::Tensor& ids, CoefficientMode mode,
                                 std::vector<at::Tensor>* coefficients,
                                 ExecutionCounters* counted) override {
    return ForwardPass(config_, weights_, counted).Run(ids, mode, coefficients);
  }

  MuddPythiaConfig config_;
  Weights weights_;
};

}  // namespace

std::vector<CoefficientSite> DescribeMuddPythia(const MuddPythiaConfig& config, ModelInfo* info) {
  info->family = "muddpythia";
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.block_size;
  info->num_layers = config.n_layer;
  info->hidden_size = config.dim;
  info->num_heads = config.n_head;
  std::vector<CoefficientSite> sites;
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const int64_t streams = config.streams(i);
    for (int64_t s = 0; s < streams; ++s) {
      // The last layer's one stream feeds the final norm, not a layer's
      // residual: its own family, so its statistics are not pooled with r.
      const std::string family = streams == 1 ? "out" : kStreamFamilies[s];
      sites.push_back({absl::StrCat(family, ".", i), family, i, config.channels(i)});
    }
  }
  return sites;
}

int64_t MuddPythiaConfig::rotary_dims() const {
  return static_cast<int64_t>(rotary_pct * static_cast<double>(head_dim()));
}

int64_t MuddPythiaConfig::controller_width(int64_t layer) const {
  int64_t raw = streams(layer) * channels(layer);
  if (layer == n_layer - 1) raw *= 4;  // expand_last
  return (raw / 64 + 1) * 64;          // round64: always past the current value
}

std::vector<WeightSpec> MuddPythiaWeightSpecs(const MuddPythiaConfig& c,
                                              const std::vector<int64_t>& ffn) {
  const int64_t d = c.dim;
  std::vector<WeightSpec> s;
  s.push_back({"tok_embeddings.weight", {c.vocab_size, d}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const int64_t width = l < static_cast<int64_t>(ffn.size()) ? ffn[l] : 0;
    for (const char* proj : {"wq", "wk", "wv", "wo"}) {
      AddLinearSpecs(&s, LayerName(l, absl::StrCat("attention.", proj)), d, d);
    }
    s.push_back({LayerName(l, "attention.q_norm.weight"), {c.head_dim()}});
    s.push_back({LayerName(l, "attention.k_norm.weight"), {c.head_dim()}});
    AddLinearSpecs(&s, LayerName(l, "feed_forward.w1"), width, d);
    AddLinearSpecs(&s, LayerName(l, "feed_forward.w2"), d, width);
    if (l == 0) {
      AddNormSpecs(&s, LayerName(l, "attention_norm"), d);
    } else {
      for (int k = 0; k < 3; ++k)
        AddNormSpecs(&s, LayerName(l, absl::StrCat("attention_norms.", k)), d);
    }
    AddNormSpecs(&s, LayerName(l, "ffn_norm"), d);
  }
  AddNormSpecs(&s, "norm", d);
  s.push_back({"output.weight", {c.vocab_size, d}});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const int64_t cl = c.streams(i) * c.channels(i), k = c.controller_width(i);
    s.push_back({absl::StrCat("dense_bs.", i), {c.streams(i), c.channels(i)}});
    s.push_back({MuddName(i, "w1.weight"), {k, d}});
    s.push_back({MuddName(i, "w2.weight"), {cl, k}});
  }
  return s;
}

absl::StatusOr<MuddPythiaConfig> ParseMuddPythiaConfig(std::string_view json_text) {
  absl::StatusOr<json::Value> doc = json::Parse(json_text);
  if (!doc.ok()) return ConfigError(doc.status().message());
  if (!doc->is_object()) return ConfigError("the document must be a JSON object");
  const ConfigReader r(*doc);
  FCA_RETURN_IF_ERROR(r.StringSwitch("model_type", "muddpythia"));
  MuddPythiaConfig c;
  int64_t n_local_heads = 0;
  FCA_RETURN_IF_ERROR(r.Int("dim", &c.dim));
  FCA_RETURN_IF_ERROR(r.Int("n_layer", &c.n_layer));
  FCA_RETURN_IF_ERROR(r.Int("n_head", &c.n_head));
  FCA_RETURN_IF_ERROR(r.Int("n_local_heads", &n_local_heads));
  FCA_RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size));
  FCA_RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size));
  FCA_RETURN_IF_ERROR(r.Int("block_size", &c.block_size));
  FCA_RETURN_IF_ERROR(r.Number("rotary_pct", &c.rotary_pct));
  FCA_RETURN_IF_ERROR(r.Number("rope_base", &c.rope_base));
  FCA_RETURN_IF_ERROR(r.Number("norm_eps", &c.norm_eps));
  FCA_RETURN_IF_ERROR(ValidateConfig(c));
  if (n_local_heads != c.n_head) {
    return NotImplemented("n_local_heads", "n_head (grouped-query attention)");
  }
  FCA_RETURN_IF_ERROR(CheckSwitches(r));
  return c;
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateMuddPythiaModel(
    const MuddPythiaConfig& config, const TensorSource& weights, ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateConfig(config));
  std::vector<CoefficientSite> sites = DescribeMuddPythia(config, &info);
  return LoadSafetensorsModel(
      std::make_unique<MuddPythiaModel>(config, std::move(info), std::move(sites)), weights);
}

}  // namespace fca::engine
