// A matched dense twin (fca.md "Execution"): the shared architecture and the
// FLOPs per token of the model without its controller must match the
// twin's, unless the options say why not; the bundled size pairs of models/
// are the mismatch the check exists for.
#include "server/engine/audit/dense_twin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/audit/auditor.h"
#include "server/engine/audit/model_audit.h"
#include "server/engine/models/model_loader.h"
#include "tests/engine/audit/auditor_fixture.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using ::testing::HasSubstr;
using testing::RandomModel;
using testing::RandomText;
using testing::Request;
using testing::Seeded;
using testing::TinyConfig;
using testing::Varying;

std::string Bundled(const std::string& name) { return std::string(FCA_MODELS_DIR) + "/" + name; }

std::unique_ptr<ControlledModel> LoadBundled(const std::string& name) {
  auto model = LoadModel(Bundled(name), name, testing::TestCompute());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

ModelInfo Described(const std::string& name) {
  auto d = DescribeModel(Bundled(name), name, testing::TestCompute());
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? d->info : ModelInfo();
}

// What SubmitAudit sees without loading weights: the bundled pairs match
// their own twins, OLMoE's shared sizes match the seeds' twin (its experts
// replace the MLP by design), and a large model against the small twin
// differs in width and heads, as the configs say (320 and 5 against 96 and 4).
TEST(DenseTwinTest, BundledPairsByTheirDescriptions) {
  EXPECT_THAT(ArchitectureDifferences(Described("featuregate-s1"), Described("dense")),
              ::testing::IsEmpty());
  EXPECT_THAT(ArchitectureDifferences(Described("featuregate-small"), Described("dense-small")),
              ::testing::IsEmpty());
  EXPECT_THAT(ArchitectureDifferences(Described("olmoe-s1"), Described("olmoe-dense")),
              ::testing::IsEmpty());
  EXPECT_THAT(ArchitectureDifferences(Described("olmoe-s1"), Described("dense")),
              ::testing::IsEmpty());
  EXPECT_THAT(ArchitectureDifferences(Described("featuregate-large"), Described("dense-small")),
              ::testing::ElementsAre("width 320 vs 96", "heads 5 vs 4"));
  const absl::Status st =
      CheckTwinArchitecture(Described("featuregate-large"), Described("dense-small"), "");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("'dense-small'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("'featuregate-large'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("dense_twin_mismatch"));
  EXPECT_TRUE(CheckTwinArchitecture(Described("featuregate-large"), Described("dense-small"),
                                    "a size trend against one twin")
                  .ok());
}

TEST(DenseTwinTest, FlopsToleranceIsInclusiveBothWays) {
  ModelInfo m, t;
  m.name = "m";
  t.name = "t";
  EXPECT_TRUE(CheckTwinFlops(m, t, 125, 100, "").ok());
  EXPECT_TRUE(CheckTwinFlops(m, t, 75, 100, "").ok());
  EXPECT_EQ(CheckTwinFlops(m, t, 126, 100, "").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckTwinFlops(m, t, 74, 100, "").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckTwinFlops(m, t, 200, 100, "why").ok());
}

TEST(DenseTwinTest, TheAuditRefusesTheBundledLargeModelAgainstTheSmallTwin) {
  auto large = LoadBundled("featuregate-large");
  auto small = LoadBundled("dense-small");
  ASSERT_NE(large, nullptr);
  ASSERT_NE(small, nullptr);
  AuditRequest req = Request({large.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.dense_twin = small.get();
  auto report = RunAudit(req);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("width 320 vs 96, heads 5 vs 4"));
}

// With a reason the audit runs, its options carry the reason (the reports
// print it from the spec), and the FLOPs overhead shows the mismatch.
TEST(DenseTwinTest, AReasonLetsAMismatchedTwinRun) {
  auto large = LoadBundled("featuregate-large");
  auto small = LoadBundled("dense-small");
  ASSERT_NE(large, nullptr);
  ASSERT_NE(small, nullptr);
  AuditRequest req = Request({large.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.dense_twin = small.get();
  req.options.interventions = {InterventionId::kGlobalMean};
  req.options.timing_repeats = 0;
  req.options.dense_twin_mismatch = "size trend: one small twin for every size";
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->options.dense_twin_mismatch, req.options.dense_twin_mismatch);
  ASSERT_TRUE(report->models[0].execution.flops_overhead.has_value());
  EXPECT_GT(*report->models[0].execution.flops_overhead, kDenseTwinFlopsTolerance);
}

// The demo's pairs run without dense_twin_mismatch: FeatureGate's network
// with every gate open is its twin's, and OLMoE's two experts of width 256
// do the multiply-adds of its one-expert twin's expert of width 512 (and of
// the seeds' twin's MLP of width 768, two matrices to the experts' three);
// the FLOPs, counted, agree within the tolerance.
TEST(DenseTwinTest, TheDemosPairsMatchInFlops) {
  for (const auto& [name, twin_name] : std::vector<std::pair<const char*, const char*>>{
           {"featuregate-s1", "dense"}, {"olmoe-s1", "olmoe-dense"}, {"olmoe-s1", "dense"}}) {
    SCOPED_TRACE(::testing::Message() << name << " against " << twin_name);
    auto model = LoadBundled(name);
    auto twin = LoadBundled(twin_name);
    ASSERT_NE(model, nullptr);
    ASSERT_NE(twin, nullptr);
    AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
    req.dense_twin = twin.get();
    EXPECT_TRUE(CheckDenseTwinFlops(req).ok()) << CheckDenseTwinFlops(req);
  }
}

// Same shared sizes, four times the twin's MLP width: only the FLOPs,
// counted when the job runs, can tell (about half the twin's here).
TEST(DenseTwinTest, TheAuditRefusesATwinWhoseFlopsDiffer) {
  auto gated = RandomModel(TinyConfig("featuregate"), Varying(1));
  TransformerConfig wide = TinyConfig("dense");
  wide.d_ff *= 4;
  auto dense = RandomModel(wide, Seeded(1));
  AuditRequest req = Request({gated.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.dense_twin = dense.get();
  auto report = RunAudit(req);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("FLOPs per token"));
  // The same twin against the model's own d_ff matches exactly: with every
  // block run and no controller, the two networks do the same matmuls.
  auto matched = RandomModel(TinyConfig("dense"), Seeded(1));
  req.dense_twin = matched.get();
  req.options.interventions = {InterventionId::kGlobalMean};
  req.options.timing_repeats = 0;
  EXPECT_TRUE(RunAudit(req).ok());
}

}  // namespace
}  // namespace fca::engine
