#include "server/worker/spec.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "server/engine/text/unicode.h"

namespace fca::core {
namespace {

absl::Status Range(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("spec field '%s' is %d; it must be in [%d, %d]", field, value, lo, hi));
}

template <typename T>
void Default(T value, T fallback, void (v1::AuditSpec::*set)(T), v1::AuditSpec* spec) {
  if (value == 0) (spec->*set)(fallback);
}

// `field` names the spec field in messages ("intervention", "per-layer
// intervention"); `correct` is refused where it would compare with itself.
absl::Status CheckNames(const google::protobuf::RepeatedPtrField<std::string>& names,
                        const char* field, bool allow_correct) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (!ParseIntervention(name) || (!allow_correct && name == kCorrect)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown %s '%s' (known: %s%s)", field, name.substr(0, 64), InterventionNameList(),
          allow_correct ? "" : "; not correct, the reference"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrFormat("%s '%s' is listed twice", field, name));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInterventions(const v1::AuditSpec& spec) {
  FCA_RETURN_IF_ERROR(CheckNames(spec.interventions(), "intervention", true));
  FCA_RETURN_IF_ERROR(CheckNames(spec.per_layer_interventions(), "per-layer intervention", false));
  if (FindScope(spec.per_layer_scope()) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("unknown per_layer_scope '%s' (known: %s)",
                                                    spec.per_layer_scope().substr(0, 64),
                                                    ScopeNameList()));
}

// Labels are shown in listings and terminals: printable UTF-8 only (no
// control characters, so no escape sequences), at most 256 bytes.
absl::Status CheckLabel(const std::string& label) {
  if (label.size() > 256) return absl::InvalidArgumentError("spec label exceeds 256 bytes");
  const size_t bad = engine::unicode::FindInvalidUtf8(label);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec label is not valid UTF-8 (byte %d)", bad));
  }
  for (size_t pos = 0; pos < label.size();) {
    const size_t at = pos;
    const char32_t c = engine::unicode::NextCodePoint(label, &pos);
    if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec label has a control character (U+%04X) at byte %d", static_cast<uint32_t>(c), at));
    }
  }
  return absl::OkStatus();
}

// Defaults and ranges of the adaptive timing; timing_repeats has its
// default already.
absl::Status CheckTiming(v1::AuditSpec* s, const SpecLimits& limits) {
  Default<int32_t>(s->timing_max_repeats(), std::max(200, s->timing_repeats()),
                   &v1::AuditSpec::set_timing_max_repeats, s);
  if (s->timing_budget_seconds() == 0) s->set_timing_budget_seconds(60);
  FCA_RETURN_IF_ERROR(Range("timing_max_repeats", s->timing_max_repeats(), s->timing_repeats(),
                            limits.max_timing_max_repeats));
  if (!(s->timing_budget_seconds() > 0 &&
        s->timing_budget_seconds() <= limits.max_timing_budget_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec field 'timing_budget_seconds' is %g; it must be in (0, %g]",
                        s->timing_budget_seconds(), limits.max_timing_budget_seconds));
  }
  return absl::OkStatus();
}
}  // namespace

engine::AuditOptions ToEngineOptions(const v1::AuditSpec& s) {
  engine::AuditOptions o;
  o.interventions.assign(s.interventions().begin(), s.interventions().end());
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
  o.per_layer_interventions.assign(s.per_layer_interventions().begin(),
                                   s.per_layer_interventions().end());
  o.per_layer_scope = s.per_layer_scope();
  o.fidelity_check_every = s.fidelity_check_every();
  return o;
}

absl::StatusOr<v1::AuditSpec> NormalizeSpec(const v1::AuditSpec& in, const SpecLimits& limits) {
  v1::AuditSpec s = in;
  if (s.models_size() == 0) return absl::InvalidArgumentError("spec names no model to audit");
  if (s.models_size() > limits.max_models) {
    return absl::InvalidArgumentError(absl::StrFormat("spec names %d models; the limit is %d",
                                                      s.models_size(), limits.max_models));
  }
  std::set<std::string> names;
  for (const std::string& m : s.models()) {
    FCA_RETURN_IF_ERROR(ValidateName(m, "model"));
    if (!names.insert(m).second)
      return absl::InvalidArgumentError("model '" + m + "' is listed twice");
  }
  if (!s.dense_twin().empty()) FCA_RETURN_IF_ERROR(ValidateName(s.dense_twin(), "dense_twin"));
  if (s.eval_dataset().empty() || s.calib_dataset().empty()) {
    return absl::InvalidArgumentError("spec needs eval_dataset and calib_dataset");
  }
  if (s.per_layer_scope().empty()) s.set_per_layer_scope(kScopeLayer);
  FCA_RETURN_IF_ERROR(CheckInterventions(s));
  Default<int64_t>(s.window_length(), 128, &v1::AuditSpec::set_window_length, &s);
  Default<int64_t>(s.batch_size(), 8, &v1::AuditSpec::set_batch_size, &s);
  Default<int32_t>(s.bootstrap_resamples(), 1000, &v1::AuditSpec::set_bootstrap_resamples, &s);
  Default<int32_t>(s.timing_repeats(), 7, &v1::AuditSpec::set_timing_repeats, &s);
  Default<int32_t>(s.fidelity_check_every(), 8, &v1::AuditSpec::set_fidelity_check_every, &s);
  Default<int64_t>(s.max_eval_windows(), limits.max_windows, &v1::AuditSpec::set_max_eval_windows,
                   &s);
  Default<int64_t>(s.max_calib_windows(), limits.max_windows, &v1::AuditSpec::set_max_calib_windows,
                   &s);
  if (s.ci_level() == 0) s.set_ci_level(0.95);
  FCA_RETURN_IF_ERROR(Range("window_length", s.window_length(), 2, limits.max_window_length));
  FCA_RETURN_IF_ERROR(Range("batch_size", s.batch_size(), 1, limits.max_batch_size));
  FCA_RETURN_IF_ERROR(Range("max_eval_windows", s.max_eval_windows(), 1, limits.max_windows));
  FCA_RETURN_IF_ERROR(Range("max_calib_windows", s.max_calib_windows(), 1, limits.max_windows));
  FCA_RETURN_IF_ERROR(
      Range("bootstrap_resamples", s.bootstrap_resamples(), 1, limits.max_bootstrap_resamples));
  FCA_RETURN_IF_ERROR(Range("timing_repeats", s.timing_repeats(), 0, limits.max_timing_repeats));
  FCA_RETURN_IF_ERROR(Range("fidelity_check_every", s.fidelity_check_every(), 1, 1000000));
  if (!(s.ci_level() > 0 && s.ci_level() < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec field 'ci_level' is %g; it must be in (0, 1)", s.ci_level()));
  }
  FCA_RETURN_IF_ERROR(CheckTiming(&s, limits));
  FCA_RETURN_IF_ERROR(CheckLabel(s.label()));
  return s;
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
  req.options = ToEngineOptions(spec);
  return out;
}

}  // namespace fca::core
