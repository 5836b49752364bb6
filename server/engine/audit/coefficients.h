// Cached coefficient tensors, calibration statistics, the interventions of
// the paper and the variation metrics (fca.md "Interventions", "Variance
// explained"); the interventions beyond it are interventions.h's.
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
#include "server/engine/audit/audit_types.h"
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
  // static_token(_position): the token ids of E ([N, T] int64) and of C
  // ([M, T]), A(c) of C (one [M, T, d_s] tensor per site) and the minimum
  // count below which a cell is shrunk (AuditOptions::static_token_min_count).
  const at::Tensor* eval_ids = nullptr;
  const at::Tensor* calib_ids = nullptr;
  const SiteTensors* calib_coeff = nullptr;
  int64_t token_min_count = 1;
  // neutral: the model's NeutralCoefficients(), one [d_s] tensor per site.
  const SiteTensors* neutral = nullptr;
  // random_route: the model's RoutedExperts() (k per site, 0 where nothing
  // is routed; empty for a model without routers).
  std::vector<int64_t> routed = {};
};

// INVALID_ARGUMENT for an impossible one (cross_input with a single window).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Intervention>> MakeIntervention(
    InterventionId id, const InterventionContext& ctx);

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
