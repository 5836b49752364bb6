#include "server/runtime/task_spec.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "server/engine/audit/routing.h"

namespace fca::runtime {
namespace {

// The spec's enums (interventions, per-layer interventions, scope) as the
// engine takes them: the one place their names become ids. INVALID_ARGUMENT
// for a name that is none, as core::NormalizeSpec reports it.
absl::Status ParseEnums(const v1::AuditSpec& spec, engine::AuditOptions* o) {
  const std::vector<std::string> interventions(spec.interventions().begin(),
                                               spec.interventions().end());
  FCA_ASSIGN_OR_RETURN(o->interventions,
                       ParseInterventionList(interventions, "intervention", true));
  const std::vector<std::string> per_layer(spec.per_layer_interventions().begin(),
                                           spec.per_layer_interventions().end());
  FCA_ASSIGN_OR_RETURN(o->per_layer_interventions,
                       ParseInterventionList(per_layer, "per-layer intervention", false));
  const std::optional<ScopeId> scope = ParseScope(spec.per_layer_scope());
  if (!scope) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown per_layer_scope '%s' (known: %s)",
                                                      spec.per_layer_scope().substr(0, 64),
                                                      ScopeNameList()));
  }
  o->per_layer_scope = *scope;
  const std::optional<InterventionId> baseline = ParseIntervention(spec.retention_baseline());
  if (!baseline || !IsRetentionBaseline(*baseline)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown retention_baseline '%s' (known: %s)", spec.retention_baseline().substr(0, 64),
        absl::StrJoin(RetentionBaselineNames(), ", ")));
  }
  o->retention_baseline = *baseline;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::AuditOptions> ToEngineOptions(const v1::AuditSpec& s) {
  engine::AuditOptions o;
  FCA_RETURN_IF_ERROR(ParseEnums(s, &o));
  o.window_length = s.window_length();
  o.max_eval_windows = s.max_eval_windows();
  o.max_calib_windows = s.max_calib_windows();
  o.batch_size = s.batch_size();
  o.seed = s.seed();
  o.per_site_shuffle = s.per_site_shuffle();
  o.bootstrap_resamples = s.bootstrap_resamples();
  o.ci_level = s.ci_level();
  o.allow_overlap = s.allow_overlap();
  o.timing_repeats = s.timing_repeats();
  o.timing_max_repeats = s.timing_max_repeats();
  o.timing_budget_seconds = s.timing_budget_seconds();
  o.fidelity_check_every = s.fidelity_check_every();
  o.bootstrap_block_length = s.bootstrap_block_length();
  o.static_token_min_count = s.static_token_min_count();
  o.calib_resamples = s.calib_resamples();
  o.dense_twin_mismatch = s.dense_twin_mismatch();
  return o;
}

absl::StatusOr<engine::Dataset> MakeDataset(DatasetBytes data) {
  engine::Dataset d;
  d.name = data.name;
  d.sha256 = data.sha256;
  if (data.kind == "tokens") {
    if (data.bytes.size() % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dataset '%s' holds %d bytes, not a whole number of int32 tokens",
                          data.name, data.bytes.size()));
    }
    d.kind = engine::Dataset::Kind::kTokens;
    d.tokens.resize(data.bytes.size() / 4);
    // Stored little-endian; this server runs on little-endian machines.
    std::memcpy(d.tokens.data(), data.bytes.data(), data.bytes.size());
  } else if (data.kind == "text") {
    d.kind = engine::Dataset::Kind::kText;
    d.text = std::move(data.bytes);
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset '%s' has unknown kind '%s'", data.name, data.kind.substr(0, 32)));
  }
  return d;
}

absl::StatusOr<ResolvedAudit> ResolveTask(const v1::AuditSpec& spec, const std::string& model,
                                          ModelRepository* models, engine::Dataset eval,
                                          engine::Dataset calib) {
  ResolvedAudit out;
  engine::AuditRequest& req = out.request;
  FCA_ASSIGN_OR_RETURN(std::shared_ptr<engine::ControlledModel> m, models->Get(model));
  req.models.push_back(m.get());
  // A router audited in reduced precision gets its float32 recording
  // (docs/fca.md "Routing flip rate").
  if (engine::NeedsFloat32Reference(*m)) {
    FCA_ASSIGN_OR_RETURN(std::shared_ptr<engine::ControlledModel> reference,
                         models->LoadFloat32(model));
    req.float32_references.push_back(reference.get());
    out.models.push_back(std::move(reference));
  }
  out.models.push_back(std::move(m));
  if (!spec.dense_twin().empty()) {
    FCA_ASSIGN_OR_RETURN(std::shared_ptr<engine::ControlledModel> twin,
                         models->Get(spec.dense_twin()));
    req.dense_twin = twin.get();
    out.models.push_back(std::move(twin));
  }
  out.eval_sha256 = eval.sha256;
  out.calib_sha256 = calib.sha256;
  req.eval = std::move(eval);
  req.calib = std::move(calib);
  FCA_ASSIGN_OR_RETURN(req.options, ToEngineOptions(spec));
  return out;
}

}  // namespace fca::runtime
