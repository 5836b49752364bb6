// The `dense` and `featuregate` transformer families: weight layout,
// initialisation, model folders, and TransformerModel, the ControlledModel
// that runs TransformerNet (transformer_net.cc) for inference.
#include "server/engine/models/transformer_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_net.h"

namespace fca::engine {
namespace {

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
    sites_ = DescribeTransformer(config_, &info_);
  }

  absl::Status Load(const TensorSource& src) {
    std::vector<at::Tensor> weights;
    int64_t params = 0;
    std::set<std::string> expected;
    for (const WeightSpec& spec : TransformerWeightSpecs(config_)) {
      if (!src.Has(spec.name)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "checkpoint has no tensor '%s', which a %s model with this config.json needs",
            spec.name, config_.family));
      }
      FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(spec.name));
      if (view.shape != spec.shape) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor '%s' has shape [%s]; config.json implies [%s]", spec.name,
                            absl::StrJoin(view.shape, ", "), absl::StrJoin(spec.shape, ", ")));
      }
      FCA_ASSIGN_OR_RETURN(at::Tensor t, TensorFromView(view, info_.compute));
      src.ReleasePages(view);
      weights.push_back(std::move(t));
      expected.insert(spec.name);
      params += view.numel();
    }
    for (const std::string& name : src.Names()) {
      if (expected.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor '%s' is not part of a %s model with this config.json", name, config_.family));
      }
    }
    info_.num_parameters = params;
    FCA_ASSIGN_OR_RETURN(net_, TransformerNet::Create(config_, std::move(weights)));
    return absl::OkStatus();
  }

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return sites_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  ExecutionCounters counters() const override { return counters_.Get(); }
  void ResetCounters() override { counters_.Reset(); }

  // A gate of 1 leaves its group's channels unscaled: the plain transformer.
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return GuardTorch("model '" + info_.name + "' neutral coefficients",
                      [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
                        const at::Tensor& any = net_->weights().front();
                        std::vector<at::Tensor> out;
                        for (const CoefficientSite& s : sites_) {
                          out.push_back(at::ones({s.channels}, any.options()));
                        }
                        return out;
                      });
  }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    FCA_RETURN_IF_ERROR(CheckForwardInputs(ids, mode, coefficients, info_, sites_,
                                           config_.max_seq_len, config_.vocab_size));
    if (Records(mode)) coefficients->clear();
    return GuardTorch("model '" + info_.name + "' forward", [&]() -> absl::StatusOr<at::Tensor> {
      c10::InferenceMode guard;
      const at::Tensor on_device = ids.to(net_->weights().front().device());
      ExecutionCounters counted;
      absl::StatusOr<at::Tensor> logits = net_->Forward(on_device, mode, coefficients, &counted);
      counters_.Add(counted);
      if (!logits.ok()) {
        return absl::Status(logits.status().code(), absl::StrFormat("model '%s': %s", info_.name,
                                                                    logits.status().message()));
      }
      return logits;
    });
  }

 private:
  TransformerConfig config_;
  ModelInfo info_;
  std::vector<CoefficientSite> sites_;
  ByteTokenizer tokenizer_;
  SharedCounters counters_;
  std::unique_ptr<TransformerNet> net_;
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

std::vector<CoefficientSite> DescribeTransformer(const TransformerConfig& config, ModelInfo* info) {
  info->family = config.family;
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_seq_len;
  info->num_layers = config.n_layers;
  std::vector<CoefficientSite> sites;
  if (!config.has_controller()) return sites;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    sites.push_back({absl::StrCat("attn_gate.", l), "attn_gate", l, config.n_groups});
    sites.push_back({absl::StrCat("mlp_gate.", l), "mlp_gate", l, config.n_groups});
  }
  return sites;
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
      const bool is_bias =
          spec.name.size() > 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0;
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
  return WriteModelFolder(dir, TransformerConfigToJson(config), weights);
}

absl::Status WriteRandomTransformerModelDir(const std::string& dir, const TransformerConfig& config,
                                            const InitOptions& init) {
  FCA_ASSIGN_OR_RETURN(std::vector<TensorData> weights, InitTransformerWeights(config, init));
  return WriteTransformerModelDir(dir, config, weights);
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTransformerModel(
    const TransformerConfig& config, const TensorSource& weights, ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  FCA_RETURN_IF_ERROR(ValidateCompute(info.compute));
  auto model = std::make_unique<TransformerModel>(config, std::move(info));
  FCA_RETURN_IF_ERROR(model->Load(weights));
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
