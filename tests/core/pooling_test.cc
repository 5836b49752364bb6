// server/core/pooling.h and AuditServiceCore::PoolJobs (issue 38): several
// jobs read as one report, the across-model rows as GetReport computes them
// within one job (docs/fca.md "Pooling jobs"), and the refusals, each
// naming what differs.
#include "server/core/pooling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "server/core/report_assembly.h"
#include "tests/core/core_env.h"
#include "tests/testing/result_rows.h"

namespace fca::core {
namespace {

using report_testing::Row;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Pooled = std::vector<std::pair<v1::Job, std::vector<v1::Result>>>;

// A SUCCEEDED job auditing `models` on datasets "e5e5" / "c4c4", T = 16, with
// each model's weights "w-<model>" in its task's provenance.
v1::Job Finished(int64_t id, const std::vector<std::string>& models) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_provenance()->set_eval_sha256("e5e5");
  job.mutable_provenance()->set_calib_sha256("c4c4");
  job.mutable_spec()->set_window_length(16);
  job.mutable_spec()->set_ci_level(0.95);
  for (const std::string& m : models) {
    job.mutable_spec()->add_models(m);
    v1::JobTask* t = job.add_tasks();
    t->set_model(m);
    t->mutable_provenance()->set_weights_sha256("w-" + m);
  }
  return job;
}

// Each model's correct NLL and cross_input penalty: model k (1, 2, 3) has
// penalty 0.1 k, so three models have mean 0.2, sample sd 0.1.
std::vector<v1::Result> Rows(int64_t job, const std::vector<std::string>& models) {
  std::vector<v1::Result> rows;
  for (const std::string& m : models) {
    const double k = m.back() - '0';
    rows.push_back(Row(m, "correct", "nll", 1.5 + 0.1 * k));
    rows.push_back(Row(m, "cross_input", "penalty", 0.1 * k));
  }
  for (v1::Result& r : rows) r.set_job_id(job);
  return rows;
}

const v1::ReportMetric* Find(const v1::GetReportResponse& r, const std::string& intervention,
                             const std::string& metric) {
  for (const v1::ReportMetric& m : r.metrics()) {
    if (m.intervention() == intervention && m.metric() == metric) return &m;
  }
  return nullptr;
}

TEST(PoolingTest, AcrossModelsOverEveryJobsModels) {
  const Pooled jobs = {{Finished(3, {"s1", "s2"}), Rows(3, {"s1", "s2"})},
                       {Finished(4, {"s3"}), Rows(4, {"s3"})}};
  auto pooled = PoolReports(jobs);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  const v1::GetReportResponse& r = pooled->report();
  EXPECT_THAT(r.models(), ElementsAre("s1", "s2", "s3"));
  EXPECT_EQ(r.job().id(), 0);
  EXPECT_THAT(r.job().spec().models(), ElementsAre("s1", "s2", "s3"));
  EXPECT_EQ(r.job().tasks_size(), 3);
  ASSERT_EQ(pooled->models_size(), 3);
  EXPECT_EQ(pooled->models(1).job_id(), 3);
  EXPECT_EQ(pooled->models(2).model(), "s3");
  EXPECT_EQ(pooled->models(2).job_id(), 4);
  EXPECT_EQ(pooled->models(2).weights_sha256(), "w-s3");
  const v1::ReportMetric* p = Find(r, "cross_input", "penalty");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->per_model_size(), 3);
  EXPECT_EQ(p->per_model(2).job_id(), 4);  // each row names its job
  // docs/fca.md "Multi-model aggregation" over the three: mean 0.2, sd 0.1,
  // 0.2 +- t_{0.975, 2} 0.1 / sqrt(3), t_{0.975, 2} = 4.302652730.
  const v1::AcrossModels& a = p->across_models();
  EXPECT_EQ(a.n(), 3);
  EXPECT_NEAR(a.mean(), 0.2, 1e-12);
  EXPECT_NEAR(a.sd(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(a.min(), 0.1);
  EXPECT_DOUBLE_EQ(a.max(), 0.3);
  EXPECT_NEAR(a.ci_low(), 0.2 - 4.302652730 * 0.1 / std::sqrt(3.0), 1e-8);
  EXPECT_NEAR(a.ci_high(), 0.2 + 4.302652730 * 0.1 / std::sqrt(3.0), 1e-8);

  // The same rows in one job: the same report metrics (one assembly).
  v1::Job one = Finished(5, {"s1", "s2", "s3"});
  const v1::GetReportResponse single = BuildReport(one, Rows(5, {"s1", "s2", "s3"}));
  ASSERT_EQ(single.metrics_size(), r.metrics_size());
  for (int i = 0; i < r.metrics_size(); ++i) {
    EXPECT_EQ(r.metrics(i).across_models().SerializeAsString(),
              single.metrics(i).across_models().SerializeAsString())
        << r.metrics(i).intervention() << " " << r.metrics(i).metric();
  }
}

TEST(PoolingTest, DisagreeingSpecsAreRefusedNamingEveryFieldAndValue) {
  v1::Job a = Finished(3, {"s1"});
  v1::Job b = Finished(4, {"s2"});
  b.mutable_spec()->set_window_length(32);
  b.mutable_spec()->set_seed(9);
  b.mutable_spec()->add_interventions("cross_input");
  b.mutable_provenance()->set_eval_sha256("e6e6");
  b.mutable_spec()->set_label("another label");  // free: not named
  b.mutable_spec()->set_batch_size(4);           // free: not named
  const auto refused = PoolReports({{a, Rows(3, {"s1"})}, {b, Rows(4, {"s2"})}});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("window_length (job 3: 16; job 4: 32)"));
  EXPECT_THAT(message, HasSubstr("seed (job 3: 0; job 4: 9)"));
  EXPECT_THAT(message, HasSubstr("interventions (job 3: []; job 4: [\"cross_input\"])"));
  EXPECT_THAT(message, HasSubstr("eval dataset sha256 (job 3: e5e5; job 4: e6e6)"));
  EXPECT_THAT(message, Not(HasSubstr("label")));
  EXPECT_THAT(message, Not(HasSubstr("batch_size")));
  EXPECT_THAT(message, Not(HasSubstr("calib")));
}

TEST(PoolingTest, TheDenseTwinAndItsWeightsMustAgree) {
  v1::Job a = Finished(3, {"s1"});
  v1::Job b = Finished(4, {"s2"});
  for (v1::Job* j : {&a, &b}) j->mutable_spec()->set_dense_twin("dense");
  a.mutable_tasks(0)->mutable_provenance()->set_dense_twin_weights_sha256("d1");
  b.mutable_tasks(0)->mutable_provenance()->set_dense_twin_weights_sha256("d2");
  const auto refused = PoolReports({{a, Rows(3, {"s1"})}, {b, Rows(4, {"s2"})}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("dense twin weights sha256 (job 3: d1; job 4: d2)"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("dense_twin (")));
}

TEST(PoolingTest, AModelInTwoJobsIsRefusedByNameOrWeights) {
  auto twice = PoolReports(
      {{Finished(3, {"s1"}), Rows(3, {"s1"})}, {Finished(4, {"s1", "s2"}), Rows(4, {"s1", "s2"})}});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(), HasSubstr("model 's1' is audited in job 3 and in job 4"));
  v1::Job b = Finished(4, {"s2"});
  b.mutable_tasks(0)->mutable_provenance()->set_weights_sha256("w-s1");  // s1 renamed
  twice = PoolReports({{Finished(3, {"s1"}), Rows(3, {"s1"})}, {b, Rows(4, {"s2"})}});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(),
              HasSubstr("model 's1' (job 3) and model 's2' (job 4) have the same weights w-s1"));
}

