// Mixture-of-experts routing in the audit (routing.cc; fca.md "Routing
// agreement", docs/moe.md): which models route, the random_route
// intervention, the top-k agreement of an intervention's chosen experts
// with LIVE's, and when the routing flip rate needs a float32 reference.
// Torch-free header; tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_ROUTING_H_
#define FCA_SERVER_ENGINE_AUDIT_ROUTING_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "server/engine/audit/audit_types.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// Whether `model` has a mixture-of-experts router (a site routing k > 0 of
// its experts).
bool HasRouters(const ControlledModel& model);

// Whether an audit of `model` has a routing flip rate to measure: it has
// routers and computes in bfloat16 or float16 (fca.md "Routing flip rate").
bool NeedsFloat32Reference(const ControlledModel& model);

// random_route: at every site that routes k of its d_s experts, per window,
// position and site, k experts drawn uniformly without replacement (seeded
// from ctx.seed, the window and the site) given 1/k each and the others 0;
// the other sites keep A(x_i). INVALID_ARGUMENT for a model without routers.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeRandomRoute(
    const InterventionContext& ctx);

// Top-k agreement: over evaluation windows [0, n) in batches of
// `batch_size`, the fraction of (token, router layer) whose experts chosen by
// `model` (ChosenExperts, its own top-k) from `plan`'s coefficients equal
// those chosen from `live` (A(x_i)). nullopt for a model without routers.
[[nodiscard]] absl::StatusOr<std::optional<TopkAgreement>> MeasureTopkAgreement(
    const ControlledModel& model, const SiteTensors& live, const Intervention& plan,
    int64_t batch_size);

// The load of every router layer over evaluation windows [0, n) of `live`
// (LIVE's recorded coefficients, A(x_i)), in batches of `batch_size`: the
// experts `model`'s own top-k chooses (ChosenExperts, as LIVE ran them),
// counted per expert, one ExpertLoad per router layer in layer order. Empty
// for a model without routers.
[[nodiscard]] absl::StatusOr<std::vector<ExecutionResult::ExpertLoad>> MeasureExpertLoad(
    const ControlledModel& model, const SiteTensors& live, int64_t batch_size);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_ROUTING_H_
