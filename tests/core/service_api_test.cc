// The RPCs a report, a comparison and a dashboard use (issue 11):
// GetReport, CompareJobs, GetServerInfo, ListJobWindows, ListJobs' filters
// and total count, QueryResults with several values per filter, and the
// window length checked against each model's max_seq_len at submission.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/vocabulary.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/windows.h"
#include "server/jobs/mapping.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::SmallSpec;

storage::ResultRow StoredRow(const std::string& model, const std::string& intervention,
                             const std::string& metric, double value) {
  storage::ResultRow row;
  row.model = model;
  row.weights_sha256 = "w-" + model;
  row.dataset_sha256 = "d";
  row.intervention = intervention;
  row.metric = metric;
  row.value = value;
  row.n = 6;
  return row;
}

class ServiceApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
    ASSERT_TRUE(env_.UploadEvalAndCalib(Bob()).ok());
  }

  v1::Job MustSubmit(const Caller& caller, const v1::AuditSpec& spec) {
    auto job = env_.Submit(caller, spec);
    EXPECT_TRUE(job.ok()) << job.status();
    // Distinct creation times for the time filters.
    absl::SleepFor(absl::Milliseconds(2));
    return job.ok() ? *job : v1::Job();
  }

  absl::StatusOr<v1::ListJobsResponse> List(const Caller& caller, v1::ListJobsRequest request) {
    return env_.core()->ListJobs(caller, request);
  }

  std::vector<int64_t> Ids(const Caller& caller, const v1::ListJobsRequest& request) {
    auto page = List(caller, request);
    EXPECT_TRUE(page.ok()) << page.status();
    std::vector<int64_t> ids;
    if (!page.ok()) return ids;
    for (const v1::Job& j : page->jobs()) ids.push_back(j.id());
    EXPECT_EQ(page->total_count(), static_cast<int64_t>(ids.size()));
    return ids;
  }

  absl::StatusOr<v1::GetReportResponse> Report(const Caller& caller, int64_t id) {
    v1::GetReportRequest request;
    request.set_job_id(id);
    return env_.core()->GetReport(caller, request);
  }

  CoreEnv env_;
};

// --------------------------------------------------------------- submit

TEST_F(ServiceApiTest, SubmitRefusesAWindowLongerThanAModelTakes) {
  v1::AuditSpec spec = SmallSpec({"fg_a"}, "eval", "calib");
  spec.set_window_length(65);  // the test models take 64
  auto refused = env_.Submit(Alice(), spec);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("'fg_a'"));
  EXPECT_THAT(refused.status().message(), HasSubstr("65"));
  EXPECT_THAT(refused.status().message(), HasSubstr("64"));
  spec.set_window_length(64);
  EXPECT_TRUE(env_.Submit(Alice(), spec).ok());
}

// ------------------------------------------------------------- ListJobs

TEST_F(ServiceApiTest, ListJobsFiltersAndCountsAllPages) {
  v1::AuditSpec a = SmallSpec({"fg_a"}, "eval", "calib");
  a.set_label("seed sweep");
  v1::AuditSpec b = SmallSpec({"fg_b"}, "eval", "calib");
  b.set_dense_twin("dense");
  v1::AuditSpec c = SmallSpec({"fg_a", "fg_b"}, "calib", "eval");
  c.set_allow_overlap(true);
  const v1::Job j1 = MustSubmit(Alice(), a);
  const v1::Job j2 = MustSubmit(Alice(), b);
  const v1::Job j3 = MustSubmit(Alice(), c);
  const v1::Job bob = MustSubmit(Bob(), a);

  v1::ListJobsRequest r;
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j3.id(), j2.id(), j1.id()));
  r.set_model("fg_b");
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j3.id(), j2.id()));
  r.set_model("dense");  // as the dense twin
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j2.id()));
  r = {};
  r.set_label("seed sweep");
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j1.id()));
  EXPECT_THAT(Ids(Admin(), r), ElementsAre(bob.id(), j1.id()));
  r.set_label("seed");  // exact match only
  EXPECT_TRUE(Ids(Alice(), r).empty());
  r = {};
  r.set_dataset("calib");
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j3.id(), j2.id(), j1.id()));
  r.set_dataset("nope");
  EXPECT_TRUE(Ids(Alice(), r).empty());
  r = {};
  *r.mutable_created_after() = j2.created_at();
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j3.id(), j2.id()));
  *r.mutable_created_before() = j3.created_at();  // exclusive
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j2.id()));
  r = {};
  r.set_state(v1::JOB_STATE_QUEUED);
  r.set_model("fg_a");
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(j3.id(), j1.id()));

  // The count covers every page.
  r = {};
  r.set_page_size(1);
  auto page = List(Alice(), r);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs_size(), 1);
  EXPECT_EQ(page->total_count(), 3);
  EXPECT_FALSE(page->next_page_token().empty());
}

