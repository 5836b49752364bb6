// The `dense` and `featuregate` transformer forward.
//
// Block l (pre-LN), with h the block input:
//   featuregate controller: g = 2 * sigmoid(W2 gelu(W1 LN_c(h) + b1) + b2),
//     g in (0,2)^{2G}; attn gate = g[:G], mlp gate = g[G:].
//   x = h + gate_attn (.) Attn(LN1(h));  out = x + gate_mlp (.) MLP(LN2(x))
// where a gate scales the d_model/G channels of its group. Dense: no gates.
// A branch whose gate is exactly 0 for every token of the batch is skipped
// (it would add 0), and a block whose branches are both skipped does not
// count as executed: the execution counters report what ran. Off the CPU a
// LIVE pass computes such a branch anyway (asking at each block would wait
// for the device) and counts what the CPU would have run.
//
// Outside autograd (every audit forward) the same operations run with fewer
// temporaries and less work, giving the same numbers: the gated branch is
// scaled in place and added into the residual, and on the CPU attention
// runs a block of query rows at a time against only the keys up to the
// block's last row (attention.h says why that is exact). fca-train's
// forward, under autograd, keeps the plain form, whose intermediate tensors
// the backward needs; tests/engine/models/model_test.cc checks that both
// give the same bits.
#include "server/engine/models/transformer_net.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/engine/models/attention.h"
#include "server/engine/models/host_gemm.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"

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

}  // namespace

// The weights, named by their role. Tensors share storage with `all`.
struct TransformerNet::Layout {
  std::vector<at::Tensor> all;  // TransformerWeightSpecs order
  at::Tensor embed, pos, head;
  Norm ln_f;
  std::vector<Block> blocks;
};

namespace {

std::string BlockName(int64_t l, const std::string& rest) {
  return absl::StrFormat("blocks.%d.%s", l, rest);
}

// One forward pass: the network's equations, with FLOP counting.
class ForwardPass {
 public:
  ForwardPass(const TransformerConfig& config, const TransformerNet::Layout& w,
              ExecutionCounters* counters)
      : c_(config), w_(w), counters_(counters), autograd_(at::GradMode::is_enabled()) {}

  at::Tensor Run(const at::Tensor& ids, CoefficientMode mode, std::vector<at::Tensor>* coeff) {
    const int64_t B = ids.size(0), T = ids.size(1), G = c_.n_groups;
    // Added to the attention scores: -inf above the diagonal, 0 elsewhere.
    // Same result as masked_fill, and its backward is the identity.
    const at::Tensor causal =
        at::full({T, T}, -std::numeric_limits<float>::infinity(), w_.embed.options()).triu(1);
    at::Tensor x = w_.embed.index_select(0, ids.reshape(-1)).view({B, T, -1}) +
                   w_.pos.slice(0, 0, T).unsqueeze(0);
    // Off the CPU, reading whether a gate is all zero waits for the device:
    // a replay reads every gate's answer at once, before the first block.
    device_ = !ids.device().is_cpu();
    if (device_ && c_.has_controller() && mode == CoefficientMode::kReplay) ReadRuns(*coeff);
    PartTimer part(counters_ != nullptr && ids.is_cpu() ? &counters_->seconds : nullptr);
    for (size_t l = 0; l < w_.blocks.size(); ++l) {
      const Block& b = w_.blocks[l];
      at::Tensor ga, gm;
      if (c_.has_controller()) {
        if (mode == CoefficientMode::kReplay) {
          ga = (*coeff)[2 * l].to(x.options());
          gm = (*coeff)[2 * l + 1].to(x.options());
        } else {
          at::Tensor g = Controller(x, b);
          ga = g.slice(-1, 0, G);
          gm = g.slice(-1, G, 2 * G);
          if (Records(mode)) {
            coeff->push_back(ga.contiguous());
            coeff->push_back(gm.contiguous());
          }
        }
        // The last block's gates come from its input: nothing after them
        // is needed when only coefficients are.
        if (mode == CoefficientMode::kRecordOnly && l + 1 == w_.blocks.size()) break;
      }
      // A LIVE pass off the CPU runs every gated branch (a gate of 0 adds
      // 0) and counts, once the pass is done, what the CPU would have run.
      const bool deferred = device_ && ga.defined() && runs_.empty();
      const bool attn_runs = deferred || Runs(ga, 2 * l),
                 mlp_runs = deferred || Runs(gm, 2 * l + 1);
      const double flops_before = counters_ ? counters_->flops : 0;
      if (attn_runs) x = AddBranch(x, Attention(LN(x, b.ln1), b, causal), ga);
      const double flops_between = counters_ ? counters_->flops : 0;
      if (mlp_runs) {
        const at::Tensor normed = LN(x, b.ln2);
        part.Restart();
        at::Tensor m = Mlp(normed, b);
        part.Lap(&ExecutionCounters::PartSeconds::mlp);
        x = AddBranch(x, m, gm);
      }
      if (deferred && counters_) {
        Deferred d{at::stack({ga.ne(0).any(), gm.ne(0).any()}), flops_between - flops_before,
                   counters_->flops - flops_between};
        counters_->flops = flops_before;
        deferred_.push_back(std::move(d));
      } else if (counters_ && (attn_runs || mlp_runs)) {
        // Counted from what ran: a block with both branches skipped is not.
        counters_->blocks_executed += B * T;
      }
    }
    CountDeferred(B * T);
    if (counters_) {
      counters_->blocks_total += B * T * c_.n_layers;
      counters_->tokens += B * T;
    }
    if (mode == CoefficientMode::kRecordOnly) return at::Tensor();
    return Lin(LN(x, w_.ln_f), Linear{w_.head, at::Tensor()});
  }

