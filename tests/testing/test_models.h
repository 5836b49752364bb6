// Tiny models built by the tests themselves, written to a temporary folder
// and loaded through the real loader.
#ifndef FCA_TESTS_TESTING_TEST_MODELS_H_
#define FCA_TESTS_TESTING_TEST_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/transformer_model.h"

namespace fca::engine::testing {

// The compute the engine suites run their models on: float32 on the device
// named by the environment's FCA_TEST_DEVICE ("cpu" when unset; "cuda:0" on
// a GPU machine). Expected values are the CPU's; a check that a GPU may
// legitimately miss says so where it is made.
ComputeOptions TestCompute();

// The model folder `dir` loaded as `name`; null, and a failure, when it
// does not load.
std::unique_ptr<ControlledModel> LoadFolder(const std::string& dir, const std::string& name,
                                            const ComputeOptions& compute = TestCompute());

// Why loading the folder `dir` (as model "m") failed, or OK.
absl::Status LoadStatus(const std::string& dir);

// max |a - b| over the elements, computed in float64 on the CPU.
double MaxDiff(const at::Tensor& a, const at::Tensor& b);

// A fresh, empty temporary folder (removed by the OS's tmp cleaning; the
// tests keep them small).
std::string TempDir(const std::string& tag);

TransformerConfig TinyConfig(const std::string& family);

// Writes and loads a randomly initialised model.
std::unique_ptr<ControlledModel> RandomModel(const TransformerConfig& config,
                                             const InitOptions& init,
                                             const ComputeOptions& compute = TestCompute());

// Replaces a tensor's float32 values (size must match).
void SetTensor(std::vector<TensorData>* weights, const std::string& name,
               const std::vector<float>& values);

// Writes weights + config to a new folder and loads it.
std::unique_ptr<ControlledModel> LoadWritten(const TransformerConfig& config,
                                             const std::vector<TensorData>& weights,
                                             const ComputeOptions& compute = TestCompute());

// A one-layer featuregate model over tokens 'a' and 'b' whose MLP gate is 2
// after 'a' and 0 after 'b', and whose head predicts 'b' after 'a' only when
// that gate is open: the correct per-token gates matter by construction.
std::unique_ptr<ControlledModel> GateDependentModel();
// A two-layer TinyConfig featuregate model with random, input-dependent
// gates at layer 1 and layer 0's controller output weights and bias zero,
// so every layer-0 gate is exactly 2 * sigmoid(0) = 1 whatever the input.
std::unique_ptr<ControlledModel> LayerOneDependentModel(uint64_t seed);
// Text over {a, b} where 'a' is always followed by 'b' and 'b' by either.
std::string GateDependentText(size_t length, uint64_t seed);

}  // namespace fca::engine::testing

#endif  // FCA_TESTS_TESTING_TEST_MODELS_H_
