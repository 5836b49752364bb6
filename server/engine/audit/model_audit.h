// One model's audit (fca.md): its windows, the LIVE passes over E and C
// (through the coefficient cache), calibration statistics, one REPLAY per
// intervention and per-group dependence, the statistics and the execution
// audit. RunAudit (auditor.cc) runs one per model. Torch-free header;
// model_audit.cc defines AuditModel with the class that runs the phases
// (model_audit_phases.h), model_audit_execution.cc the timing's two below.
#ifndef FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_H_
#define FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/audit/audit_types.h"

namespace fca::engine {

struct ModelAuditResult {
  ModelReport report;
};

// An intervention the default list leaves out of a model, and why.
struct SkippedIntervention {
  InterventionId id;
  const char* reason;  // "the model has no mixture-of-experts router"
};

// The interventions `model` is audited under. The default list (every
// intervention, options.interventions empty) means every one that applies
// to the model: random_route applies to mixture-of-experts routers only,
// neutral to a model with neutral coefficients (a TorchScript module may
// export no neutral()); the others are left out and, when `skipped` is
// given, listed there. A list that names one keeps it (and the audit
// refuses it, saying why).
std::vector<InterventionId> ApplicableInterventions(
    const std::vector<InterventionId>& all, const AuditOptions& options,
    const ControlledModel& model, std::vector<SkippedIntervention>* skipped = nullptr);

// Audits req.models[index] with `interventions` (`correct` first). Its
// progress fraction is of the whole request, each model an equal share,
// within it each phase weighted by its expected cost (progress_weights.h).
absl::StatusOr<ModelAuditResult> AuditModel(const AuditRequest& req,
                                            const std::vector<InterventionId>& interventions,
                                            int64_t index);

// FAILED_PRECONDITION when a model's FLOPs per token, every block run and
// its controller removed, differ from the dense twin's by more than
// kDenseTwinFlopsTolerance (dense_twin.h), unless the options say why the
// mismatch is intended; counted on the first window of E.
[[nodiscard]] absl::Status CheckDenseTwinFlops(const AuditRequest& req);

// The dense twin's own execution figures, counted on the first batch of E.
// No latency: the twin is timed in each model's pairs, and each model's
// rows carry the twin's median of its own pairs (dense_latency_us_per_token).
absl::StatusOr<ExecutionResult> DenseTwinExecution(const AuditRequest& req);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_MODEL_AUDIT_H_