TEST(PoolingTest, OnlySucceededJobsArePooled) {
  v1::Job running = Finished(4, {"s2"});
  running.set_state(v1::JOB_STATE_RUNNING);
  const auto refused =
      PoolReports({{Finished(3, {"s1"}), Rows(3, {"s1"})}, {running, Rows(4, {"s2"})}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("job 4 is RUNNING"));
}

TEST(PoolingTest, TwoToSixtyFourDistinctJobs) {
  v1::PoolJobsRequest r;
  r.add_job_ids(1);
  EXPECT_EQ(CheckPoolRequest(r).code(), absl::StatusCode::kInvalidArgument);
  r.add_job_ids(2);
  EXPECT_TRUE(CheckPoolRequest(r).ok());
  r.add_job_ids(2);
  EXPECT_EQ(CheckPoolRequest(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CheckPoolRequest(r).message(), HasSubstr("job 2 is named twice"));
  r.clear_job_ids();
  for (int i = 1; i <= kMaxPoolJobs; ++i) r.add_job_ids(i);
  EXPECT_TRUE(CheckPoolRequest(r).ok());
  r.add_job_ids(kMaxPoolJobs + 1);
  EXPECT_EQ(CheckPoolRequest(r).code(), absl::StatusCode::kInvalidArgument);
}

// A new AuditSpec field must be put in one of the two lists.
TEST(PoolingTest, EverySpecFieldEitherMustAgreeOrMayDiffer) {
  std::multiset<std::string> listed(PoolAgreeSpecFields().begin(), PoolAgreeSpecFields().end());
  listed.insert(PoolFreeSpecFields().begin(), PoolFreeSpecFields().end());
  std::multiset<std::string> fields;
  const google::protobuf::Descriptor& spec = *v1::AuditSpec::descriptor();
  for (int i = 0; i < spec.field_count(); ++i) fields.insert(spec.field(i)->name());
  EXPECT_EQ(listed, fields);
}

// The service on real audits of two tiny models of one family: fg_a and
// fg_b audited in two jobs pool to the rows of one job auditing both.
class PoolJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.UploadEvalAndCalib(testing::Alice()).ok());
    ASSERT_TRUE(env_.UploadEvalAndCalib(testing::Bob()).ok());
  }
  int64_t Audit(const Caller& caller, const std::vector<std::string>& models) {
    v1::AuditSpec spec = testing::SmallSpec(models, "eval", "calib");
    spec.add_interventions("correct");
    spec.add_interventions("cross_input");
    spec.add_interventions("global_mean");
    spec.set_timing_repeats(0);
    auto job = env_.Submit(caller, spec);
    EXPECT_TRUE(job.ok()) << job.status();
    auto ran = env_.RunNext();
    EXPECT_TRUE(ran.ok()) << ran.status();
    EXPECT_EQ(ran.ok() ? ran->state() : v1::JOB_STATE_UNSPECIFIED, v1::JOB_STATE_SUCCEEDED);
    return job.ok() ? job->id() : 0;
  }
  absl::StatusOr<v1::PoolJobsResponse> Pool(const Caller& caller, std::vector<int64_t> ids) {
    v1::PoolJobsRequest r;
    for (int64_t id : ids) r.add_job_ids(id);
    return env_.core()->PoolJobs(caller, r);
  }
  testing::CoreEnv env_;
};

