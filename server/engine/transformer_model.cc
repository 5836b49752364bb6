// The `dense` and `featuregate` transformer families.
//
// Block l (pre-LN), with h the block input:
//   featuregate controller: g = 2 * sigmoid(W2 gelu(W1 LN_c(h) + b1) + b2),
//     g in (0,2)^{2G}; attn gate = g[:G], mlp gate = g[G:].
//   x = h + gate_attn (.) Attn(LN1(h));  out = x + gate_mlp (.) MLP(LN2(x))
// where a gate scales the d_model/G channels of its group. Dense: no gates.
#include "server/engine/transformer_model.h"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/torch_util.h"

namespace fca::engine {
namespace {

struct Linear {
  at::Tensor w, b;  // [out, in], [out] (b may be undefined)
};
struct Norm {
  at::Tensor w, b;
};
struct Block {
  Norm ln1, ln2;
  Linear qkv, out, fc1, fc2;
  Norm ctrl_ln;               // featuregate only
  Linear ctrl_fc1, ctrl_fc2;  // featuregate only
};

std::string BlockName(int64_t l, const std::string& rest) {
  return absl::StrCat("blocks.", l, ".", rest);
}

void AddLinear(std::vector<WeightSpec>* s, const std::string& name, int64_t out, int64_t in) {
  s->push_back({name + ".weight", {out, in}});
  s->push_back({name + ".bias", {out}});
}
void AddNorm(std::vector<WeightSpec>* s, const std::string& name, int64_t d) {
  s->push_back({name + ".weight", {d}});
  s->push_back({name + ".bias", {d}});
}

class TransformerModel : public ControlledModel {
 public:
  TransformerModel(TransformerConfig config, ModelInfo info)
      : config_(std::move(config)), info_(std::move(info)) {
    if (config_.has_controller()) {
      for (int64_t l = 0; l < config_.n_layers; ++l) {
        sites_.push_back({absl::StrCat("attn_gate.", l), "attn_gate", l, config_.n_groups});
        sites_.push_back({absl::StrCat("mlp_gate.", l), "mlp_gate", l, config_.n_groups});
      }
    }
  }

