// Job manifests and flag overrides (client/manifest.h).
#include "client/manifest.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;
using ::testing::Not;

v1::AuditSpec FullSpec() {
  v1::AuditSpec spec;
  spec.add_models("fg-76m-s1");
  spec.add_models("fg-76m-s2");
  spec.set_dense_twin("dense-76m");
  spec.set_eval_dataset("sha256:00ff");
  spec.set_calib_dataset("calib");
  spec.add_interventions("correct");
  spec.add_interventions("global_mean");
  spec.set_window_length(128);
  spec.set_max_eval_windows(64);
  spec.set_max_calib_windows(32);
  spec.set_batch_size(8);
  spec.set_seed(18446744073709551615ull);  // uint64 max survives JSON
  spec.set_per_site_shuffle(true);
  spec.set_bootstrap_resamples(1000);
  spec.set_ci_level(0.95);
  spec.set_allow_overlap(true);
  spec.set_timing_repeats(7);
  spec.set_label("seven seeds, \"quoted\"");
  spec.set_timing_max_repeats(300);
  spec.set_timing_budget_seconds(12.5);
  spec.add_per_layer_interventions("static_layer");
  spec.set_per_layer_scope("site");
  return spec;
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(ManifestTest, SaveThenLoadGivesTheSameSpec) {
  const v1::AuditSpec spec = FullSpec();
  const std::string path = TempPath("roundtrip.json");
  ASSERT_TRUE(SaveManifest(path, spec).ok());
  auto loaded = LoadManifest(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->SerializeAsString(), spec.SerializeAsString());
  std::remove(path.c_str());
}

TEST(ManifestTest, EmptySpecRoundTripsAndPrintsEveryField) {
  const std::string json = ManifestJson(v1::AuditSpec());
  // Every knob appears in a saved manifest, so it doubles as a template,
  // named as in the proto (fca's one JSON, common/proto_json.h).
  EXPECT_THAT(json, HasSubstr("\"window_length\": \"0\""));
  EXPECT_THAT(json, HasSubstr("\"allow_overlap\": false"));
  EXPECT_THAT(json, Not(HasSubstr("windowLength")));
  auto parsed = ParseManifest(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ByteSizeLong(), 0u);
}

TEST(ManifestTest, AcceptsSnakeCaseNames) {
  auto spec = ParseManifest(R"({"models": ["a"], "eval_dataset": "e",
                               "window_length": 64})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval_dataset(), "e");
  EXPECT_EQ(spec->window_length(), 64);
}

// A manifest written by fca 0.1.0, whose JSON was camelCase (committed as
// it was written): it still loads, every field with its value.
TEST(ManifestTest, OldCamelCaseManifestStillLoads) {
  auto spec = LoadManifest(std::string(FCA_TEST_DATA_DIR) + "/manifests/manifest-0.1.0-camel.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->models_size(), 2);
  EXPECT_EQ(spec->dense_twin(), "dense");
  EXPECT_EQ(spec->eval_dataset().substr(0, 11), "sha256:4b22");
  EXPECT_EQ(spec->interventions_size(), 3);
  EXPECT_EQ(spec->window_length(), 128);
  EXPECT_EQ(spec->max_eval_windows(), 64);
  EXPECT_EQ(spec->max_calib_windows(), 32);
  EXPECT_EQ(spec->seed(), 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(spec->ci_level(), 0.9);
  ASSERT_TRUE(spec->has_timing_repeats());  // explicit 0: no timing
  EXPECT_EQ(spec->timing_repeats(), 0);
  EXPECT_EQ(spec->label(), "written by fca 0.1.0");
  // Saved again, it is in today's names and loads to the same spec.
  const std::string json = ManifestJson(*spec);
  EXPECT_THAT(json, HasSubstr("\"dense_twin\": \"dense\""));
  EXPECT_THAT(json, Not(HasSubstr("denseTwin")));
  auto again = ParseManifest(json);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), spec->SerializeAsString());
}

TEST(ManifestTest, UnknownFieldIsAClearUsageError) {
  auto spec = ParseManifest(R"({"models": ["a"], "windowLenght": 64})");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(IsUsageError(spec.status()));
  EXPECT_THAT(spec.status().message(), HasSubstr("windowLenght"));
}

