// The `torchscript` family: a lab's own dynamic model, saved with
// torch.jit.save, driven through the method contract of docs/torchscript.md
// (live, replay; optionally record, neutral, count). Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_MODEL_H_

#include <exception>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torchscript_config.h"

namespace fca::engine {

// Loads the module at `path` (model.pt) onto info.compute's device, converts
// its floating-point parameters and buffers to the compute dtype, and checks
// the contract before anything is audited: the methods and their
// signatures, then a probe (a few token windows) that the coefficients
// match `config`'s sites, record() agrees with live(), neutral() has one
// value per channel, and replay() depends on every site's coefficients (a
// replay that recomputes its controller is refused here, with the measured
// difference). INVALID_ARGUMENT naming what is wrong, for a file that is not
// a TorchScript module or a module that breaks the contract;
// RESOURCE_EXHAUSTED when loading or probing it ran out of memory.
//
// The returned model's Forward turns an exception thrown by the module's
// code into ModuleFailure's status; nothing thrown leaves it.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTorchScriptModel(
    const std::string& path, const TorchScriptConfig& config, ModelInfo info);

// The status of an exception `e` thrown by `method` of model `model`'s
// module: RESOURCE_EXHAUSTED when it ran out of memory (IsOutOfMemory: the
// interpreter rethrows torch's errors as text, so the text decides), else
// FAILED_PRECONDITION naming the model, the method and the module's message.
[[nodiscard]] absl::Status ModuleFailure(const std::string& model, const std::string& method,
                                         const std::exception& e);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_TORCHSCRIPT_MODEL_H_
