// Mixture-of-experts routing in the audit (routing.cc; fca.md "Routing
// agreement", docs/moe.md): which models route, the random_route
// intervention, the top-k agreement and overlap of an intervention's chosen
// experts with LIVE's, LIVE's routing statistics, and when the routing flip
// rate needs a float32 reference.
// Torch-free header; tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_ROUTING_H_
#define FCA_SERVER_ENGINE_AUDIT_ROUTING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

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
// those chosen from `live` (A(x_i)), and the mean over them of
// |S ∩ S_live| / k (the overlap). nullopt for a model without routers.
[[nodiscard]] absl::StatusOr<std::optional<TopkAgreement>> MeasureTopkAgreement(
    const ControlledModel& model, const SiteTensors& live, const Intervention& plan,
    int64_t batch_size);

// How many of the most frequent token ids get their own routing rows
// (token_expert_share, fca.md "Routing statistics").
inline constexpr int64_t kTopTokenIds = 16;
// The most expert_coactivation rows a router layer gets: every pair up to
// 23 experts (253 pairs), the largest 256 beyond (OLMoE's 64 experts have
// 2,016 pairs per layer, 32,256 rows over its 16 layers).
inline constexpr int64_t kMaxCoactivationPairs = 256;

// LIVE's routing at every router layer, over evaluation windows [0, n).
struct RoutingStatistics {
  std::vector<ExecutionResult::ExpertLoad> load;          // one per layer
  std::vector<ExecutionResult::ExpertPair> coactivation;  // stored pairs (max_pairs)
  std::vector<ExecutionResult::TokenExpertShare> token_experts;
};

// The routing of every router layer over evaluation windows [0, n) of
// `live` (LIVE's recorded coefficients, A(x_i)), in batches of
// `batch_size`: the experts `model`'s own top-k chooses (ChosenExperts, as
// LIVE ran them) counted per expert (the load), per pair of experts (the
// co-activation: every pair, or the `max_pairs` largest of a layer) and,
// for the `top_token_ids` most frequent ids of `ids`
// (int64 [n, T], the windows' token ids; undefined: none), per token id
// (its k most chosen experts). Layers in increasing order; empty for a
// model without routers. INVALID_ARGUMENT when `ids` does not match `live`.
[[nodiscard]] absl::StatusOr<RoutingStatistics> MeasureRouting(
    const ControlledModel& model, const SiteTensors& live, const at::Tensor& ids,
    int64_t batch_size, int64_t top_token_ids = kTopTokenIds,
    int64_t max_pairs = kMaxCoactivationPairs);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_ROUTING_H_