 private:
  at::Tensor Lin(const at::Tensor& x, const Linear& l) {
    if (counters_) {
      counters_->flops += 2.0 * (x.numel() / x.size(-1)) * l.w.size(0) * l.w.size(1);
    }
    if (HostLinearApplies(x, l.w)) return HostLinear(x, l.w, l.b);
    return at::linear(x, l.w, l.b);
  }
  // Whether a branch must be computed: always without a gate; with one,
  // unless the gate is exactly 0 for every token of the batch, when the
  // branch would add gate * branch = 0 to the residual (the same result;
  // a non-finite branch output, which would make it NaN, is not modelled).
  // `site`: the gate's index among the coefficients, for ReadRuns' answers.
  bool Runs(const at::Tensor& gate, size_t site) const {
    if (!gate.defined()) return true;
    if (!runs_.empty()) return runs_[site];
    return gate.ne(0).any().item<bool>();
  }
  // Runs' answer for every replayed gate, read from the device in one copy.
  void ReadRuns(const std::vector<at::Tensor>& gates) {
    std::vector<at::Tensor> any;
    for (const at::Tensor& g : gates) any.push_back(g.ne(0).any());
    const at::Tensor host = at::stack(any).cpu();
    const bool* data = host.data_ptr<bool>();
    runs_.assign(data, data + host.numel());
  }
  // The branches a deferred LIVE block would have skipped give their FLOPs
  // back; its counts then equal the CPU's. One copy for the whole pass.
  void CountDeferred(int64_t tokens) {
    if (deferred_.empty()) return;
    std::vector<at::Tensor> flags;
    for (const Deferred& d : deferred_) flags.push_back(d.runs);
    const at::Tensor host = at::stack(flags).cpu();
    const auto runs = host.accessor<bool, 2>();
    for (size_t l = 0; l < deferred_.size(); ++l) {
      if (runs[l][0]) counters_->flops += deferred_[l].attn_flops;
      if (runs[l][1]) counters_->flops += deferred_[l].mlp_flops;
      if (runs[l][0] || runs[l][1]) counters_->blocks_executed += tokens;
    }
  }
  at::Tensor LN(const at::Tensor& x, const Norm& n) const {
    return LayerNormInFloat(x, n.w, n.b, c_.norm_eps);
  }
  // Scales each of the G channel groups of `x` [B,T,D] by gate [B,T,G].
  at::Tensor ApplyGate(const at::Tensor& x, const at::Tensor& gate) const {
    const int64_t B = x.size(0), T = x.size(1), G = c_.n_groups;
    return (x.view({B, T, G, -1}) * gate.unsqueeze(-1)).view({B, T, -1});
  }