  absl::Status Load(const TensorSource& src) {
    std::map<std::string, at::Tensor> t;
    int64_t params = 0;
    for (const WeightSpec& spec : TransformerWeightSpecs(config_)) {
      if (!src.Has(spec.name)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "checkpoint has no tensor '%s', which a %s model with this config.json needs",
            spec.name, config_.family));
      }
      FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(spec.name));
      if (view.shape != spec.shape) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor '%s' has shape [%s]; config.json implies [%s]", spec.name,
            absl::StrJoin(view.shape, ", "), absl::StrJoin(spec.shape, ", ")));
      }
      FCA_ASSIGN_OR_RETURN(t[spec.name], TensorFromView(view, info_.compute));
      params += view.numel();
    }
    for (const std::string& name : src.Names()) {
      if (t.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor '%s' is not part of a %s model with this config.json", name, config_.family));
      }
    }
    info_.num_parameters = params;
    Assign(t);
    return absl::OkStatus();
  }

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return sites_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  ExecutionCounters counters() const override { return counters_; }
  void ResetCounters() override { counters_ = ExecutionCounters(); }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    FCA_RETURN_IF_ERROR(CheckIds(ids));
    if (mode != CoefficientMode::kLive && coefficients == nullptr) {
      return absl::InvalidArgumentError("record and replay need a coefficient list");
    }
    if (mode == CoefficientMode::kReplay) FCA_RETURN_IF_ERROR(CheckReplay(ids, *coefficients));
    if (mode == CoefficientMode::kLiveRecord) coefficients->clear();
    return GuardTorch("model '" + info_.name + "' forward", [&]() -> absl::StatusOr<at::Tensor> {
      c10::InferenceMode guard;
      return Run(ids.to(embed_.device()), mode, coefficients);
    });
  }

 private:
  void Assign(std::map<std::string, at::Tensor>& t) {
    auto lin = [&](const std::string& n) { return Linear{t[n + ".weight"], t[n + ".bias"]}; };
    auto norm = [&](const std::string& n) { return Norm{t[n + ".weight"], t[n + ".bias"]}; };
    embed_ = t["tok_emb.weight"];
    pos_ = t["pos_emb.weight"];
    ln_f_ = norm("ln_f");
    head_ = t["lm_head.weight"];
    blocks_.clear();
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      Block b;
      b.ln1 = norm(BlockName(l, "ln1"));
      b.ln2 = norm(BlockName(l, "ln2"));
      b.qkv = lin(BlockName(l, "attn.qkv"));
      b.out = lin(BlockName(l, "attn.out"));
      b.fc1 = lin(BlockName(l, "mlp.fc1"));
      b.fc2 = lin(BlockName(l, "mlp.fc2"));
      if (config_.has_controller()) {
        b.ctrl_ln = norm(BlockName(l, "ctrl.ln"));
        b.ctrl_fc1 = lin(BlockName(l, "ctrl.fc1"));
        b.ctrl_fc2 = lin(BlockName(l, "ctrl.fc2"));
      }
      blocks_.push_back(std::move(b));
    }
  }

  absl::Status CheckIds(const at::Tensor& ids) const {
    if (!ids.defined() || ids.dim() != 2 || ids.scalar_type() != at::kLong) {
      return absl::InvalidArgumentError("token ids must be an int64 tensor [batch, length]");
    }
    const int64_t T = ids.size(1);
    if (ids.size(0) < 1 || T < 1 || T > config_.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model '%s': window length %d is outside [1, %d]", info_.name, T, config_.max_seq_len));
    }
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model '%s': token id %d is outside the vocabulary [0, %d)", info_.name,
                          lo < 0 ? lo : hi, config_.vocab_size));
    }
    return absl::OkStatus();
  }

  absl::Status CheckReplay(const at::Tensor& ids, const std::vector<at::Tensor>& a) const {
    if (a.size() != sites_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "replay needs %d coefficient tensors, got %d", sites_.size(), a.size()));
    }
    for (size_t s = 0; s < a.size(); ++s) {
      const std::vector<int64_t> want = {ids.size(0), ids.size(1), sites_[s].channels};
      if (!a[s].defined() || a[s].sizes().vec() != want) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "replay coefficients for site '%s' must have shape [%s]", sites_[s].name,
            absl::StrJoin(want, ", ")));
      }
    }
    return absl::OkStatus();
  }

  at::Tensor Lin(const at::Tensor& x, const Linear& l) {
    counters_.flops += 2.0 * (x.numel() / x.size(-1)) * l.w.size(0) * l.w.size(1);
    return at::linear(x, l.w, l.b);
  }
  at::Tensor LN(const at::Tensor& x, const Norm& n) {
    return at::layer_norm(x, {x.size(-1)}, n.w, n.b, config_.norm_eps);
  }
  // Scales each of the G channel groups of `x` [B,T,D] by gate [B,T,G].
  at::Tensor ApplyGate(const at::Tensor& x, const at::Tensor& gate) const {
    const int64_t B = x.size(0), T = x.size(1), G = config_.n_groups;
    return (x.view({B, T, G, -1}) * gate.unsqueeze(-1)).view({B, T, -1});
  }

  at::Tensor Attention(const at::Tensor& x, const Block& b, const at::Tensor& causal) {
    const int64_t B = x.size(0), T = x.size(1), H = config_.n_heads;
    const int64_t hd = config_.d_model / H;
    at::Tensor qkv = Lin(x, b.qkv).view({B, T, 3, H, hd}).permute({2, 0, 3, 1, 4});
    at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
    at::Tensor ctx = at::matmul(at::softmax(scores, -1), v);
    counters_.flops += 2.0 * 2.0 * B * H * T * T * hd;
    return Lin(ctx.transpose(1, 2).reshape({B, T, config_.d_model}), b.out);
  }

  at::Tensor Mlp(const at::Tensor& x, const Block& b) {
    return Lin(at::gelu(Lin(x, b.fc1)), b.fc2);
  }

  // Controller output [B,T,2G] for block input h.
  at::Tensor Controller(const at::Tensor& h, const Block& b) {
    at::Tensor u = at::gelu(Lin(LN(h, b.ctrl_ln), b.ctrl_fc1));
    return 2.0 * at::sigmoid(Lin(u, b.ctrl_fc2));
  }

  at::Tensor Run(const at::Tensor& ids, CoefficientMode mode, std::vector<at::Tensor>* coeff) {
    const int64_t B = ids.size(0), T = ids.size(1), G = config_.n_groups;
    at::Tensor causal = at::ones({T, T}, ids.options().dtype(at::kBool)).triu(1);
    at::Tensor x = embed_.index_select(0, ids.reshape(-1)).view({B, T, -1}) +
                   pos_.slice(0, 0, T).unsqueeze(0);
    for (size_t l = 0; l < blocks_.size(); ++l) {
      const Block& b = blocks_[l];
      at::Tensor ga, gm;
      if (config_.has_controller()) {
        if (mode == CoefficientMode::kReplay) {
          ga = (*coeff)[2 * l].to(x.options());
          gm = (*coeff)[2 * l + 1].to(x.options());
        } else {
          at::Tensor g = Controller(x, b);
          ga = g.slice(-1, 0, G);
          gm = g.slice(-1, G, 2 * G);
          if (mode == CoefficientMode::kLiveRecord) {
            coeff->push_back(ga.contiguous());
            coeff->push_back(gm.contiguous());
          }
        }
      }
      at::Tensor a = Attention(LN(x, b.ln1), b, causal);
      x = x + (ga.defined() ? ApplyGate(a, ga) : a);
      at::Tensor m = Mlp(LN(x, b.ln2), b);
      x = x + (gm.defined() ? ApplyGate(m, gm) : m);
      counters_.blocks_executed += B * T;  // this block ran for every token
    }
    counters_.blocks_total += B * T * config_.n_layers;
    counters_.tokens += B * T;
    return Lin(LN(x, ln_f_), Linear{head_, at::Tensor()});
  }

  TransformerConfig config_;
  ModelInfo info_;
  std::vector<CoefficientSite> sites_;
  ByteTokenizer tokenizer_;
  ExecutionCounters counters_;
  at::Tensor embed_, pos_, head_;
  Norm ln_f_;
  std::vector<Block> blocks_;
};

}  // namespace

