// Cached coefficient tensors, calibration statistics, the interventions and
// the variation metrics (fca.md "Interventions", "Variance explained").
// Torch-free header; tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_
#define FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_

#include <cstdint>
#include <map>
#include <memory>
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
  SiteTensors site_mean;           // mu_s: [d_s]
  SiteTensors site_position_mean;  // mu_{s,t}: [T, d_s]
  std::map<std::string, double> family_mean;  // m_f
};

absl::StatusOr<CalibrationStats> ComputeCalibrationStats(
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
  const SiteTensors* eval = nullptr;              // A(x_i), required
  const CalibrationStats* calib = nullptr;        // static profiles
  const std::vector<CoefficientSite>* sites = nullptr;
  uint64_t seed = 0;
  bool per_site_shuffle = false;
};

// INVALID_ARGUMENT for an unknown name or an impossible one (cross_input
// with a single window).
absl::StatusOr<std::unique_ptr<Intervention>> MakeIntervention(const std::string& name,
                                                               const InterventionContext& ctx);

// The seeded permutations the interventions use, exposed for tests.
std::vector<int64_t> CrossInputAssignment(int64_t n, uint64_t seed);
std::vector<int64_t> TokenPermutation(int64_t length, uint64_t seed, int64_t sequence,
                                      int64_t site);

struct Variation {
  std::vector<FamilyVariation> families;
  std::vector<SiteVariation> sites;
};
// eta2 per family with its between-input / within-input split, on E.
Variation ComputeVariation(const SiteTensors& eval, const std::vector<CoefficientSite>& sites);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_COEFFICIENTS_H_