TEST(ManifestTest, WrongTypeAndMalformedJsonAreUsageErrors) {
  // (protobuf 3.21's parser is lenient about some types, e.g. it takes
  // "yes" for a bool; these it rejects.)
  for (const char* text : {R"({"seed": -1})", R"({"windowLength": 1.5})", R"({"ciLevel": "x"})",
                           R"({"models": [)", "not json"}) {
    auto spec = ParseManifest(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_TRUE(IsUsageError(spec.status())) << text;
  }
}

TEST(ManifestTest, LoadNamesTheFile) {
  const std::string path = TempPath("bad.json");
  std::ofstream(path) << "{\"nope\": 1}";
  auto spec = LoadManifest(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(ExitCodeForStatus(spec.status()), kExitUsage);
  EXPECT_THAT(spec.status().message(), HasSubstr(path));
  EXPECT_THAT(spec.status().message(), HasSubstr("nope"));
  std::remove(path.c_str());

  auto missing = LoadManifest(TempPath("does-not-exist.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ExitCodeForStatus(missing.status()), kExitUsage);
}

TEST(ManifestTest, SaveToUnwritablePathIsUsageError) {
  absl::Status status = SaveManifest("/nonexistent-dir/x.json", FullSpec());
  EXPECT_EQ(ExitCodeForStatus(status), kExitUsage);
}

TEST(MergeSpecTest, NoOverridesKeepsTheBase) {
  const v1::AuditSpec base = FullSpec();
  EXPECT_EQ(MergeSpec(base, SpecOverrides()).SerializeAsString(), base.SerializeAsString());
}

TEST(MergeSpecTest, ExplicitFlagsOverrideFieldByField) {
  SpecOverrides o;
  o.models = std::vector<std::string>{"only-one"};
  o.window_length = 256;
  o.seed = 0;                  // an explicit zero still overrides
  o.per_site_shuffle = false;  // and so does an explicit false
  o.label = "";
  const v1::AuditSpec merged = MergeSpec(FullSpec(), o);
  ASSERT_EQ(merged.models_size(), 1);  // replaced, not appended
  EXPECT_EQ(merged.models(0), "only-one");
  EXPECT_EQ(merged.window_length(), 256);
  EXPECT_EQ(merged.seed(), 0u);
  EXPECT_FALSE(merged.per_site_shuffle());
  EXPECT_EQ(merged.label(), "");
  // Untouched fields keep the manifest's values.
  EXPECT_EQ(merged.dense_twin(), "dense-76m");
  EXPECT_EQ(merged.interventions_size(), 2);
  EXPECT_EQ(merged.batch_size(), 8);
  EXPECT_TRUE(merged.allow_overlap());
  EXPECT_DOUBLE_EQ(merged.ci_level(), 0.95);
}

TEST(MergeSpecTest, EveryOverrideReachesItsField) {
  SpecOverrides o;
  o.models = std::vector<std::string>{"m"};
  o.dense_twin = "d";
  o.eval_dataset = "e";
  o.calib_dataset = "c";
  o.interventions = std::vector<std::string>{"token_shuffle"};
  o.window_length = 1;
  o.max_eval_windows = 2;
  o.max_calib_windows = 3;
  o.batch_size = 4;
  o.seed = 5;
  o.per_site_shuffle = true;
  o.bootstrap_resamples = 6;
  o.ci_level = 0.5;
  o.allow_overlap = true;
  o.timing_repeats = 7;
  o.label = "l";
  o.timing_max_repeats = 8;
  o.timing_budget_seconds = 9.5;
  o.per_layer_interventions = std::vector<std::string>{"static_token", "neutral"};
  o.per_layer_scope = "family";
  const v1::AuditSpec s = MergeSpec(v1::AuditSpec(), o);
  EXPECT_EQ(s.models(0), "m");
  EXPECT_EQ(s.dense_twin(), "d");
  EXPECT_EQ(s.eval_dataset(), "e");
  EXPECT_EQ(s.calib_dataset(), "c");
  EXPECT_EQ(s.interventions(0), "token_shuffle");
  EXPECT_EQ(s.window_length(), 1);
  EXPECT_EQ(s.max_eval_windows(), 2);
  EXPECT_EQ(s.max_calib_windows(), 3);
  EXPECT_EQ(s.batch_size(), 4);
  EXPECT_EQ(s.seed(), 5u);
  EXPECT_TRUE(s.per_site_shuffle());
  EXPECT_EQ(s.bootstrap_resamples(), 6);
  EXPECT_DOUBLE_EQ(s.ci_level(), 0.5);
  EXPECT_TRUE(s.allow_overlap());
  EXPECT_EQ(s.timing_repeats(), 7);
  EXPECT_EQ(s.label(), "l");
  EXPECT_EQ(s.timing_max_repeats(), 8);
  EXPECT_DOUBLE_EQ(s.timing_budget_seconds(), 9.5);
  ASSERT_EQ(s.per_layer_interventions_size(), 2);
  EXPECT_EQ(s.per_layer_interventions(1), "neutral");
  EXPECT_EQ(s.per_layer_scope(), "family");
}

TEST(CheckSpecCompleteTest, NeedsModelsAndEval) {
  v1::AuditSpec spec;
  EXPECT_TRUE(IsUsageError(CheckSpecComplete(spec)));
  spec.add_models("m");
  absl::Status no_eval = CheckSpecComplete(spec);
  EXPECT_TRUE(IsUsageError(no_eval));
  EXPECT_THAT(no_eval.message(), HasSubstr("--eval"));
  spec.set_eval_dataset("e");
  EXPECT_TRUE(CheckSpecComplete(spec).ok());
}

}  // namespace
TEST(RerunSpecTest, PinsBothDatasetsByTheirSubmittedHashes) {
  v1::Job job;
  job.mutable_spec()->add_models("fg_a");
  job.mutable_spec()->set_eval_dataset("eval");
  job.mutable_spec()->set_calib_dataset("calib");
  job.mutable_spec()->set_seed(9);
  job.mutable_provenance()->set_eval_sha256("aa11");
  job.mutable_provenance()->set_calib_sha256("bb22");
  auto spec = RerunSpec(job);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval_dataset(), "sha256:aa11");
  EXPECT_EQ(spec->calib_dataset(), "sha256:bb22");
  EXPECT_EQ(spec->seed(), 9u);
  EXPECT_EQ(spec->models(0), "fg_a");
  // What it writes is a manifest `fca audit --manifest` reads back.
  auto parsed = ParseManifest(ManifestJson(*spec));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->eval_dataset(), "sha256:aa11");
}

TEST(RerunSpecTest, AJobWithoutProvenanceIsFailedPrecondition) {
  v1::Job job;
  job.set_id(4);
  job.mutable_spec()->set_eval_dataset("eval");
  auto spec = RerunSpec(job);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("job 4"));
}

}  // namespace fca::client