  // The residual x + gate (.) branch (x + branch without a gate). Outside
  // autograd the branch, a fresh tensor, is scaled in place and added into
  // x: the same roundings, two temporaries fewer.
  at::Tensor AddBranch(at::Tensor x, at::Tensor branch, const at::Tensor& gate) const {
    if (autograd_) return x + (gate.defined() ? ApplyGate(branch, gate) : branch);
    if (gate.defined()) ScaleByGate(branch, gate);
    return x.add_(branch);
  }

  // ApplyGate in place. In bfloat16 the gate is first spread over its
  // group's channels: libtorch 1.13's bfloat16 multiply with an operand
  // broadcast along the innermost dimension (stride 0) takes a slow path,
  // 2.5x the time of spreading the gate and multiplying contiguous tensors
  // (in float32 the broadcast multiply is the faster of the two). Each
  // element is rounded once, as gate * x, either way.
  void ScaleByGate(at::Tensor& x, const at::Tensor& gate) const {
    const int64_t B = x.size(0), T = x.size(1), G = c_.n_groups;
    const at::Tensor g = gate.unsqueeze(-1);
    if (x.scalar_type() == at::kFloat) {
      x.view({B, T, G, -1}).mul_(g);
    } else {
      x.mul_(g.expand({B, T, G, x.size(2) / G}).reshape({B, T, -1}));
    }
  }

  at::Tensor Attention(const at::Tensor& x, const Block& b, const at::Tensor& causal) {
    const int64_t B = x.size(0), T = x.size(1), H = c_.n_heads;
    const int64_t hd = c_.d_model / H;
    at::Tensor qkv = Lin(x, b.qkv).view({B, T, 3, H, hd}).permute({2, 0, 3, 1, 4});
    if (counters_) counters_->flops += 2.0 * 2.0 * B * H * T * T * hd;
    // attention.h says when the blocks apply.
    if (AttentionByBlocksApplies(B, !device_, x.scalar_type())) {
      // One copy into [3, B, H, T, hd]: each block's rows of q, k and v are
      // then strided views the GEMMs read as they are.
      qkv = qkv.contiguous();
      const double scale = 1.0 / std::sqrt(double(hd));
      const at::Tensor ctx = CausalAttentionByBlocks(
          qkv[0], qkv[1], qkv[2], [&](at::Tensor& s, int64_t r0, int64_t r1) {
            // (s * scale) + causal in place, the ops of the plain form:
            // a fused add with alpha rounds otherwise in bfloat16 from
            // libtorch 2.x (alpha to bfloat16, where mul keeps a float).
            ScaleInPlace(s, scale).add_(causal.slice(0, r0, r1).slice(1, 0, r1));
            return at::softmax(s, -1);
          });
      return Lin(ctx.view({B, T, c_.d_model}), b.out);
    }
    at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
    const double scale = 1.0 / std::sqrt(double(hd));
    at::Tensor probs;
    if (autograd_) {
      probs = at::softmax(scores * scale + causal, -1);
    } else {
      // In place, as the blocks do: (s * scale) + causal, and the softmax
      // over its own input (each row's maximum and sum are read before its
      // entries are overwritten), two [B, H, T, T] tensors fewer.
      ScaleInPlace(scores, scale).add_(causal);
      probs = at::_softmax_out(scores, scores, -1, false);
    }
    at::Tensor ctx = at::matmul(probs, v);
    return Lin(ctx.transpose(1, 2).reshape({B, T, c_.d_model}), b.out);
  }

  at::Tensor Mlp(const at::Tensor& x, const Block& b) { return Lin(Gelu(Lin(x, b.fc1)), b.fc2); }