TEST_F(PoolJobsTest, TwoJobsPoolToTheJobOfBoth) {
  const int64_t a = Audit(testing::Alice(), {testing::kGateA});
  const int64_t b = Audit(testing::Alice(), {testing::kGateB});
  const int64_t both = Audit(testing::Alice(), {testing::kGateA, testing::kGateB});
  auto pooled = Pool(testing::Alice(), {a, b});
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  v1::GetReportRequest get;
  get.set_job_id(both);
  auto single = env_.core()->GetReport(testing::Alice(), get);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_THAT(pooled->report().models(), ElementsAre(testing::kGateA, testing::kGateB));
  int compared = 0;
  for (const v1::ReportMetric& m : single->metrics()) {
    if (m.intervention() == "execution" || m.intervention() == "replay") continue;  // timings
    const v1::ReportMetric* p = Find(pooled->report(), m.intervention(), m.metric());
    ASSERT_NE(p, nullptr) << m.intervention() << " " << m.metric();
    const v1::AcrossModels &x = p->across_models(), &y = m.across_models();
    const std::string what = m.intervention() + " " + m.metric();
    EXPECT_EQ(x.n(), y.n()) << what;
    EXPECT_NEAR(x.mean(), y.mean(), 1e-9) << what;
    EXPECT_NEAR(x.sd(), y.sd(), 1e-9) << what;
    EXPECT_NEAR(x.ci_low(), y.ci_low(), 1e-9) << what;
    EXPECT_NEAR(x.ci_high(), y.ci_high(), 1e-9) << what;
    ++compared;
  }
  EXPECT_GE(compared, 5);  // nll of three interventions, two penalties at least

  // The model of job a in `both` too: counted twice.
  auto twice = Pool(testing::Alice(), {a, both});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(), HasSubstr(testing::kGateA));
  // Bob's job is not Alice's to read: NOT_FOUND, as GetReport says.
  const int64_t bobs = Audit(testing::Bob(), {testing::kGateB});
  EXPECT_EQ(Pool(testing::Alice(), {a, bobs}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Pool(testing::Alice(), {a, 999999}).status().code(), absl::StatusCode::kNotFound);
  // A job still queued.
  auto queued = env_.Submit(testing::Alice(), testing::SmallSpec({"fg_b"}, "eval", "calib"));
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(Pool(testing::Alice(), {a, queued->id()}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fca::core
