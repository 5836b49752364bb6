// NormalizeSpec (server/core/spec_policy.h) and ValidateName
// (server/runtime/model_repository.h): defaults, and INVALID_ARGUMENT naming
// the bad field with the limit where one applies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "server/core/spec_policy.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/task_spec.h"

namespace fca::core {
namespace {

using ::testing::HasSubstr;

v1::AuditSpec Minimal() {
  v1::AuditSpec s;
  s.add_models("fg_a");
  s.set_eval_dataset("eval");
  s.set_calib_dataset("calib");
  return s;
}

// The status of normalizing Minimal() after `edit`.
absl::Status NormalizeEdited(const std::function<void(v1::AuditSpec*)>& edit,
                             const SpecLimits& limits = {}) {
  v1::AuditSpec s = Minimal();
  edit(&s);
  return NormalizeSpec(s, limits).status();
}

void ExpectInvalid(const absl::Status& st, const std::string& needle1,
                   const std::string& needle2 = "") {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(needle1));
  if (!needle2.empty()) {
    EXPECT_THAT(std::string(st.message()), HasSubstr(needle2));
  }
}

TEST(NormalizeSpecTest, FillsEveryDefault) {
  SpecLimits limits;
  limits.max_windows = 321;
  auto s = NormalizeSpec(Minimal(), limits);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->window_length(), 128);
  EXPECT_EQ(s->batch_size(), 8);
  EXPECT_EQ(s->bootstrap_resamples(), 1000);
  EXPECT_DOUBLE_EQ(s->ci_level(), 0.95);
  EXPECT_EQ(s->timing_repeats(), 7);
  // An explicit 0 is "no timing" (docs/fca.md), not the default.
  v1::AuditSpec no_timing = Minimal();
  no_timing.set_timing_repeats(0);
  auto zero = NormalizeSpec(no_timing, {});
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->has_timing_repeats());
  EXPECT_EQ(zero->timing_repeats(), 0);
  const auto zero_options = runtime::ToEngineOptions(*zero);
  ASSERT_TRUE(zero_options.ok()) << zero_options.status();
  EXPECT_EQ(zero_options->timing_repeats, 0);
  EXPECT_EQ(s->timing_max_repeats(), 200);
  EXPECT_DOUBLE_EQ(s->timing_budget_seconds(), 60);
  EXPECT_EQ(s->max_eval_windows(), 321);
  EXPECT_EQ(s->max_calib_windows(), 321);
  EXPECT_EQ(s->seed(), 0u);
  EXPECT_FALSE(s->allow_overlap());
}

TEST(NormalizeSpecTest, KeepsGivenValues) {
  v1::AuditSpec in = Minimal();
  in.set_window_length(16);
  in.set_batch_size(3);
  in.set_bootstrap_resamples(50);
  in.set_ci_level(0.9);
  in.set_timing_repeats(2);
  in.set_max_eval_windows(5);
  in.set_max_calib_windows(4);
  in.add_interventions("cross_input");
  in.set_label("run 1");
  auto s = NormalizeSpec(in, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->window_length(), 16);
  EXPECT_EQ(s->batch_size(), 3);
  EXPECT_EQ(s->bootstrap_resamples(), 50);
  EXPECT_DOUBLE_EQ(s->ci_level(), 0.9);
  EXPECT_EQ(s->timing_repeats(), 2);
  EXPECT_EQ(s->max_eval_windows(), 5);
  EXPECT_EQ(s->max_calib_windows(), 4);
  ASSERT_EQ(s->interventions_size(), 1);
  EXPECT_EQ(s->interventions(0), "cross_input");
  EXPECT_EQ(s->label(), "run 1");
}

TEST(NormalizeSpecTest, ModelsAreRequiredUniqueValidAndBounded) {
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->clear_models(); }), "model");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->add_models("fg_a"); }), "fg_a", "twice");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_models(0, "../x"); }), "model");
  SpecLimits limits;
  limits.max_models = 2;
  ExpectInvalid(NormalizeEdited(
                    [](v1::AuditSpec* s) {
                      s->add_models("b");
                      s->add_models("c");
                    },
                    limits),
                "models", "2");
}