std::vector<WeightSpec> TransformerWeightSpecs(const TransformerConfig& c) {
  std::vector<WeightSpec> s;
  const int64_t d = c.d_model;
  s.push_back({"tok_emb.weight", {c.vocab_size, d}});
  s.push_back({"pos_emb.weight", {c.max_seq_len, d}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    AddNorm(&s, BlockName(l, "ln1"), d);
    AddLinear(&s, BlockName(l, "attn.qkv"), 3 * d, d);
    AddLinear(&s, BlockName(l, "attn.out"), d, d);
    AddNorm(&s, BlockName(l, "ln2"), d);
    AddLinear(&s, BlockName(l, "mlp.fc1"), c.d_ff, d);
    AddLinear(&s, BlockName(l, "mlp.fc2"), d, c.d_ff);
    if (c.has_controller()) {
      AddNorm(&s, BlockName(l, "ctrl.ln"), d);
      AddLinear(&s, BlockName(l, "ctrl.fc1"), c.controller_width, d);
      AddLinear(&s, BlockName(l, "ctrl.fc2"), 2 * c.n_groups, c.controller_width);
    }
  }
  AddNorm(&s, "ln_f", d);
  s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

absl::StatusOr<std::vector<TensorData>> InitTransformerWeights(const TransformerConfig& config,
                                                               const InitOptions& options) {
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  return GuardTorch("initialising weights", [&]() -> absl::StatusOr<std::vector<TensorData>> {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    std::vector<TensorData> out;
    for (const WeightSpec& spec : TransformerWeightSpecs(config)) {
      const bool is_norm_weight = spec.name.find("ln") != std::string::npos &&
                                  spec.name.size() > 7 &&
                                  spec.name.compare(spec.name.size() - 7, 7, ".weight") == 0;
      const bool is_bias = spec.name.size() > 5 &&
                           spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0;
      const bool is_ctrl_out = spec.name.find("ctrl.fc2") != std::string::npos;
      at::Tensor t;
      if (is_norm_weight) {
        t = at::ones(spec.shape);
      } else if (is_bias) {
        t = at::zeros(spec.shape);
      } else {
        const double std = is_ctrl_out ? options.controller_out_std : options.init_std;
        t = at::normal(0.0, 1.0, spec.shape, gen) * std;
      }
      t = t.to(at::kFloat).contiguous();
      TensorData td{spec.name, DType::kF32, spec.shape,
                    std::string(static_cast<const char*>(t.data_ptr()), t.nbytes())};
      out.push_back(std::move(td));
    }
    return out;
  });
}

absl::Status WriteTransformerModelDir(const std::string& dir, const TransformerConfig& config,
                                      const std::vector<TensorData>& weights) {
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError("cannot create model folder: " + ec.message());
  std::ofstream cfg(dir + "/config.json", std::ios::trunc);
  cfg << json::Write(TransformerConfigToJson(config), /*pretty=*/true) << "\n";
  if (!cfg.good()) return absl::InternalError("cannot write config.json in " + dir);
  cfg.close();
  return WriteSafetensors(dir + "/model.safetensors", weights);
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTransformerModel(
    const TransformerConfig& config, const TensorSource& weights, ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  FCA_RETURN_IF_ERROR(ValidateCompute(info.compute));
  info.family = config.family;
  info.vocab_size = config.vocab_size;
  info.max_seq_len = config.max_seq_len;
  info.num_layers = config.n_layers;
  auto model = std::make_unique<TransformerModel>(config, std::move(info));
  FCA_RETURN_IF_ERROR(model->Load(weights));
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
