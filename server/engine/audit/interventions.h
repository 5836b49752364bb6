// Interventions beyond the paper (interventions.cc; fca.md "Beyond the
// paper"): static_token and static_token_position, the token coverage and
// cells they report, and the site groups
// of the per-group dependence audit. Torch-free header; tensors are
// forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_INTERVENTIONS_H_
#define FCA_SERVER_ENGINE_AUDIT_INTERVENTIONS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/audit/audit_types.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// static_token: per site, the calibration mean of the coefficients at
// positions whose current token id is v, for evaluation positions whose id
// is v. static_token_position: the same per (v, t).
// With n the cell's count in C and m = ctx.token_min_count, a cell with
// n < m reads w * mean + (1 - w) * prior, w = n / (n + m); the prior is
// mu_s for an id and the id's own (shrunk) value mu~_{s,v} for a pair
// (v, t): cell -> token -> site. A cell C never has (n = 0) reads its
// prior: an unseen pair of a seen id mu~_{s,v}, an unseen id mu_s.
// INVALID_ARGUMENT when the ids or calibration tensors are missing or
// misshapen.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeStaticToken(
    const InterventionContext& ctx, bool by_position);
// The cells of C's table and those with fewer than min_count positions.
[[nodiscard]] absl::StatusOr<TokenCells> CountTokenCells(const at::Tensor& calib_ids,
                                                         bool by_position, int64_t min_count);

// Scored evaluation positions (0..T-2 of each window) whose id never occurs
// in C, and the distinct ids among them.
[[nodiscard]] absl::StatusOr<TokenCoverage> CountUnseenTokens(const at::Tensor& eval_ids,
                                                              const at::Tensor& calib_ids);

// INVALID_ARGUMENT where per_layer_interventions names correct (the
// reference).
[[nodiscard]] absl::Status ValidateDependenceOptions(const AuditOptions& options);

// Per-group dependence: the sites of one group.
struct SiteGroup {
  std::string name;              // "3" (a layer), "attn_gate.3" (a site), "attn_gate" (a family)
  std::vector<size_t> sites;     // indices into sites()
  std::optional<int64_t> layer;  // a layer's: its number, the key of its rows
};
// The groups of a scope (kScopeLayer by ascending layer, kScopeSite in
// sites() order, kScopeFamily by first appearance).
std::vector<SiteGroup> DependenceGroups(const std::vector<CoefficientSite>& sites, ScopeId scope);
// `inner`'s coefficients at the group's sites, A(x_i) (correct) elsewhere.
std::unique_ptr<Intervention> RestrictToGroup(std::unique_ptr<Intervention> inner,
                                              const SiteTensors& eval, const SiteGroup& group);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_INTERVENTIONS_H_
