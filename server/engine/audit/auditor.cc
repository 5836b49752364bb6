#include "server/engine/audit/auditor.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/build_version.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/dense_twin.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/model_audit.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/audit/routing.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// INVALID_ARGUMENT unless the field's range (common/spec_fields.h) holds
// the option: "batch_size 0 is outside [1, 4096]".
absl::Status CheckOption(const spec_fields::SpecField& field, double value) {
  if (spec_fields::InRange(field, value, field.min, field.max)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s %s is outside %s", field.name, spec_fields::Number(value),
                      spec_fields::RangeText(field, field.min, field.max)));
}

absl::Status ValidateOptions(const AuditOptions& o) {
  FCA_RETURN_IF_ERROR(ValidateDependenceOptions(o));
  namespace sf = spec_fields;
  FCA_RETURN_IF_ERROR(CheckOption(sf::kBatchSize, o.batch_size));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kBootstrapResamples, o.bootstrap_resamples));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kCiLevel, o.ci_level));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kTimingRepeats, o.timing_repeats));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kTimingMaxRepeats, o.timing_max_repeats));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kBootstrapBlockLength, o.bootstrap_block_length));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kStaticTokenMinCount, o.static_token_min_count));
  FCA_RETURN_IF_ERROR(CheckOption(sf::kCalibResamples, o.calib_resamples));
  if (!IsRetentionBaseline(o.retention_baseline)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "retention_baseline '%s' is not one of: %s", InterventionName(o.retention_baseline),
        absl::StrJoin(RetentionBaselineNames(), ", ")));
  }
  // The engine takes a budget of 0: the minimum repeats only.
  if (!(o.timing_budget_seconds >= sf::kTimingBudgetSeconds.min) || o.timing_warmup < 0 ||
      !(o.timing_resolution >= 0)) {
    return absl::InvalidArgumentError("the timing budget, warmup and resolution must be >= 0");
  }
  if (!(o.fidelity_tolerance >= 0)) {
    return absl::InvalidArgumentError("fidelity_tolerance must be >= 0");
  }
  return CheckOption(sf::kFidelityCheckEvery, o.fidelity_check_every);
}

std::vector<InterventionId> ResolveInterventions(const AuditOptions& o) {
  std::vector<InterventionId> out = {InterventionId::kCorrect};
  for (const InterventionDef& d : InterventionDefs()) {
    if (d.id == InterventionId::kCorrect) continue;
    if (o.interventions.empty() ||
        std::find(o.interventions.begin(), o.interventions.end(), d.id) != o.interventions.end()) {
      out.push_back(d.id);
    }
  }
  return out;
}

std::string DatasetHash(const Dataset& d) {
  if (!d.sha256.empty()) return d.sha256;
  if (d.kind == Dataset::Kind::kText) return Sha256Hex(d.text);
  return Sha256Hex(std::string_view(reinterpret_cast<const char*>(d.tokens.data()),
                                    d.tokens.size() * sizeof(int32_t)));
}

absl::Status ValidateModels(const AuditRequest& req) {
  if (req.models.empty()) return absl::InvalidArgumentError("the audit names no model");
  for (const ControlledModel* m : req.models) {
    if (m == nullptr) return absl::InvalidArgumentError("the audit names a null model");
  }
  if (req.dense_twin != nullptr && !req.dense_twin->sites().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense twin '%s' has controller coefficients; a dense twin must have none",
                        req.dense_twin->info().name));
  }
  if (req.dense_twin == nullptr) return absl::OkStatus();
  for (const ControlledModel* m : req.models) {
    FCA_RETURN_IF_ERROR(
        CheckTwinArchitecture(m->info(), req.dense_twin->info(), req.options.dense_twin_mismatch));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EngineVersion() { return BuildVersion(); }

absl::StatusOr<AuditReport> RunAudit(const AuditRequest& req) {
  FCA_RETURN_IF_ERROR(ValidateModels(req));
  FCA_RETURN_IF_ERROR(ValidateOptions(req.options));
  FCA_RETURN_IF_ERROR(
      GuardTorch("matching the dense twin", [&] { return CheckDenseTwinFlops(req); }));
  const std::vector<InterventionId> interventions = ResolveInterventions(req.options);
  AuditReport report;
  report.options = req.options;
  report.eval_dataset_sha256 = DatasetHash(req.eval);
  report.calib_dataset_sha256 = DatasetHash(req.calib);
  report.runtime = CurrentRuntime(req.models.front()->info().compute.device);
  for (size_t i = 0; i < req.models.size(); ++i) {
    FCA_ASSIGN_OR_RETURN(ModelAuditResult audited,
                         GuardTorch("auditing model '" + req.models[i]->info().name + "'", [&] {
                           return AuditModel(req, interventions, static_cast<int64_t>(i));
                         }));
    if (req.on_model_done) req.on_model_done(audited.report);
    report.models.push_back(std::move(audited.report));
  }
  if (req.dense_twin != nullptr) {
    FCA_ASSIGN_OR_RETURN(report.dense_twin, GuardTorch("counting the dense twin",
                                                       [&] { return DenseTwinExecution(req); }));
  }
  report.aggregate = Aggregate(report.models);
  return report;
}

}  // namespace fca::engine