TEST_F(ServiceApiTest, ListJobsOwnerFilterIsForAdmins) {
  const v1::Job mine = MustSubmit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  const v1::Job bobs = MustSubmit(Bob(), SmallSpec({"fg_a"}, "eval", "calib"));
  v1::ListJobsRequest r;
  r.set_owner("bob");
  EXPECT_EQ(List(Alice(), r).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Ids(Admin(), r), ElementsAre(bobs.id()));
  r.set_owner("alice");  // naming oneself is fine
  EXPECT_THAT(Ids(Alice(), r), ElementsAre(mine.id()));
  r.set_owner("nobody");
  EXPECT_TRUE(Ids(Admin(), r).empty());
}

TEST_F(ServiceApiTest, ListJobsRefusesBadTimestampsAndPageSizes) {
  v1::ListJobsRequest r;
  r.mutable_created_after()->set_nanos(-1);
  EXPECT_EQ(List(Alice(), r).status().code(), absl::StatusCode::kInvalidArgument);
  r.mutable_created_after()->set_nanos(1000000000);
  EXPECT_EQ(List(Alice(), r).status().code(), absl::StatusCode::kInvalidArgument);
  r = {};
  r.mutable_created_after()->set_seconds(200);
  r.mutable_created_before()->set_seconds(100);
  auto reversed = List(Alice(), r);
  EXPECT_EQ(reversed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reversed.status().message(), HasSubstr("created_after"));
  r.mutable_created_before()->set_seconds(200);  // an empty range is no mistake
  EXPECT_TRUE(List(Alice(), r).ok());
  r = {};
  for (int size : {-1, 501}) {
    r.set_page_size(size);
    EXPECT_EQ(List(Alice(), r).status().code(), absl::StatusCode::kInvalidArgument) << size;
  }
  r.set_page_size(500);
  EXPECT_TRUE(List(Alice(), r).ok());
}

// --------------------------------------------------------- QueryResults

