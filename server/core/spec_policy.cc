#include "server/core/spec_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "server/engine/text/unicode.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/task_spec.h"

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

// Labels and the twin's mismatch reason are shown in listings, reports and
// terminals: printable UTF-8 only (no control characters, so no escape
// sequences), at most the field's max bytes.
absl::Status CheckPrintable(const std::string& text, const sf::SpecField& field) {
  if (static_cast<double>(text.size()) > field.max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec %s exceeds %d bytes", field.name, static_cast<int>(field.max)));
  }
  const size_t bad = engine::unicode::FindInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec %s is not valid UTF-8 (byte %d)", field.name, bad));
  }
  for (size_t pos = 0; pos < text.size();) {
    const size_t at = pos;
    const char32_t c = engine::unicode::NextCodePoint(text, &pos);
    if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("spec %s has a control character (U+%04X) at byte %d", field.name,
                          static_cast<uint32_t>(c), at));
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

absl::StatusOr<v1::AuditSpec> NormalizeSpec(const v1::AuditSpec& in, const SpecLimits& limits) {
  v1::AuditSpec s = in;
  if (s.models_size() == 0) return absl::InvalidArgumentError("spec names no model to audit");
  if (s.models_size() > limits.max_models) {
    return absl::InvalidArgumentError(absl::StrFormat("spec names %d models; the limit is %d",
                                                      s.models_size(), limits.max_models));
  }
  std::set<std::string> names;
  for (const std::string& m : s.models()) {
    FCA_RETURN_IF_ERROR(runtime::ValidateName(m, "model"));
    if (!names.insert(m).second)
      return absl::InvalidArgumentError("model '" + m + "' is listed twice");
  }
  if (!s.dense_twin().empty())
    FCA_RETURN_IF_ERROR(runtime::ValidateName(s.dense_twin(), "dense_twin"));
  if (s.eval_dataset().empty() || s.calib_dataset().empty()) {
    return absl::InvalidArgumentError("spec needs eval_dataset and calib_dataset");
  }
  if (s.per_layer_scope().empty()) s.set_per_layer_scope(ScopeName(sf::DefaultScope()));
  if (s.retention_baseline().empty()) s.set_retention_baseline(RetentionBaselineNames()[0]);
  // The names of interventions and scope, as the engine's options take them.
  FCA_RETURN_IF_ERROR(runtime::ToEngineOptions(s).status());
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
  FCA_RETURN_IF_ERROR(CheckPrintable(s.label(), sf::kLabel));
  FCA_RETURN_IF_ERROR(CheckPrintable(s.dense_twin_mismatch(), sf::kDenseTwinMismatch));
  return s;
}

}  // namespace fca::core
