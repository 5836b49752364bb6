#include "server/worker/spec.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "server/engine/audit/routing.h"
#include "server/engine/text/unicode.h"

namespace fca::core {
namespace {

namespace sf = spec_fields;

// INVALID_ARGUMENT unless lo..hi (the field's open ends) holds `value`;
// `text` is the value as the message shows it.
absl::Status CheckRange(const sf::SpecField& field, double value, const std::string& text,
                        double lo, double hi) {
  if (sf::InRange(field, value, lo, hi)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "spec field '%s' is %s; it must be in %s", field.name, text, sf::RangeText(field, lo, hi)));
}

absl::Status Range(const sf::SpecField& field, int64_t value, double hi) {
  return CheckRange(field, static_cast<double>(value), absl::StrCat(value), field.min, hi);
}

absl::Status RealRange(const sf::SpecField& field, double value, double hi) {
  return CheckRange(field, value, absl::StrFormat("%g", value), field.min, hi);
}

// Sets the field's default where the spec has 0.
template <typename T>
void Default(const sf::SpecField& field, T value, void (v1::AuditSpec::*set)(T),
             v1::AuditSpec* spec) {
  if (value == 0) (spec->*set)(field.Default<T>());
}

// The spec's enums (interventions, per-layer interventions, scope) as the
// engine takes them: the one place their names become ids. INVALID_ARGUMENT
// for a name that is none, as NormalizeSpec reports it.
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

// Labels are shown in listings and terminals: printable UTF-8 only (no
// control characters, so no escape sequences), at most 256 bytes.
absl::Status CheckLabel(const std::string& label) {
  if (static_cast<double>(label.size()) > sf::kLabel.max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec label exceeds %d bytes", static_cast<int>(sf::kLabel.max)));
  }
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
  if (s->timing_max_repeats() == 0) {
    s->set_timing_max_repeats(
        std::max(sf::kTimingMaxRepeats.Default<int32_t>(), s->timing_repeats()));
  }
  Default(sf::kTimingBudgetSeconds, s->timing_budget_seconds(),
          &v1::AuditSpec::set_timing_budget_seconds, s);
  FCA_RETURN_IF_ERROR(CheckRange(sf::kTimingMaxRepeats, s->timing_max_repeats(),
                                 absl::StrCat(s->timing_max_repeats()), s->timing_repeats(),
                                 static_cast<double>(limits.max_timing_max_repeats)));
  return RealRange(sf::kTimingBudgetSeconds, s->timing_budget_seconds(),
                   limits.max_timing_budget_seconds);
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
  if (s.per_layer_scope().empty()) s.set_per_layer_scope(ScopeName(sf::DefaultScope()));
  if (s.retention_baseline().empty()) s.set_retention_baseline(RetentionBaselineNames()[0]);
  engine::AuditOptions parsed;
  FCA_RETURN_IF_ERROR(ParseEnums(s, &parsed));
  Default(sf::kWindowLength, s.window_length(), &v1::AuditSpec::set_window_length, &s);
  Default(sf::kBatchSize, s.batch_size(), &v1::AuditSpec::set_batch_size, &s);
  Default(sf::kBootstrapResamples, s.bootstrap_resamples(), &v1::AuditSpec::set_bootstrap_resamples,
          &s);
  // 0 is a value here (no timing), so only an unset field takes the default.
  if (!s.has_timing_repeats()) s.set_timing_repeats(sf::kTimingRepeats.Default<int32_t>());
  Default(sf::kFidelityCheckEvery, s.fidelity_check_every(),
          &v1::AuditSpec::set_fidelity_check_every, &s);
  if (s.max_eval_windows() == 0) s.set_max_eval_windows(limits.max_windows);
  if (s.max_calib_windows() == 0) s.set_max_calib_windows(limits.max_windows);
  Default(sf::kCiLevel, s.ci_level(), &v1::AuditSpec::set_ci_level, &s);
  Default(sf::kStaticTokenMinCount, s.static_token_min_count(),
          &v1::AuditSpec::set_static_token_min_count, &s);
  FCA_RETURN_IF_ERROR(Range(sf::kWindowLength, s.window_length(), limits.max_window_length));
  FCA_RETURN_IF_ERROR(Range(sf::kBatchSize, s.batch_size(), limits.max_batch_size));
  FCA_RETURN_IF_ERROR(Range(sf::kMaxEvalWindows, s.max_eval_windows(), limits.max_windows));
  FCA_RETURN_IF_ERROR(Range(sf::kMaxCalibWindows, s.max_calib_windows(), limits.max_windows));
  FCA_RETURN_IF_ERROR(
      Range(sf::kBootstrapResamples, s.bootstrap_resamples(), limits.max_bootstrap_resamples));
  FCA_RETURN_IF_ERROR(Range(sf::kTimingRepeats, s.timing_repeats(), limits.max_timing_repeats));
  FCA_RETURN_IF_ERROR(
      Range(sf::kFidelityCheckEvery, s.fidelity_check_every(), sf::kFidelityCheckEvery.max));
  FCA_RETURN_IF_ERROR(RealRange(sf::kCiLevel, s.ci_level(), sf::kCiLevel.max));
  FCA_RETURN_IF_ERROR(
      Range(sf::kBootstrapBlockLength, s.bootstrap_block_length(), sf::kBootstrapBlockLength.max));
  FCA_RETURN_IF_ERROR(
      Range(sf::kStaticTokenMinCount, s.static_token_min_count(), sf::kStaticTokenMinCount.max));
  FCA_RETURN_IF_ERROR(
      Range(sf::kCalibResamples, s.calib_resamples(), sf::kCalibResamples.ServerLimit()));
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

}  // namespace fca::core