TEST_F(ServiceApiTest, QueryResultsTakesSeveralValuesOfVisibleJobs) {
  const v1::Job a1 = MustSubmit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  const v1::Job a2 = MustSubmit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  const v1::Job b1 = MustSubmit(Bob(), SmallSpec({"fg_a"}, "eval", "calib"));
  for (const v1::Job& j : {a1, a2, b1}) {
    ASSERT_TRUE(env_.store()
                    ->InsertResults(j.id(), {StoredRow("fg_a", "correct", "nll", 1),
                                             StoredRow("fg_a", "cross_input", "nll", 2),
                                             StoredRow("fg_a", "cross_input", "penalty", 1)})
                    .ok());
  }
  v1::QueryResultsRequest q;
  q.mutable_filter()->add_job_ids(a1.id());
  q.mutable_filter()->add_job_ids(a2.id());
  auto both = env_.core()->QueryResults(Alice(), q);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->results_size(), 6);
  q.mutable_filter()->add_metrics("penalty");
  q.mutable_filter()->add_interventions("correct");
  q.mutable_filter()->add_interventions("cross_input");
  auto penalties = env_.core()->QueryResults(Alice(), q);
  ASSERT_TRUE(penalties.ok()) << penalties.status();
  ASSERT_EQ(penalties->results_size(), 2);
  for (const v1::Result& r : penalties->results()) EXPECT_EQ(r.metric(), "penalty");
  q.mutable_filter()->set_metric("nll");  // one more accepted value
  auto more = env_.core()->QueryResults(Alice(), q);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->results_size(), 6);

  // A metric the vocabulary does not know: INVALID_ARGUMENT naming it and
  // listing the known ones (a typo is not "no rows"), single or repeated.
  for (const bool repeated : {false, true}) {
    v1::QueryResultsRequest typo;
    typo.mutable_filter()->set_job_id(a1.id());
    if (repeated) {
      typo.mutable_filter()->add_metrics("nosuch");
    } else {
      typo.mutable_filter()->set_metric("nosuch");
    }
    const auto refused = env_.core()->QueryResults(Alice(), typo);
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("unknown metric 'nosuch'"));
    for (const MetricDef& d : MetricDefs()) {
      EXPECT_THAT(std::string(refused.status().message()), HasSubstr(MetricPattern(d)));
    }
  }

  // Bob's job among Alice's: NOT_FOUND, as for a single job id.
  q.mutable_filter()->add_job_ids(b1.id());
  EXPECT_EQ(env_.core()->QueryResults(Alice(), q).status().code(), absl::StatusCode::kNotFound);
  v1::QueryResultsRequest many;
  for (int i = 0; i <= AuditServiceCore::kMaxFilterValues; ++i) {
    many.mutable_filter()->add_models("m" + std::to_string(i));
  }
  many.mutable_filter()->set_job_id(a1.id());
  EXPECT_EQ(env_.core()->QueryResults(Alice(), many).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::QueryResultsRequest bad_time;
  bad_time.mutable_filter()->set_job_id(a1.id());
  bad_time.mutable_filter()->mutable_created_before()->set_nanos(-5);
  EXPECT_EQ(env_.core()->QueryResults(Alice(), bad_time).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------ GetReport

// A job of three models with known penalties, its rows stored by hand:
// the server's summary is exact.
TEST_F(ServiceApiTest, GetReportSummarizesThreeModelsExactly) {
  v1::AuditSpec spec = SmallSpec({"m1", "m2", "m3"}, "eval", "calib");
  auto job = env_.store()->CreateJob("alice", runtime::SpecToJson(spec), {"m1", "m2", "m3"});
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<storage::ResultRow> rows;
  const double penalties[] = {0.5, 1.0, 3.0};  // mean 1.5, sd sqrt(1.75)
  for (int k = 0; k < 3; ++k) {
    const std::string m = "m" + std::to_string(k + 1);
    rows.push_back(StoredRow(m, "cross_input", "penalty", penalties[k]));
    rows.push_back(StoredRow(m, "variation", "site_mean.gate.1", 0.9));
  }
  ASSERT_TRUE(env_.store()->InsertResults(job->id, rows).ok());
  auto report = Report(Alice(), job->id);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->job().id(), job->id);
  EXPECT_THAT(report->models(), ElementsAre("m1", "m2", "m3"));
  ASSERT_EQ(report->metrics_size(), 1);
  const v1::AcrossModels& a = report->metrics(0).across_models();
  EXPECT_EQ(a.n(), 3);
  EXPECT_DOUBLE_EQ(a.mean(), 1.5);
  EXPECT_DOUBLE_EQ(a.sd(), std::sqrt(1.75));
  EXPECT_DOUBLE_EQ(a.min(), 0.5);
  EXPECT_DOUBLE_EQ(a.max(), 3.0);
  EXPECT_EQ(report->metrics(0).unit(), "nats/token");
  ASSERT_EQ(report->sites_size(), 3);
  EXPECT_EQ(report->sites(0).family(), "gate");
  EXPECT_EQ(report->sites(0).layer(), 1);
}

TEST_F(ServiceApiTest, GetReportOfAnUnknownOrOthersJobIsNotFound) {
  const v1::Job job = MustSubmit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  EXPECT_EQ(Report(Bob(), job.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Report(Alice(), 9999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Report(Alice(), 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Report(Admin(), job.id()).ok());
  auto queued = Report(Alice(), job.id());  // nothing stored yet: an empty report
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(queued->job().state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(queued->metrics_size(), 0);
}

TEST_F(ServiceApiTest, CompareJobsTakesOneToSixteenVisibleJobs) {
  const v1::Job a = MustSubmit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  const v1::Job b = MustSubmit(Bob(), SmallSpec({"fg_a"}, "eval", "calib"));
  v1::CompareJobsRequest r;
  EXPECT_EQ(env_.core()->CompareJobs(Alice(), r).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 17; ++i) r.add_job_ids(a.id());
  EXPECT_EQ(env_.core()->CompareJobs(Alice(), r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.clear_job_ids();
  r.add_job_ids(a.id());
  r.add_job_ids(b.id());
  EXPECT_EQ(env_.core()->CompareJobs(Alice(), r).status().code(), absl::StatusCode::kNotFound);
  auto both = env_.core()->CompareJobs(Admin(), r);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->reports_size(), 2);
  EXPECT_EQ(both->reports(0).job().id(), a.id());  // request order
  EXPECT_EQ(both->reports(1).job().id(), b.id());
}

// -------------------------------------------------------- GetServerInfo

TEST_F(ServiceApiTest, ServerInfoHasVersionsLimitsAndTheCatalog) {
  ServerFacts facts;
  facts.devices = {"cpu", "cpu"};
  facts.executor = "slurm";
  facts.auth = true;
  env_.core()->set_facts(facts);
  auto info = env_.core()->GetServerInfo(Alice());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->server_version().empty());
  EXPECT_FALSE(info->engine_version().empty());
  EXPECT_FALSE(info->torch_version().empty());
  EXPECT_THAT(info->devices(), ElementsAre("cpu", "cpu"));
  EXPECT_EQ(info->workers(), 2);
  EXPECT_EQ(info->executor(), "slurm");
  EXPECT_TRUE(info->auth());
  EXPECT_EQ(info->dtype(), "float32");
  const ServiceLimits& limits = env_.core()->limits();
  EXPECT_EQ(info->max_dataset_bytes(), limits.max_dataset_bytes);
  EXPECT_EQ(info->max_windows(), limits.spec.max_windows);
  EXPECT_EQ(info->max_window_length(), limits.spec.max_window_length);
  EXPECT_EQ(info->max_models(), limits.spec.max_models);
  EXPECT_EQ(info->max_queued_jobs_per_user(), limits.max_queued_jobs_per_user);
  ASSERT_EQ(info->interventions_size(), static_cast<int>(InterventionDefs().size()));
  EXPECT_EQ(info->interventions(0).name(), "correct");
  bool penalty = false;
  for (const v1::MetricInfo& m : info->metrics()) {
    EXPECT_FALSE(m.unit().empty()) << m.name();
    EXPECT_FALSE(m.description().empty()) << m.name();
    if (m.name() == "penalty") penalty = m.unit() == "nats/token";
  }
  EXPECT_TRUE(penalty);
}

// ------------------------------------------------------- ListJobWindows

TEST_F(ServiceApiTest, ListJobWindowsCutsTheSpecsWindowsWithoutRunning) {
  v1::AuditSpec spec = SmallSpec({"fg_a", "fg_b"}, "eval", "calib");
  spec.set_max_eval_windows(4);  // of 6
  const v1::Job job = MustSubmit(Alice(), spec);
  v1::ListJobWindowsRequest r;
  r.set_job_id(job.id());
  auto windows = env_.core()->ListJobWindows(Alice(), r);
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(windows->model(), "fg_a");  // the first by default
  EXPECT_EQ(windows->window_length(), 16);
  ASSERT_EQ(windows->windows_size(), 4 + 4);
  // The byte tokenizer's ids are the text's bytes: window k is bytes
  // [16k, 16k + 16) of the upload.
  const std::string eval = testing::RandomText(16 * 6, 1);
  for (int i = 0; i < 8; ++i) {
    const v1::Window& w = windows->windows(i);
    EXPECT_EQ(w.calibration(), i >= 4);
    EXPECT_EQ(w.index(), i % 4);
    if (i < 4) {
      std::vector<int32_t> ids(eval.begin() + 16 * i, eval.begin() + 16 * (i + 1));
      EXPECT_EQ(w.hash(), engine::WindowHash(ids.data(), 16));
    }
  }
  r.set_model("fg_b");
  auto same = env_.core()->ListJobWindows(Alice(), r);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->windows(0).hash(), windows->windows(0).hash());
  r.set_model("dense");
  EXPECT_EQ(env_.core()->ListJobWindows(Alice(), r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.set_model("");
  EXPECT_EQ(env_.core()->ListJobWindows(Bob(), r).status().code(), absl::StatusCode::kNotFound);
  r.set_job_id(9999);
  EXPECT_EQ(env_.core()->ListJobWindows(Alice(), r).status().code(), absl::StatusCode::kNotFound);
}

// A finished job: the report matches the stored rows, and every listed
// window's coefficients can be exported without re-windowing.
TEST(FinishedJobApiTest, ReportAndWindowsOfARealAudit) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  v1::AuditSpec spec = SmallSpec({"fg_a", "fg_b"}, "eval", "calib");
  spec.set_dense_twin("dense");
  ASSERT_TRUE(env.Submit(Alice(), spec).ok());
  auto job = env.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->error();

  v1::GetReportRequest get;
  get.set_job_id(job->id());
  auto report = env.core()->GetReport(Alice(), get);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->models(), ElementsAre("fg_a", "fg_b"));
  EXPECT_EQ(report->dense_twin(), "dense");
  EXPECT_THAT(report->families(), ElementsAre("attn_gate", "mlp_gate"));
  // All but random_route, which applies to mixture-of-experts routers only.
  EXPECT_EQ(report->interventions_size(), static_cast<int>(InterventionDefs().size()) - 1);
  EXPECT_FALSE(report->dense_twin_rows().empty());
  EXPECT_EQ(report->sites_size(), 2 * 4);  // 2 models x (2 layers x 2 families)
  for (const v1::ReportMetric& m : report->metrics()) {
    SCOPED_TRACE(m.intervention() + "/" + m.metric());
    EXPECT_FALSE(m.unit().empty());
    v1::QueryResultsRequest q;
    q.mutable_filter()->set_job_id(job->id());
    q.mutable_filter()->set_intervention(m.intervention());
    q.mutable_filter()->set_metric(m.metric());
    q.mutable_filter()->add_models("fg_a");
    q.mutable_filter()->add_models("fg_b");
    auto stored = env.core()->QueryResults(Alice(), q);
    ASSERT_TRUE(stored.ok()) << stored.status();
    ASSERT_EQ(m.per_model_size(), stored->results_size());
    std::vector<double> values;
    for (int i = 0; i < m.per_model_size(); ++i) {
      EXPECT_EQ(m.per_model(i).value(), stored->results(i).value());
      if (m.per_model(i).defined()) values.push_back(m.per_model(i).value());
    }
    const v1::AcrossModels& a = m.across_models();
    ASSERT_EQ(a.n(), static_cast<int64_t>(values.size()));
    if (values.empty()) continue;
    EXPECT_DOUBLE_EQ(a.min(), *std::min_element(values.begin(), values.end()));
    EXPECT_DOUBLE_EQ(a.max(), *std::max_element(values.begin(), values.end()));
    EXPECT_NEAR(a.mean(), (a.min() + a.max()) / 2, 1e-9 * (1 + std::abs(a.mean())));
  }

  v1::ListJobWindowsRequest list;
  list.set_job_id(job->id());
  auto windows = env.core()->ListJobWindows(Alice(), list);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->windows_size(), 6 + 4);
  for (const v1::Window& w : windows->windows()) {
    v1::ExportCoefficientsRequest e;
    e.set_model("fg_a");
    e.set_window_hash(w.hash());
    int64_t bytes = 0;
    const absl::Status exported =
        env.core()->ExportCoefficients(Alice(), e, [&](const v1::ExportCoefficientsResponse& part) {
          bytes += static_cast<int64_t>(part.chunk().size());
          return true;
        });
    EXPECT_TRUE(exported.ok()) << (w.calibration() ? "calib " : "eval ") << w.index() << ": "
                               << exported;
    EXPECT_GT(bytes, 0);
  }
}

}  // namespace
}  // namespace fca::core
