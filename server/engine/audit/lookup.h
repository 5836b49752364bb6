// Lookup-table diagnostics (fca.md "Lookup tables"): how much of a site's
// coefficient variation the current token id, or the (token id, position)
// pair, explains on E, in sample and from C's tables. Torch-free header.
#ifndef FCA_SERVER_ENGINE_AUDIT_LOOKUP_H_
#define FCA_SERVER_ENGINE_AUDIT_LOOKUP_H_

#include "absl/status/status.h"
#include "server/engine/audit/coefficients.h"

namespace fca::engine {

// A site's coefficients are an exact function of (token, position) up to
// this share of unexplained variance (1 - eta2_token_position).
inline constexpr double kLookupTableTolerance = 1e-9;

// Fills the token and token_position shares (KeyedShare) of every site and
// family of `v` (ComputeVariation's, on the same E) and the sites'
// lookup_table. eval: A(x) of E ([N, T, d_s] per site); ids: E's token ids
// [N, T].
void AddLookupDiagnostics(const SiteTensors& eval, const at::Tensor& ids, Variation* v);

// Fills the out-of-sample shares (token_oos, token_position_oos) of every
// site and family of `v`: over E's scored positions, 1 - SS around the value
// static_token (static_token_position) substitutes, a table from C, / SS
// around E's per-channel means. ctx: the replays' (E, C, their ids, the
// minimum count); its errors are MakeStaticToken's.
[[nodiscard]] absl::Status AddOutOfSampleLookup(const InterventionContext& ctx, Variation* v);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_LOOKUP_H_