  // gelu(x); outside autograd in place on x, a fresh tensor.
  at::Tensor Gelu(at::Tensor x) const { return autograd_ ? at::gelu(x) : at::gelu_(x); }

  // Controller output [B,T,2G] for block input h.
  at::Tensor Controller(const at::Tensor& h, const Block& b) {
    at::Tensor u = Gelu(Lin(LN(h, b.ctrl_ln), b.ctrl_fc1));
    return 2.0 * at::sigmoid(Lin(u, b.ctrl_fc2));
  }

  // A LIVE block run in full off the CPU: whether each branch had to run
  // (bool [2] on the device) and what each cost.
  struct Deferred {
    at::Tensor runs;
    double attn_flops, mlp_flops;
  };

  const TransformerConfig& c_;
  const TransformerNet::Layout& w_;
  ExecutionCounters* counters_;
  const bool autograd_;     // fca-train's forward: tensors the backward needs stay as they are
  bool device_ = false;     // the pass runs off the CPU
  std::vector<bool> runs_;  // ReadRuns' answers by site; empty: ask Runs' gate
  std::vector<Deferred> deferred_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerNet>> TransformerNet::Create(
    const TransformerConfig& config, std::vector<at::Tensor> weights) {
  const std::vector<WeightSpec> specs = TransformerWeightSpecs(config);
  if (weights.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s model with this config has %d weight tensors, got %d", config.family,
                        specs.size(), weights.size()));
  }
  std::map<std::string, at::Tensor> t;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!weights[i].defined() || weights[i].sizes().vec() != specs[i].shape) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "weight '%s' must have shape [%s]", specs[i].name, absl::StrJoin(specs[i].shape, ", ")));
    }
    t[specs[i].name] = weights[i];
  }
  auto lin = [&](const std::string& n) { return Linear{t[n + ".weight"], t[n + ".bias"]}; };
  auto norm = [&](const std::string& n) { return Norm{t[n + ".weight"], t[n + ".bias"]}; };
  auto layout = std::make_unique<Layout>();
  layout->all = std::move(weights);
  layout->embed = t["tok_emb.weight"];
  layout->pos = t["pos_emb.weight"];
  layout->ln_f = norm("ln_f");
  layout->head = t["lm_head.weight"];
  for (int64_t l = 0; l < config.n_layers; ++l) {
    Block b;
    b.ln1 = norm(BlockName(l, "ln1"));
    b.ln2 = norm(BlockName(l, "ln2"));
    b.qkv = lin(BlockName(l, "attn.qkv"));
    b.out = lin(BlockName(l, "attn.out"));
    b.fc1 = lin(BlockName(l, "mlp.fc1"));
    b.fc2 = lin(BlockName(l, "mlp.fc2"));
    if (config.has_controller()) {
      b.ctrl_ln = norm(BlockName(l, "ctrl.ln"));
      b.ctrl_fc1 = lin(BlockName(l, "ctrl.fc1"));
      b.ctrl_fc2 = lin(BlockName(l, "ctrl.fc2"));
    }
    layout->blocks.push_back(std::move(b));
  }
  return std::unique_ptr<TransformerNet>(new TransformerNet(config, std::move(layout)));
}

TransformerNet::TransformerNet(TransformerConfig config, std::unique_ptr<Layout> layout)
    : config_(std::move(config)), layout_(std::move(layout)) {}

TransformerNet::~TransformerNet() = default;

const std::vector<at::Tensor>& TransformerNet::weights() const { return layout_->all; }

absl::StatusOr<at::Tensor> TransformerNet::Forward(const at::Tensor& ids, CoefficientMode mode,
                                                   std::vector<at::Tensor>* coefficients,
                                                   ExecutionCounters* counters) const {
  return GuardTorch("transformer forward", [&]() -> absl::StatusOr<at::Tensor> {
    return ForwardPass(config_, *layout_, counters).Run(ids, mode, coefficients);
  });
}

}  // namespace fca::engine
