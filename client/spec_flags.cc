#include "client/spec_flags.h"

#include <cstdint>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "common/spec_fields.h"

// Defaults 0, false and empty leave the field to the manifest or the
// server, which applies the table's defaults (shown in brackets).
#define FCA_SPEC_FLAG(type, flag, field) \
  ABSL_FLAG(type, flag, {}, fca::spec_fields::FlagHelp(fca::spec_fields::field))

FCA_SPEC_FLAG(std::vector<std::string>, models, kModels);
FCA_SPEC_FLAG(std::string, dense_twin, kDenseTwin);
FCA_SPEC_FLAG(std::string, eval, kEvalDataset);
FCA_SPEC_FLAG(std::string, calib, kCalibDataset);
FCA_SPEC_FLAG(std::vector<std::string>, interventions, kInterventions);
FCA_SPEC_FLAG(int64_t, window, kWindowLength);
FCA_SPEC_FLAG(int64_t, max_eval_windows, kMaxEvalWindows);
FCA_SPEC_FLAG(int64_t, max_calib_windows, kMaxCalibWindows);
FCA_SPEC_FLAG(int64_t, batch, kBatchSize);
FCA_SPEC_FLAG(uint64_t, seed, kSeed);
FCA_SPEC_FLAG(bool, per_site_shuffle, kPerSiteShuffle);
FCA_SPEC_FLAG(int32_t, bootstrap, kBootstrapResamples);
FCA_SPEC_FLAG(double, ci_level, kCiLevel);
FCA_SPEC_FLAG(bool, allow_overlap, kAllowOverlap);
FCA_SPEC_FLAG(int32_t, timing_repeats, kTimingRepeats);
FCA_SPEC_FLAG(std::string, label, kLabel);
FCA_SPEC_FLAG(int32_t, timing_max_repeats, kTimingMaxRepeats);
FCA_SPEC_FLAG(double, timing_budget_seconds, kTimingBudgetSeconds);
FCA_SPEC_FLAG(std::vector<std::string>, per_layer, kPerLayerInterventions);
FCA_SPEC_FLAG(std::string, per_layer_scope, kPerLayerScope);
FCA_SPEC_FLAG(int32_t, fidelity_check_every, kFidelityCheckEvery);
FCA_SPEC_FLAG(std::string, retention_baseline, kRetentionBaseline);
FCA_SPEC_FLAG(int64_t, bootstrap_block_length, kBootstrapBlockLength);
FCA_SPEC_FLAG(int32_t, static_token_min_count, kStaticTokenMinCount);
FCA_SPEC_FLAG(int32_t, calib_resamples, kCalibResamples);
FCA_SPEC_FLAG(std::string, dense_twin_mismatch, kDenseTwinMismatch);

namespace fca::client {
namespace {

// Trims entries and drops empty ones, so "--models=a, b," means {a, b}.
std::vector<std::string> CleanList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    std::string trimmed(absl::StripAsciiWhitespace(item));
    if (!trimmed.empty()) out.push_back(std::move(trimmed));
  }
  return out;
}

}  // namespace

SpecOverrides OverridesFromFlags(const std::set<std::string>& specified) {
  SpecOverrides o;
  auto given = [&](const spec_fields::SpecField& field) { return specified.count(field.flag) > 0; };
  namespace sf = spec_fields;
  if (given(sf::kModels)) o.models = CleanList(absl::GetFlag(FLAGS_models));
  if (given(sf::kDenseTwin)) o.dense_twin = absl::GetFlag(FLAGS_dense_twin);
  if (given(sf::kEvalDataset)) o.eval_dataset = absl::GetFlag(FLAGS_eval);
  if (given(sf::kCalibDataset)) o.calib_dataset = absl::GetFlag(FLAGS_calib);
  if (given(sf::kInterventions)) o.interventions = CleanList(absl::GetFlag(FLAGS_interventions));
  if (given(sf::kWindowLength)) o.window_length = absl::GetFlag(FLAGS_window);
  if (given(sf::kMaxEvalWindows)) o.max_eval_windows = absl::GetFlag(FLAGS_max_eval_windows);
  if (given(sf::kMaxCalibWindows)) o.max_calib_windows = absl::GetFlag(FLAGS_max_calib_windows);
  if (given(sf::kBatchSize)) o.batch_size = absl::GetFlag(FLAGS_batch);
  if (given(sf::kSeed)) o.seed = absl::GetFlag(FLAGS_seed);
  if (given(sf::kPerSiteShuffle)) o.per_site_shuffle = absl::GetFlag(FLAGS_per_site_shuffle);
  if (given(sf::kBootstrapResamples)) o.bootstrap_resamples = absl::GetFlag(FLAGS_bootstrap);
  if (given(sf::kCiLevel)) o.ci_level = absl::GetFlag(FLAGS_ci_level);
  if (given(sf::kAllowOverlap)) o.allow_overlap = absl::GetFlag(FLAGS_allow_overlap);
  if (given(sf::kTimingRepeats)) o.timing_repeats = absl::GetFlag(FLAGS_timing_repeats);
  if (given(sf::kLabel)) o.label = absl::GetFlag(FLAGS_label);
  if (given(sf::kTimingMaxRepeats)) o.timing_max_repeats = absl::GetFlag(FLAGS_timing_max_repeats);
  if (given(sf::kTimingBudgetSeconds)) {
    o.timing_budget_seconds = absl::GetFlag(FLAGS_timing_budget_seconds);
  }
  if (given(sf::kPerLayerInterventions)) {
    o.per_layer_interventions = CleanList(absl::GetFlag(FLAGS_per_layer));
  }
  if (given(sf::kPerLayerScope)) o.per_layer_scope = absl::GetFlag(FLAGS_per_layer_scope);
  if (given(sf::kFidelityCheckEvery)) {
    o.fidelity_check_every = absl::GetFlag(FLAGS_fidelity_check_every);
  }
  if (given(sf::kRetentionBaseline)) o.retention_baseline = absl::GetFlag(FLAGS_retention_baseline);
  if (given(sf::kBootstrapBlockLength)) {
    o.bootstrap_block_length = absl::GetFlag(FLAGS_bootstrap_block_length);
  }
  if (given(sf::kStaticTokenMinCount)) {
    o.static_token_min_count = absl::GetFlag(FLAGS_static_token_min_count);
  }
  if (given(sf::kCalibResamples)) o.calib_resamples = absl::GetFlag(FLAGS_calib_resamples);
  if (given(sf::kDenseTwinMismatch)) {
    o.dense_twin_mismatch = absl::GetFlag(FLAGS_dense_twin_mismatch);
  }
  return o;
}

}  // namespace fca::client
