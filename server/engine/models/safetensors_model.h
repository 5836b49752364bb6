// SafetensorsModel: what every family read from safetensors shares (dense,
// featuregate, muddpythia, olmoe, qwen2_moe, mixtral): its info, sites, byte
// tokenizer and counters; the load, which checks every tensor against the
// family's weight specs before any is read and then copies them in one
// block (LoadTensors); and the Forward around the family's pass (input
// checks, the torch guard, counting, only a completed pass replacing the
// caller's coefficients). A family gives its specs, binds the loaded
// tensors, and runs its forward. Torch-free header: tensors are
// forward-declared.
#ifndef FCA_SERVER_ENGINE_MODELS_SAFETENSORS_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_SAFETENSORS_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"  // WeightSpec

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// A Linear's weight [out, in] and bias [out], and a LayerNorm's weight and
// bias [d], named `name`.weight and `name`.bias: the specs the families'
// layouts are made of.
void AddLinearSpecs(std::vector<WeightSpec>* specs, const std::string& name, int64_t out,
                    int64_t in);
void AddNormSpecs(std::vector<WeightSpec>* specs, const std::string& name, int64_t d);

// `weights` (one per spec) with each linear one (WeightSpec::linear) in
// HostGemmLayout (host_gemm.h: stored for the engine's float32 kernel where it
// suits, else as given), for a family whose forward multiplies by them in
// HostLinear. INTERNAL if torch fails.
absl::StatusOr<std::vector<at::Tensor>> WithHostGemmLayout(const std::vector<WeightSpec>& specs,
                                                           std::vector<at::Tensor> weights);

// How a family's checkpoint is held to its config.
struct CheckpointRules {
  std::string family;  // named in messages: "a <family> model with this config.json"
  // Stored tensors and the compute dtype float32 or bfloat16 only (the
  // families whose forward copies a reference's); otherwise any
  // floating-point tensor and any compute dtype ValidateCompute accepts.
  bool float32_or_bfloat16 = false;
  // What a shape mismatch says the expected shape follows from.
  std::string shapes_from = "config.json implies";
};

class SafetensorsModel : public ControlledModel {
 public:
  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return sites_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  ExecutionCounters counters() const override { return counters_.Get(); }
  void ResetCounters() override { counters_.Reset(); }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) final;
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const final;

  // Checks the compute options (ValidateCompute; float32 or bfloat16 under
  // float32_or_bfloat16) and `weights` against WeightSpecs (the first
  // missing, extra, misshapen or, under float32_or_bfloat16, mistyped tensor
  // is INVALID_ARGUMENT naming it), copies them to the compute device and
  // dtype, and binds them. `weights` need not outlive the model.
  [[nodiscard]] absl::Status Load(const TensorSource& weights);

 protected:
  // `info` with the fields Describe<Family> set, and the sites it returned.
  SafetensorsModel(ModelInfo info, std::vector<CoefficientSite> sites, CheckpointRules rules);

  // Every tensor a checkpoint of this config holds, in the order Bind takes
  // them. `weights` is there for a layout that reads sizes from the
  // checkpoint (muddpythia's FFN widths).
  virtual absl::StatusOr<std::vector<WeightSpec>> WeightSpecs(
      const TensorSource& weights) const = 0;
  // Takes the loaded tensors, in WeightSpecs order, on the compute device.
  virtual absl::Status Bind(const std::vector<WeightSpec>& specs,
                            std::vector<at::Tensor> weights) = 0;
  // One pass over `ids` (on the compute device, in InferenceMode):
  // kLiveRecord and kRecordOnly fill the empty `coefficients`, kReplay reads
  // them (checked against sites()); work counted into `counted`.
  virtual absl::StatusOr<at::Tensor> Run(const at::Tensor& ids, CoefficientMode mode,
                                         std::vector<at::Tensor>* coefficients,
                                         ExecutionCounters* counted) = 0;
  // NeutralCoefficients without the guard (torch may throw).
  virtual std::vector<at::Tensor> Neutral() const = 0;
  // A bound weight: ids are moved to its device.
  virtual const at::Tensor& AnyWeight() const = 0;

 private:
  ModelInfo info_;
  std::vector<CoefficientSite> sites_;
  CheckpointRules rules_;
  ByteTokenizer tokenizer_;
  SharedCounters counters_;
};

// `model` after its Load, or Load's error.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> LoadSafetensorsModel(
    std::unique_ptr<SafetensorsModel> model, const TensorSource& weights);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_SAFETENSORS_MODEL_H_
