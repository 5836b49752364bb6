// The `dense` and `featuregate` transformer families: weight layout,
// initialisation, model folders, and TransformerModel, the SafetensorsModel
// that runs TransformerNet (transformer_net.cc) for inference.
#include "server/engine/models/transformer_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/safetensors_model.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_net.h"

namespace fca::engine {
namespace {

std::string BlockName(int64_t l, const std::string& rest) {
  return absl::StrCat("blocks.", l, ".", rest);
}

// The dense and featuregate families: the transformer layout bound to
// TransformerNet; the rest is SafetensorsModel's.
class TransformerModel : public SafetensorsModel {
 public:
  // `info` and `sites` as DescribeTransformer(config) set and returned them.
  TransformerModel(TransformerConfig config, ModelInfo info, std::vector<CoefficientSite> sites)
      : SafetensorsModel(std::move(info), std::move(sites),
                         CheckpointRules{config.family, false, "config.json implies"}),
        config_(std::move(config)) {}

 private:
  absl::StatusOr<std::vector<WeightSpec>> WeightSpecs(const TensorSource&) const override {
    return TransformerWeightSpecs(config_);
  }

  absl::Status Bind(const std::vector<WeightSpec>& specs,
                    std::vector<at::Tensor> weights) override {
    FCA_ASSIGN_OR_RETURN(weights, WithHostGemmLayout(specs, std::move(weights)));
    FCA_ASSIGN_OR_RETURN(net_, TransformerNet::Create(config_, std::move(weights)));
    return absl::OkStatus();
  }

  // A gate of 1 leaves its group's channels unscaled: the plain transformer.
  std::vector<at::Tensor> Neutral() const override {
    std::vector<at::Tensor> out;
    for (const CoefficientSite& s : sites()) {
      out.push_back(at::ones({s.channels}, AnyWeight().options()));
    }
    return out;
  }

  const at::Tensor& AnyWeight() const override { return net_->weights().front(); }

  absl::StatusOr<at::Tensor> Run(const at::Tensor& ids, CoefficientMode mode,
                                 std::vector<at::Tensor>* coefficients,
                                 ExecutionCounters* counted) override {
    absl::StatusOr<at::Tensor> logits = net_->Forward(ids, mode, coefficients, counted);
    if (!logits.ok()) {
      return absl::Status(logits.status().code(), absl::StrFormat("model '%s': %s", info().name,
                                                                  logits.status().message()));
    }
    return logits;
  }

  TransformerConfig config_;
  std::unique_ptr<TransformerNet> net_;
};

}  // namespace

std::vector<WeightSpec> TransformerWeightSpecs(const TransformerConfig& c) {
  std::vector<WeightSpec> s;
  const int64_t d = c.d_model;
  s.push_back({"tok_emb.weight", {c.vocab_size, d}});
  s.push_back({"pos_emb.weight", {c.max_seq_len, d}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    AddNormSpecs(&s, BlockName(l, "ln1"), d);
    AddLinearSpecs(&s, BlockName(l, "attn.qkv"), 3 * d, d);
    AddLinearSpecs(&s, BlockName(l, "attn.out"), d, d);
    AddNormSpecs(&s, BlockName(l, "ln2"), d);
    AddLinearSpecs(&s, BlockName(l, "mlp.fc1"), c.d_ff, d);
    AddLinearSpecs(&s, BlockName(l, "mlp.fc2"), d, c.d_ff);
    if (c.has_controller()) {
      AddNormSpecs(&s, BlockName(l, "ctrl.ln"), d);
      AddLinearSpecs(&s, BlockName(l, "ctrl.fc1"), c.controller_width, d);
      AddLinearSpecs(&s, BlockName(l, "ctrl.fc2"), 2 * c.n_groups, c.controller_width);
    }
  }
  AddNormSpecs(&s, "ln_f", d);
  s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

std::vector<CoefficientSite> DescribeTransformer(const TransformerConfig& config, ModelInfo* info) {
  info->family = config.family;
  info->vocab_size = config.vocab_size;
  info->max_seq_len = config.max_seq_len;
  info->num_layers = config.n_layers;
  info->hidden_size = config.d_model;
  info->num_heads = config.n_heads;
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
  std::vector<CoefficientSite> sites = DescribeTransformer(config, &info);
  return LoadSafetensorsModel(
      std::make_unique<TransformerModel>(config, std::move(info), std::move(sites)), weights);
}

}  // namespace fca::engine
