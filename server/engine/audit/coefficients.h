// Cached coefficient tensors, calibration statistics, the interventions and
// the variation metrics (fca.md "Interventions", "Variance explained").
// Torch-free header; tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_
#define FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// The complete coefficient tensor of a window set: one tensor per site, in
// sites() order, each [N, T, d_s] in the model's compute dtype.
using SiteTensors = std::vector<at::Tensor>;

// Static profiles estimated on the calibration set C.
struct CalibrationStats {
  SiteTensors site_mean;                      // mu_s: [d_s]
  SiteTensors site_position_mean;             // mu_{s,t}: [T, d_s]
  std::map<std::string, double> family_mean;  // m_f
  // m_{f,c}: per-channel means pooled over the sites of a simplex-valued
  // family (SimplexValued at every site on C, one d): its global_mean
  // profile, which one scalar (1/d, every expert tied) would not be.
  std::map<std::string, at::Tensor> family_channel_mean;
};

[[nodiscard]] absl::StatusOr<CalibrationStats> ComputeCalibrationStats(
    const SiteTensors& calib, const std::vector<CoefficientSite>& sites);

// A' for every evaluation window, produced a batch at a time. Each
// implementation is a pure function of the cached tensors, the calibration
// statistics and its seed.
class Intervention {
 public:
  virtual ~Intervention() = default;
  // Coefficients to substitute for evaluation windows [begin, end): one
  // tensor per site, [end - begin, T, d_s].
  virtual SiteTensors Batch(int64_t begin, int64_t end) const = 0;
};

struct InterventionContext {
  const SiteTensors* eval = nullptr;        // A(x_i), required
  const CalibrationStats* calib = nullptr;  // static profiles
  const std::vector<CoefficientSite>* sites = nullptr;
  uint64_t seed = 0;
  bool per_site_shuffle = false;
  // static_token: the token ids of E ([N, T] int64) and of C ([M, T]), and
  // A(c) of C (one [M, T, d_s] tensor per site).
  const at::Tensor* eval_ids = nullptr;
  const at::Tensor* calib_ids = nullptr;
  const SiteTensors* calib_coeff = nullptr;
  // neutral: the model's NeutralCoefficients(), one [d_s] tensor per site.
  const SiteTensors* neutral = nullptr;
  // random_route: the model's RoutedExperts() (k per site, 0 where nothing
  // is routed; empty for a model without routers).
  std::vector<int64_t> routed = {};
};

// INVALID_ARGUMENT for an impossible one (cross_input with a single window).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeIntervention(
    InterventionId id, const InterventionContext& ctx);

// static_token (interventions.cc): per site, the calibration mean of the
// coefficients at positions whose current token id is v, for evaluation
// positions whose id is v; mu_s where v never occurs in C. INVALID_ARGUMENT
// when the ids or calibration tensors are missing or misshapen.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeStaticToken(
    const InterventionContext& ctx);

// random_route (routing.cc): at every site that routes k of its d_s experts,
// per window, position and site, k experts drawn uniformly without
// replacement (seeded from ctx.seed, the window and the site) given 1/k
// each and the others 0; the other sites keep A(x_i). INVALID_ARGUMENT for a
// model without routers.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeRandomRoute(
    const InterventionContext& ctx);

// Top-k agreement (routing.cc, fca.md "Routing agreement"): over evaluation
// windows [0, n) in batches of `batch_size`, the fraction of (token, router
// layer) whose experts chosen by `model` (ChosenExperts, its own top-k) from
// `plan`'s coefficients equal those chosen from `live` (A(x_i)). nullopt for
// a model without routers.
[[nodiscard]] absl::StatusOr<std::optional<TopkAgreement>> MeasureTopkAgreement(
    const ControlledModel& model, const SiteTensors& live, const Intervention& plan,
    int64_t batch_size);

// Scored evaluation positions (0..T-2 of each window) whose id never occurs
// in C, and the distinct ids among them.
[[nodiscard]] absl::StatusOr<TokenCoverage> CountUnseenTokens(const at::Tensor& eval_ids,
                                                              const at::Tensor& calib_ids);

// INVALID_ARGUMENT where per_layer_interventions names correct (the
// reference).
[[nodiscard]] absl::Status ValidateDependenceOptions(const AuditOptions& options);

// Per-group dependence (interventions.cc): the sites of one group.
struct SiteGroup {
  std::string name;           // "3" (a layer), "attn_gate.3" (a site), "attn_gate" (a family)
  std::vector<size_t> sites;  // indices into sites()
};
// The groups of a scope (kScopeLayer by ascending layer, kScopeSite in
// sites() order, kScopeFamily by first appearance).
std::vector<SiteGroup> DependenceGroups(const std::vector<CoefficientSite>& sites, ScopeId scope);
// `inner`'s coefficients at the group's sites, A(x_i) (correct) elsewhere.
std::unique_ptr<Intervention> RestrictToGroup(std::unique_ptr<Intervention> inner,
                                              const SiteTensors& eval, const SiteGroup& group);

// The seeded permutations the interventions use, exposed for tests.
std::vector<int64_t> CrossInputAssignment(int64_t n, uint64_t seed);
std::vector<int64_t> TokenPermutation(int64_t length, uint64_t seed, int64_t sequence,
                                      int64_t site);

// Whether a site's coefficients [N, T, d] lie on the simplex: d >= 2, every
// value >= -tol and every channel vector summing to 1 within tol (1e-5 in
// float32, 1e-2 in bfloat16 and float16): router weights after a softmax.
inline constexpr double kSimplexToleranceFloat32 = 1e-5;
inline constexpr double kSimplexToleranceReduced = 1e-2;
bool SimplexValued(const at::Tensor& a);

struct Variation {
  std::vector<FamilyVariation> families;
  std::vector<SiteVariation> sites;
};
// eta2 and eta2_layer per family with the between-input / within-input
// split of the within-site variance, on E; eta2_layer is left undefined
// (not applicable) for a simplex-valued family (SimplexValued at every site).
Variation ComputeVariation(const SiteTensors& eval, const std::vector<CoefficientSite>& sites);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_
