// Provenance (docs/fca.md "Reproducibility"): what a job is resolved to at
// submission and what each task ran on, recorded by the worker and stored
// by the coordinator with the task's end; returned by GetJob and GetReport.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/build_version.h"
#include "common/json.h"
#include "server/jobs/mapping.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Alice;
using testing::CoreEnv;
using testing::SmallSpec;

// One finished job (fg_a with its dense twin) for the suite.
class ProvenanceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new CoreEnv();
    ASSERT_TRUE(env_->UploadEvalAndCalib(Alice()).ok());
    v1::AuditSpec spec = SmallSpec({testing::kGateA}, "eval", "calib");
    spec.set_dense_twin(testing::kDense);
    spec.set_seed(11);
    ASSERT_TRUE(env_->Submit(Alice(), spec).ok());
    auto ran = env_->RunNext();
    ASSERT_TRUE(ran.ok()) << ran.status();
    auto job = env_->Get(Alice(), ran->id());
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = new v1::Job(*job);
  }
  static void TearDownTestSuite() {
    delete job_;
    delete env_;
  }
  void SetUp() override {
    ASSERT_NE(job_, nullptr) << "the suite's job did not run";
    ASSERT_EQ(job_->state(), v1::JOB_STATE_SUCCEEDED) << job_->error();
    ASSERT_EQ(job_->tasks_size(), 1);
  }

  static std::string Sha(const std::string& dataset) {
    const auto listed = env_->core()->ListDatasets(Alice(), {});
    if (!listed.ok()) return "";
    for (const v1::Dataset& d : listed->datasets()) {
      if (d.name() == dataset) return d.sha256();
    }
    return "";
  }

  static CoreEnv* env_;
  static v1::Job* job_;
};

CoreEnv* ProvenanceTest::env_ = nullptr;
v1::Job* ProvenanceTest::job_ = nullptr;

TEST_F(ProvenanceTest, TheJobKeepsWhatItWasResolvedToAtSubmission) {
  const v1::Provenance& p = job_->provenance();
  EXPECT_EQ(p.eval_dataset(), "eval");
  EXPECT_EQ(p.calib_dataset(), "calib");
  EXPECT_EQ(p.eval_sha256(), Sha("eval"));
  EXPECT_EQ(p.calib_sha256(), Sha("calib"));
  EXPECT_EQ(p.eval_sha256().size(), 64u);
  EXPECT_EQ(p.server_version(), BuildVersion());
  EXPECT_EQ(p.seed(), 11u);
  // The stored spec has the defaults applied (ci_level was not set); the
  // interventions the task replayed are in its provenance.
  EXPECT_EQ(job_->spec().window_length(), 16);
  EXPECT_DOUBLE_EQ(job_->spec().ci_level(), 0.95);
}

TEST_F(ProvenanceTest, TheTaskRecordsWhatItRanOn) {
  const v1::TaskProvenance& t = job_->tasks(0).provenance();
  EXPECT_EQ(t.worker(), "local/0");
  EXPECT_FALSE(t.host().empty());
  EXPECT_EQ(t.engine_version(), BuildVersion());
  EXPECT_FALSE(t.torch_version().empty());
  EXPECT_EQ(t.device(), "cpu");
  EXPECT_EQ(t.dtype(), "float32");
  EXPECT_GT(t.threads(), 0);
  auto model = env_->models()->WeightsHash(testing::kGateA);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(t.weights_sha256(), *model);
  auto twin = env_->models()->WeightsHash(testing::kDense);
  ASSERT_TRUE(twin.ok());
  EXPECT_EQ(t.dense_twin(), testing::kDense);
  EXPECT_EQ(t.dense_twin_weights_sha256(), *twin);
  EXPECT_EQ(t.eval_sha256(), job_->provenance().eval_sha256());
  EXPECT_EQ(t.calib_sha256(), job_->provenance().calib_sha256());
  EXPECT_EQ(t.window_length(), 16);
  EXPECT_EQ(t.eval_windows(), 6);
  EXPECT_EQ(t.calib_windows(), 4);
  EXPECT_EQ(t.cached_eval_windows(), 0);  // the first audit of these windows
  EXPECT_EQ(t.seed(), 11u);
  ASSERT_GT(t.interventions_size(), 1);
  EXPECT_EQ(t.interventions(0), "correct");
  EXPECT_EQ(t.attempt(), 1);
  EXPECT_TRUE(t.has_started_at());
  EXPECT_TRUE(t.has_finished_at());
  EXPECT_GE(runtime::FromTimestamp(t.finished_at()), runtime::FromTimestamp(t.started_at()));
  auto options = json::Parse(t.options_json());
  ASSERT_TRUE(options.ok()) << t.options_json();
  ASSERT_NE(options->Find("fidelity_tolerance"), nullptr);
  ASSERT_NE(options->Find("seed"), nullptr);
  EXPECT_EQ(options->Find("seed")->as_int(), 11);
}

