#include "common/spec_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace fca::spec_fields {
std::string Number(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%g", value);
}

const std::vector<const SpecField*>& SpecFields() {
  static const auto* fields = new std::vector<const SpecField*>{&kModels,
                                                                &kDenseTwin,
                                                                &kEvalDataset,
                                                                &kCalibDataset,
                                                                &kInterventions,
                                                                &kWindowLength,
                                                                &kMaxEvalWindows,
                                                                &kMaxCalibWindows,
                                                                &kBatchSize,
                                                                &kSeed,
                                                                &kPerSiteShuffle,
                                                                &kBootstrapResamples,
                                                                &kCiLevel,
                                                                &kAllowOverlap,
                                                                &kTimingRepeats,
                                                                &kLabel,
                                                                &kTimingMaxRepeats,
                                                                &kTimingBudgetSeconds,
                                                                &kPerLayerInterventions,
                                                                &kPerLayerScope,
                                                                &kFidelityCheckEvery,
                                                                &kRetentionBaseline,
                                                                &kBootstrapBlockLength,
                                                                &kStaticTokenMinCount,
                                                                &kCalibResamples,
                                                                &kDenseTwinMismatch};
  return *fields;
}

const SpecField* FindSpecField(const std::string& name) {
  for (const SpecField* f : SpecFields()) {
    if (name == f->name) return f;
  }
  return nullptr;
}

std::string DefaultText(const SpecField& field) {
  if (&field == &kPerLayerScope) return ScopeName(DefaultScope());
  if (field.default_text != nullptr) {
    return absl::StrReplaceAll(field.default_text, {{"{}", Number(field.default_value)}});
  }
  return field.default_value != 0 ? Number(field.default_value) : "";
}

bool InRange(const SpecField& field, double value, double lo, double hi) {
  const bool above = field.min_open ? value > lo : value >= lo;
  const bool below = field.max_open ? value < hi : value <= hi;
  return above && below;
}

std::string RangeText(const SpecField& field, double lo, double hi) {
  return absl::StrCat(field.min_open ? "(" : "[", Number(lo), ", ", Number(hi),
                      field.max_open ? ")" : "]");
}

std::string ServerRangeText(const SpecField& field) {
  return RangeText(field, field.min, field.ServerLimit());
}

namespace {

std::string HelpWithoutDefault(const SpecField& field) {
  return absl::StrReplaceAll(field.help,
                             {{"{range}", ServerRangeText(field)}, {"{scopes}", ScopeNameList()}});
}

}  // namespace

std::string FlagHelp(const SpecField& field) {
  const std::string default_text = DefaultText(field);
  return absl::StrCat("audit: ", HelpWithoutDefault(field), default_text.empty() ? "" : " [",
                      default_text, default_text.empty() ? "" : "]");
}

std::string FieldHelp(const SpecField& field) {
  std::string help = HelpWithoutDefault(field);
  const bool bounded = field.min != 0 || field.min_open || !std::isinf(field.ServerLimit());
  if (bounded && std::string(field.help).find("{range}") == std::string::npos) {
    absl::StrAppend(&help, "; range ", ServerRangeText(field));
  }
  const std::string default_text = DefaultText(field);
  if (!default_text.empty()) absl::StrAppend(&help, "; default ", default_text);
  return help;
}

}  // namespace fca::spec_fields
