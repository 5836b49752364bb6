// A matched dense twin (fca.md "Execution"): the slowdown and the FLOPs
// overhead against a twin only say what a controller costs when the twin is
// the same network without it. Checked at SubmitAudit from the models'
// descriptions (no weights) and again by the engine, which also compares
// FLOPs. Torch-free.
#ifndef FCA_SERVER_ENGINE_AUDIT_DENSE_TWIN_H_
#define FCA_SERVER_ENGINE_AUDIT_DENSE_TWIN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// The most |F_model / F_twin - 1| a matched twin may show, F counted on one
// window with every block of the model run and its controller removed (a
// REPLAY of its neutral coefficients). A matched pair differs only by
// design details outside the shared architecture (the bundled OLMoE layout
// against its dense twin: +0.3% with its controller), while a width 12%
// larger already costs ~25% more FLOPs.
inline constexpr double kDenseTwinFlopsTolerance = 0.25;

// What differs between the shared architecture of `model` and `twin`
// (layers, width, heads, vocabulary, window), one entry per difference:
// "width 320 vs 96". A size either side does not state (0) is not compared.
std::vector<std::string> ArchitectureDifferences(const ModelInfo& model, const ModelInfo& twin);

// OK when the twin matches or `mismatch_reason` is not empty; else
// FAILED_PRECONDITION naming the twin, the model and every difference.
absl::Status CheckTwinArchitecture(const ModelInfo& model, const ModelInfo& twin,
                                   const std::string& mismatch_reason);

// OK when |model_flops / twin_flops - 1| <= kDenseTwinFlopsTolerance or
// `mismatch_reason` is not empty; else FAILED_PRECONDITION naming both
// FLOPs per token.
absl::Status CheckTwinFlops(const ModelInfo& model, const ModelInfo& twin, double model_flops,
                            double twin_flops, const std::string& mismatch_reason);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_DENSE_TWIN_H_
