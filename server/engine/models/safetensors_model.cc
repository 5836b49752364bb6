#include "server/engine/models/safetensors_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/models/host_gemm.h"

namespace fca::engine {
namespace {

bool IsFloat32OrBfloat16(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

// The view of `spec` in `src`, checked against the shape the config implies
// and, under the rules, the dtypes the family may store.
absl::StatusOr<TensorView> CheckedView(const TensorSource& src, const WeightSpec& spec,
                                       const CheckpointRules& rules) {
  if (!src.Has(spec.name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint has no tensor '%s', which a %s model with this config.json needs", spec.name,
        rules.family));
  }
  FCA_ASSIGN_OR_RETURN(TensorView view, src.Get(spec.name));
  if (view.shape != spec.shape) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s' has shape [%s]; %s [%s]", spec.name, absl::StrJoin(view.shape, ", "),
        rules.shapes_from, absl::StrJoin(spec.shape, ", ")));
  }
  if (rules.float32_or_bfloat16 && !IsFloat32OrBfloat16(view.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' is stored as %s; %s weights must be F32 or BF16", spec.name,
                        std::string(DTypeName(view.dtype)), rules.family));
  }
  return view;
}

absl::Status CheckCompute(const ComputeOptions& compute, const CheckpointRules& rules) {
  FCA_RETURN_IF_ERROR(ValidateCompute(compute));
  if (!rules.float32_or_bfloat16 || compute.dtype == ComputeDType::kFloat32 ||
      compute.dtype == ComputeDType::kBFloat16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s computes in float32 or bfloat16, not %s",
                                                    rules.family, ComputeDTypeName(compute.dtype)));
}

}  // namespace

void AddLinearSpecs(std::vector<WeightSpec>* specs, const std::string& name, int64_t out,
                    int64_t in) {
  specs->push_back({name + ".weight", {out, in}, /*linear=*/true});
  specs->push_back({name + ".bias", {out}});
}

absl::StatusOr<std::vector<at::Tensor>> WithHostGemmLayout(const std::vector<WeightSpec>& specs,
                                                           std::vector<at::Tensor> weights) {
  if (weights.size() != specs.size()) return weights;  // the net's Create says why
  return GuardTorch("storing the linear weights", [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].linear) weights[i] = HostGemmLayout(weights[i]);
    }
    return std::move(weights);
  });
}

void AddNormSpecs(std::vector<WeightSpec>* specs, const std::string& name, int64_t d) {
  specs->push_back({name + ".weight", {d}});
  specs->push_back({name + ".bias", {d}});
}

SafetensorsModel::SafetensorsModel(ModelInfo info, std::vector<CoefficientSite> sites,
                                   CheckpointRules rules)
    : info_(std::move(info)), sites_(std::move(sites)), rules_(std::move(rules)) {}

absl::Status SafetensorsModel::Load(const TensorSource& weights) {
  FCA_RETURN_IF_ERROR(CheckCompute(info_.compute, rules_));
  // Every tensor is checked before any is read: a mismatch costs no copy.
  FCA_ASSIGN_OR_RETURN(const std::vector<WeightSpec> specs, WeightSpecs(weights));
  std::vector<TensorView> views;
  std::set<std::string> expected;
  int64_t params = 0;
  for (const WeightSpec& spec : specs) {
    FCA_ASSIGN_OR_RETURN(TensorView view, CheckedView(weights, spec, rules_));
    params += view.numel();
    expected.insert(spec.name);
    views.push_back(std::move(view));
  }
  for (const std::string& name : weights.Names()) {
    if (expected.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor '%s' is not part of a %s model with this config.json", name, rules_.family));
    }
  }
  FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> loaded, LoadTensors(weights, views, info_.compute));
  info_.num_parameters = params;
  return Bind(specs, std::move(loaded));
}

absl::StatusOr<at::Tensor> SafetensorsModel::Forward(const at::Tensor& ids, CoefficientMode mode,
                                                     std::vector<at::Tensor>* coefficients) {
  FCA_RETURN_IF_ERROR(CheckForwardInputs(ids, mode, coefficients, info_, sites_, info_.max_seq_len,
                                         info_.vocab_size));
  return GuardTorch("model '" + info_.name + "' forward", [&]() -> absl::StatusOr<at::Tensor> {
    c10::InferenceMode guard;
    std::vector<at::Tensor> recorded;
    const at::Tensor on_device = ids.to(AnyWeight().device());
    ExecutionCounters counted;
    absl::StatusOr<at::Tensor> logits =
        Run(on_device, mode, Records(mode) ? &recorded : coefficients, &counted);
    counters_.Add(counted);
    FCA_RETURN_IF_ERROR(logits.status());
    // Only a completed pass replaces the caller's list.
    if (Records(mode)) *coefficients = std::move(recorded);
    return logits;
  });
}

absl::StatusOr<std::vector<at::Tensor>> SafetensorsModel::NeutralCoefficients() const {
  return GuardTorch("model '" + info_.name + "' neutral coefficients",
                    [&]() -> absl::StatusOr<std::vector<at::Tensor>> { return Neutral(); });
}

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadSafetensorsModel(
    std::unique_ptr<SafetensorsModel> model, const TensorSource& weights) {
  FCA_RETURN_IF_ERROR(model->Load(weights));
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