TEST(NormalizeSpecTest, DenseTwinNameIsChecked) {
  const absl::Status st = NormalizeEdited([](v1::AuditSpec* s) { s->set_dense_twin("a/b"); });
  // The header promises an error naming the field.
  ExpectInvalid(st, "dense_twin");
}

TEST(NormalizeSpecTest, DatasetsAreRequired) {
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->clear_eval_dataset(); }), "eval_dataset");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->clear_calib_dataset(); }),
                "calib_dataset");
}

TEST(NormalizeSpecTest, InterventionsMustBeKnownAndUnique) {
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->add_interventions("dropout"); }),
                "intervention", "dropout");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) {
                  s->add_interventions("global_mean");
                  s->add_interventions("global_mean");
                }),
                "global_mean", "twice");
}

TEST(NormalizeSpecTest, PerLayerInterventionsAndScopeAreCheckedAndMapped) {
  ExpectInvalid(
      NormalizeEdited([](v1::AuditSpec* s) { s->add_per_layer_interventions("dropout"); }),
      "per-layer intervention", "dropout");
  ExpectInvalid(
      NormalizeEdited([](v1::AuditSpec* s) { s->add_per_layer_interventions("correct"); }),
      "per-layer intervention", "correct");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) {
                  s->add_per_layer_interventions("neutral");
                  s->add_per_layer_interventions("neutral");
                }),
                "neutral", "twice");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_per_layer_scope("block"); }),
                "per_layer_scope", "block");
  auto plain = NormalizeSpec(Minimal(), {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->per_layer_scope(), "layer");
  auto plain_options = runtime::ToEngineOptions(*plain);
  ASSERT_TRUE(plain_options.ok()) << plain_options.status();
  EXPECT_TRUE(plain_options->per_layer_interventions.empty());
  v1::AuditSpec in = Minimal();
  in.add_per_layer_interventions("static_layer");
  in.add_per_layer_interventions("static_token");
  in.set_per_layer_scope("family");
  auto s = NormalizeSpec(in, {});
  ASSERT_TRUE(s.ok()) << s.status();
  auto o = runtime::ToEngineOptions(*s);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(
      o->per_layer_interventions,
      (std::vector<InterventionId>{InterventionId::kStaticLayer, InterventionId::kStaticToken}));
  EXPECT_EQ(o->per_layer_scope, ScopeId::kFamily);
}

// docs/fca.md "Gap retention" and "Correlated windows".
TEST(NormalizeSpecTest, RetentionBaselineAndBlockLength) {
  auto plain = NormalizeSpec(Minimal(), {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->retention_baseline(), "global_mean");
  EXPECT_EQ(plain->bootstrap_block_length(), 0);  // round(N^(1/3)) in the engine
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_retention_baseline("static"); }),
                "retention_baseline", "static");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_bootstrap_block_length(-1); }),
                "bootstrap_block_length");
  v1::AuditSpec in = Minimal();
  in.set_retention_baseline("neutral");
  in.set_bootstrap_block_length(5);
  auto s = NormalizeSpec(in, {});
  ASSERT_TRUE(s.ok()) << s.status();
  const auto options = runtime::ToEngineOptions(*s);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->retention_baseline, InterventionId::kNeutral);
  EXPECT_EQ(options->bootstrap_block_length, 5);
}

// docs/fca.md "Token-keyed profiles": 0 (unset) is the default 5; the
// engine gets what was asked; below 1 is refused.
TEST(NormalizeSpecTest, StaticTokenMinCount) {
  auto plain = NormalizeSpec(Minimal(), {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->static_token_min_count(), 5);
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_static_token_min_count(-1); }),
                "static_token_min_count");
  v1::AuditSpec in = Minimal();
  in.set_static_token_min_count(12);
  auto s = NormalizeSpec(in, {});
  ASSERT_TRUE(s.ok()) << s.status();
  const auto options = runtime::ToEngineOptions(*s);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->static_token_min_count, 12);
}

TEST(NormalizeSpecTest, WindowLengthIsBoundedWithLimitInMessage) {
  SpecLimits limits;
  limits.max_window_length = 512;
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_window_length(513); }, limits),
                "window_length", "512");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_window_length(1); }),
                "window_length");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_window_length(-4); }),
                "window_length");
  EXPECT_TRUE(NormalizeEdited([](v1::AuditSpec* s) { s->set_window_length(512); }, limits).ok());
}