TEST_F(ProvenanceTest, RowsCarryBothDatasetHashesAndLeadToTheirTask) {
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(job_->id());
  request.set_page_size(1000);
  auto rows = env_->core()->QueryResults(Alice(), request);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_GT(rows->results_size(), 0);
  for (const v1::Result& r : rows->results()) {
    EXPECT_EQ(r.dataset_sha256(), job_->provenance().eval_sha256());
    EXPECT_EQ(r.calib_sha256(), job_->provenance().calib_sha256());
    if (r.model() == testing::kGateA) {
      EXPECT_EQ(r.weights_sha256(), job_->tasks(0).provenance().weights_sha256());
    }
  }
}

TEST_F(ProvenanceTest, TheReportCarriesTheJobsAndTasksProvenance) {
  v1::GetReportRequest request;
  request.set_job_id(job_->id());
  auto report = env_->core()->GetReport(Alice(), request);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->job().provenance().eval_sha256(), job_->provenance().eval_sha256());
  ASSERT_EQ(report->job().tasks_size(), 1);
  EXPECT_EQ(report->job().tasks(0).provenance().host(), job_->tasks(0).provenance().host());
}

TEST_F(ProvenanceTest, ARerunCountsTheWindowsTheCacheGave) {
  v1::AuditSpec spec = job_->spec();
  ASSERT_TRUE(env_->Submit(Alice(), spec).ok());
  auto ran = env_->RunNext();
  ASSERT_TRUE(ran.ok()) << ran.status();
  auto again = env_->Get(Alice(), ran->id());
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->tasks_size(), 1);
  const v1::TaskProvenance& t = again->tasks(0).provenance();
  EXPECT_GT(t.cached_eval_windows(), 0);
  EXPECT_LE(t.cached_eval_windows(), t.eval_windows());
}

// The coordinator stores what a worker reports at the end, naming the
// lease holder whatever the worker calls itself; an empty provenance (an
// older worker) and a stale lease store nothing.
TEST(CoordinatorProvenanceTest, TheEndStoresTheProvenanceUnderTheLeaseHolder) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA, testing::kGateB}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto first = env.coordinator()->Claim("node7:4242@alice", 0);
  ASSERT_TRUE(first.ok() && first->has_value());
  v1::TaskProvenance reported;
  reported.set_worker("someone-else");
  reported.set_host("node7");
  reported.set_threads(3);
  ASSERT_TRUE(env.coordinator()->Finish((*first)->lease, absl::OkStatus(), reported).ok());
  // A stale lease: refused, nothing stored.
  EXPECT_EQ(env.coordinator()->Finish((*first)->lease, absl::OkStatus(), reported).code(),
            absl::StatusCode::kFailedPrecondition);
  auto second = env.coordinator()->Claim("node8@alice", 0);
  ASSERT_TRUE(second.ok() && second->has_value());
  ASSERT_TRUE(env.coordinator()->Finish((*second)->lease, absl::InternalError("boom"), {}).ok());

  auto stored = env.Get(Alice(), job->id());
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->tasks_size(), 2);
  const v1::TaskProvenance& p = stored->tasks(0).provenance();
  EXPECT_EQ(p.worker(), "node7:4242@alice");
  EXPECT_EQ(p.host(), "node7");
  EXPECT_EQ(p.threads(), 3);
  EXPECT_FALSE(stored->tasks(1).has_provenance());
  EXPECT_EQ(stored->tasks(1).state(), v1::JOB_STATE_FAILED);
}

}  // namespace
}  // namespace fca::core
