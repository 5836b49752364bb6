#include "server/engine/models/moe_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/match.h"
#include "server/engine/models/moe_net.h"  // MoeWeightSpecs
#include "server/engine/models/torch_util.h"

namespace fca::engine {

absl::StatusOr<std::vector<TensorData>> InitMoeWeights(const MoeConfig& config,
                                                       const InitOptions& options) {
  return GuardTorch("initialising weights", [&]() -> absl::StatusOr<std::vector<TensorData>> {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    std::vector<TensorData> out;
    for (const WeightSpec& spec : MoeWeightSpecs(config)) {
      at::Tensor t;
      if (absl::EndsWith(spec.name, "norm.weight")) {  // input_layernorm, q_norm, model.norm, ...
        t = at::ones(spec.shape);
      } else if (absl::EndsWith(spec.name, ".bias")) {
        t = at::zeros(spec.shape);
      } else {
        t = at::normal(0.0, 1.0, spec.shape, gen) * options.init_std;
      }
      t = t.to(at::kFloat).contiguous();
      out.push_back(TensorData{spec.name, DType::kF32, spec.shape,
                               std::string(static_cast<const char*>(t.data_ptr()), t.nbytes())});
    }
    return out;
  });
}

absl::Status WriteMoeModelDir(const std::string& dir, const MoeConfig& config,
                              const std::vector<TensorData>& weights) {
  return WriteModelFolder(dir, MoeConfigToJson(config), weights);
}

}  // namespace fca::engine