TEST(NormalizeSpecTest, WindowCountsAreBounded) {
  SpecLimits limits;
  limits.max_windows = 100;
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_max_eval_windows(101); }, limits),
                "max_eval_windows", "100");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_max_calib_windows(101); }, limits),
                "max_calib_windows", "100");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_max_eval_windows(-1); }),
                "max_eval_windows");
}

TEST(NormalizeSpecTest, BatchBootstrapAndTimingAreBounded) {
  SpecLimits limits;
  limits.max_batch_size = 32;
  limits.max_bootstrap_resamples = 5000;
  limits.max_timing_repeats = 9;
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_batch_size(33); }, limits),
                "batch_size", "32");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_batch_size(-1); }), "batch_size");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_bootstrap_resamples(5001); }, limits),
                "bootstrap_resamples", "5000");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_bootstrap_resamples(-2); }),
                "bootstrap_resamples");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_timing_repeats(10); }, limits),
                "timing_repeats", "9");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_timing_repeats(-1); }),
                "timing_repeats");
}

// fca.md "Execution": at least timing_repeats pairs, at most
// timing_max_repeats, within timing_budget_seconds.
TEST(NormalizeSpecTest, AdaptiveTimingHasDefaultsAndBounds) {
  SpecLimits limits;
  limits.max_timing_repeats = 500;
  limits.max_timing_max_repeats = 1000;
  v1::AuditSpec in = Minimal();
  in.set_timing_repeats(300);
  auto s = NormalizeSpec(in, limits);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->timing_max_repeats(), 300);  // never below the minimum
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) {
                  s->set_timing_repeats(20);
                  s->set_timing_max_repeats(10);
                }),
                "timing_max_repeats", "20");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_timing_max_repeats(1001); }, limits),
                "timing_max_repeats", "1000");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_timing_budget_seconds(-1); }),
                "timing_budget_seconds");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_timing_budget_seconds(1e9); }),
                "timing_budget_seconds", "3600");
}

TEST(NormalizeSpecTest, CiLevelMustBeInsideTheOpenUnitInterval) {
  for (double bad : {1.0, 1.5, -0.2}) {
    ExpectInvalid(NormalizeEdited([bad](v1::AuditSpec* s) { s->set_ci_level(bad); }), "ci_level");
  }
  EXPECT_TRUE(NormalizeEdited([](v1::AuditSpec* s) { s->set_ci_level(0.5); }).ok());
}

TEST(NormalizeSpecTest, LabelIsBounded) {
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_label(std::string(257, 'x')); }),
                "label", "256");
  EXPECT_TRUE(NormalizeEdited([](v1::AuditSpec* s) { s->set_label(std::string(256, 'x')); }).ok());
  // Issue 9: labels are printed in terminals: no escape sequences, no
  // control characters (C0, DEL, C1), valid UTF-8 only.
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_label("red \x1b[31m"); }), "label",
                "control character");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_label("a\nb"); }), "label",
                "control character");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_label("c1 \xc2\x9b"); }), "label",
                "control character");
  ExpectInvalid(NormalizeEdited([](v1::AuditSpec* s) { s->set_label("bad \xff"); }), "label",
                "UTF-8");
  EXPECT_TRUE(NormalizeEdited([](v1::AuditSpec* s) {
                s->set_label("Gate-Lauf \xc3\xa4 \xe2\x9c\x93");
              }).ok());
}

TEST(ValidateNameTest, RefusesPathsHiddenEmptyAndLongNames) {
  for (const std::string& bad :
       {std::string("../x"), std::string("a/b"), std::string(".hidden"), std::string("."),
        std::string(".."), std::string(""), std::string(129, 'a'), std::string("a b"),
        std::string("a\\b"), std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
    const absl::Status st = runtime::ValidateName(bad, "dataset");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_THAT(std::string(st.message()), HasSubstr("dataset")) << bad;
  }
}

TEST(ValidateNameTest, AcceptsPlainNames) {
  for (const std::string& good :
       {std::string("a"), std::string("fg_a"), std::string("model-1.v2"), std::string("x..y"),
        std::string(128, 'z'), std::string("UPPER09")}) {
    EXPECT_TRUE(runtime::ValidateName(good, "model").ok()) << good;
  }
}

}  // namespace
}  // namespace fca::core
