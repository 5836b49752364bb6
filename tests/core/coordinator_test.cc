// Audit jobs run by the coordinator and a worker (server/jobs/coordinator.h,
// worker.h) on tiny models:
// job states, the event stream and its resumption (WatchJob), stored
// results, the coefficient cache, failures and the worker thread.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"
#include "server/engine/audit/windows.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;
using ::testing::StartsWith;

using Responses = std::vector<v1::WatchJobResponse>;

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

std::vector<std::string> Messages(const Responses& responses) {
  std::vector<std::string> out;
  for (const auto& r : responses) {
    if (r.event().has_message()) out.push_back(r.event().message());
  }
  return out;
}

// The job's events: seq 1..n, QUEUED then RUNNING, progress before the first
// results, one result batch per model (tasks may run in any order and in
// parallel; the dense twin's execution rows come once, with the first task
// that ends), the terminal state last.
void ExpectWellFormedRun(const Responses& rs, const std::vector<std::string>& models) {
  ASSERT_GE(rs.size(), 4u);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].event().seq(), static_cast<int64_t>(i + 1));
    EXPECT_TRUE(rs[i].event().has_time());
    if (i + 1 < rs.size() && rs[i].event().has_state()) {
      EXPECT_FALSE(IsTerminal(rs[i].event().state())) << "terminal state before the end";
    }
  }
  EXPECT_EQ(rs[0].event().state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(rs[1].event().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(rs.back().event().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(rs.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<std::string> batches;
  bool progress_seen = false;
  double last_fraction = 0;
  for (const auto& r : rs) {
    if (r.event().has_progress()) {
      progress_seen = true;
      EXPECT_GE(r.event().progress().fraction(), last_fraction);
      EXPECT_LE(r.event().progress().fraction(), 1.0);
      last_fraction = r.event().progress().fraction();
    }
    if (r.event().has_results()) {
      EXPECT_TRUE(progress_seen) << "results before any progress";
      batches.push_back(r.event().results().model());
      EXPECT_GT(r.event().results().results_size(), 0);
    }
  }
  std::vector<std::string> expected = models;
  std::sort(batches.begin(), batches.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(batches, expected);
  // Each event carries the job as of that event, not as it is now (these
  // streams are read after the job ended): its state so far, its progress
  // so far, no end time or error before the end.
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  double fraction = 0;
  for (const auto& r : rs) {
    if (r.event().has_state()) state = r.event().state();
    if (r.event().has_progress()) fraction = r.event().progress().fraction();
    SCOPED_TRACE(absl::StrFormat("event %d", r.event().seq()));
    EXPECT_EQ(r.job().state(), state);
    EXPECT_EQ(r.job().has_started_at(), state != v1::JOB_STATE_QUEUED);
    if (!IsTerminal(state)) {
      EXPECT_FALSE(r.job().has_finished_at());
      EXPECT_EQ(r.job().progress(), fraction);
    }
  }
}

// One job over two featuregate models and a dense twin, run once for the
// whole suite (an audit is the slow part of these tests).
class FinishedJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new CoreEnv();
    ASSERT_TRUE(env_->UploadEvalAndCalib(Alice()).ok());
    spec_ = new v1::AuditSpec(SmallSpec({"fg_a", "fg_b"}, "eval", "calib"));
    spec_->set_dense_twin("dense");
    auto queued = env_->Submit(Alice(), *spec_);
    ASSERT_TRUE(queued.ok()) << queued.status();
    auto job = env_->RunNext();
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = new v1::Job(*job);
    auto all = env_->Watch(Alice(), job_->id(), 0);
    ASSERT_TRUE(all.ok()) << all.status();
    events_ = new Responses(*all);
  }
  static void TearDownTestSuite() {
    delete events_;
    delete job_;
    delete spec_;
    delete env_;
  }
  void SetUp() override { ASSERT_NE(events_, nullptr) << "the suite's job did not run"; }

  static v1::QueryResultsResponse Query(const std::string& model,
                                        const std::string& intervention = "",
                                        const std::string& metric = "") {
    v1::QueryResultsRequest request;
    request.mutable_filter()->set_job_id(job_->id());
    request.mutable_filter()->set_model(model);
    request.mutable_filter()->set_intervention(intervention);
    request.mutable_filter()->set_metric(metric);
    request.set_page_size(1000);
    auto response = env_->core()->QueryResults(Alice(), request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::QueryResultsResponse();
  }

  static CoreEnv* env_;
  static v1::AuditSpec* spec_;
  static v1::Job* job_;
  static Responses* events_;
};

CoreEnv* FinishedJobTest::env_ = nullptr;
v1::AuditSpec* FinishedJobTest::spec_ = nullptr;
v1::Job* FinishedJobTest::job_ = nullptr;
Responses* FinishedJobTest::events_ = nullptr;

TEST_F(FinishedJobTest, JobSucceeded) {
  EXPECT_EQ(job_->state(), v1::JOB_STATE_SUCCEEDED) << job_->error();
  EXPECT_TRUE(job_->error().empty());
  EXPECT_EQ(job_->attempts(), 1);
  EXPECT_DOUBLE_EQ(job_->progress(), 1.0);
  EXPECT_TRUE(job_->has_started_at());
  EXPECT_TRUE(job_->has_finished_at());
  EXPECT_FALSE(job_->cancel_requested());
}

TEST_F(FinishedJobTest, EventsAreOrderedFromQueuedToSucceeded) {
  ExpectWellFormedRun(*events_, {"fg_a", "fg_b", "dense"});
}

TEST_F(FinishedJobTest, ResultsAreStoredForEachModelWithCrossInputCI) {
  const std::string eval_sha = env_->core()->ListDatasets(Alice(), {})->datasets(1).sha256();
  for (const char* model : {"fg_a", "fg_b"}) {
    v1::QueryResultsResponse penalty = Query(model, "cross_input", "penalty");
    ASSERT_EQ(penalty.results_size(), 1) << model;
    const v1::Result& r = penalty.results(0);
    EXPECT_EQ(r.job_id(), job_->id());
    EXPECT_EQ(r.n(), 6);
    EXPECT_TRUE(r.defined());
    ASSERT_TRUE(r.has_ci_low() && r.has_ci_high());
    EXPECT_LE(r.ci_low(), r.value());
    EXPECT_LE(r.value(), r.ci_high());
    EXPECT_GT(std::abs(r.value()), 0.0) << "gates vary, so another input's gates cost NLL";
    EXPECT_EQ(r.weights_sha256().size(), 64u);
    EXPECT_EQ(r.dataset_sha256(), eval_sha);
    EXPECT_EQ(Query(model, "correct", "nll").results_size(), 1);
    EXPECT_EQ(Query(model, "correct", "penalty").results_size(), 0);
    EXPECT_EQ(Query(model, "execution", "slowdown").results_size(), 1);
  }
  // The dense twin gets execution rows only: it runs every block too. No
  // latency: each model's rows carry the twin's from its own pairs.
  const v1::QueryResultsResponse dense = Query("dense");
  EXPECT_EQ(dense.results_size(), 5);
  EXPECT_EQ(Query("dense", "execution", "latency_us_per_token").results_size(), 0);
  for (const v1::Result& r : dense.results()) EXPECT_EQ(r.intervention(), "execution");
  const v1::QueryResultsResponse fraction = Query("dense", "execution", "blocks_executed_fraction");
  ASSERT_EQ(fraction.results_size(), 1);
  EXPECT_EQ(fraction.results(0).value(), 1.0);
  const v1::QueryResultsResponse parameters = Query("dense", "execution", "parameters");
  ASSERT_EQ(parameters.results_size(), 1);
  EXPECT_GT(parameters.results(0).value(), 0.0);
}

TEST_F(FinishedJobTest, StoredRowsAreTheStreamedRows) {
  int streamed = 0;
  for (const auto& r : *events_) streamed += r.event().results().results_size();
  const int stored =
      Query("fg_a").results_size() + Query("fg_b").results_size() + Query("dense").results_size();
  EXPECT_EQ(stored, streamed);
}

TEST_F(FinishedJobTest, WatchFromStartDeliversEveryEventAndEnds) {
  auto again = env_->Watch(Alice(), job_->id(), 0);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), events_->size());
  EXPECT_EQ(again->back().event().state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(FinishedJobTest, WatchResumedMidwayDeliversExactlyTheRest) {
  const int64_t middle = static_cast<int64_t>(events_->size()) / 2;
  auto rest = env_->Watch(Alice(), job_->id(), middle);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), events_->size() - middle);
  for (size_t i = 0; i < rest->size(); ++i) {
    EXPECT_EQ((*rest)[i].event().SerializeAsString(),
              (*events_)[middle + i].event().SerializeAsString());
    // The job as of each event, as the whole stream had it.
    EXPECT_EQ((*rest)[i].job().SerializeAsString(),
              (*events_)[middle + i].job().SerializeAsString());
  }
}

TEST_F(FinishedJobTest, WatchAfterTheLastEventReturnsAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  auto none = env_->Watch(Alice(), job_->id(), static_cast<int64_t>(events_->size()));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_LT(took, std::chrono::milliseconds(250));
}

TEST_F(FinishedJobTest, CancelFinishedJobIsFailedPrecondition) {
  v1::CancelJobRequest request;
  request.set_job_id(job_->id());
  EXPECT_EQ(env_->core()->CancelJob(Alice(), request).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_->Get(Alice(), job_->id())->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(FinishedJobTest, SecondRunUsesTheCoefficientCacheAndGivesTheSameNumbers) {
  bool first_run_from_cache = false;
  for (const std::string& m : Messages(*events_)) {
    first_run_from_cache = first_run_from_cache || m.find("LIVE pass was skipped") != m.npos;
  }
  EXPECT_FALSE(first_run_from_cache);
  auto queued = env_->Submit(Alice(), *spec_);
  ASSERT_TRUE(queued.ok()) << queued.status();
  auto second = env_->RunNext();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->state(), v1::JOB_STATE_SUCCEEDED) << second->error();
  auto events = env_->Watch(Alice(), second->id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  bool cached = false;
  for (const std::string& m : Messages(*events)) {
    cached = cached || (m.find("came from the coefficient cache") != m.npos &&
                        m.find("LIVE pass was skipped") != m.npos);
  }
  EXPECT_TRUE(cached);
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(second->id());
  request.mutable_filter()->set_metric("nll");
  auto rerun = env_->core()->QueryResults(Alice(), request);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  ASSERT_GT(rerun->results_size(), 0);
  for (const v1::Result& r : rerun->results()) {
    v1::QueryResultsResponse first = Query(r.model(), r.intervention(), "nll");
    ASSERT_EQ(first.results_size(), 1);
    EXPECT_NEAR(r.value(), first.results(0).value(), 1e-6) << r.model() << " " << r.intervention();
  }
}

TEST_F(FinishedJobTest, ExportCoefficientsStreamsACachedWindow) {
  // The first evaluation window: 16 byte-tokenizer ids of the eval text.
  const std::string text = testing::RandomText(16, 1);
  std::vector<int32_t> ids(text.begin(), text.end());
  v1::ExportCoefficientsRequest request;
  request.set_model("fg_a");
  request.set_window_hash(engine::WindowHash(ids.data(), 16));
  std::vector<v1::ExportCoefficientsResponse> parts;
  const auto collect = [&](const v1::ExportCoefficientsResponse& r) {
    parts.push_back(r);
    return true;
  };
  ASSERT_TRUE(env_->core()->ExportCoefficients(Alice(), request, collect).ok());
  ASSERT_GE(parts.size(), 2u);
  ASSERT_TRUE(parts[0].has_header());
  const v1::CoefficientsHeader& h = parts[0].header();
  EXPECT_EQ(h.window_length(), 16);
  EXPECT_EQ(h.dtype(), "float32");
  EXPECT_EQ(h.sites_size(), 4);
  EXPECT_EQ(h.total_bytes(), 16 * 4 * 4 * 4);  // T x sites x channels x float32
  int64_t bytes = 0;
  for (size_t i = 1; i < parts.size(); ++i) bytes += parts[i].chunk().size();
  EXPECT_EQ(bytes, h.total_bytes());
  request.set_window_hash(std::string(64, '0'));
  EXPECT_EQ(env_->core()->ExportCoefficients(Alice(), request, collect).code(),
            absl::StatusCode::kNotFound);
}

TEST(CoordinatorTest, OverlappingEvalAndCalibFailsNamingTheOverlap) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Submit(Alice(), SmallSpec({"fg_a"}, "eval", "eval")).ok());
  auto job = env.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job->error(), StartsWith("INVALID_ARGUMENT: "));
  EXPECT_THAT(job->error(), HasSubstr("share"));
  EXPECT_THAT(job->error(), HasSubstr("allow_overlap"));
  auto events = env.Watch(Alice(), job->id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->back().event().state(), v1::JOB_STATE_FAILED);
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(job->id());
  EXPECT_EQ(env.core()->QueryResults(Alice(), request)->results_size(), 0);
}

TEST(CoordinatorTest, OverlapIsAllowedWhenTheSpecSaysSo) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  v1::AuditSpec spec = SmallSpec({"fg_a"}, "eval", "eval");
  spec.set_allow_overlap(true);
  spec.add_interventions("cross_input");
  ASSERT_TRUE(env.Submit(Alice(), spec).ok());
  auto job = env.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->error();
}

// A stored spec that cannot be parsed was damaged in the store: DATA_LOSS
// naming the job, when a worker claims its task and when it is read.
TEST(CoordinatorTest, ACorruptStoredSpecIsDataLossNamingTheJob) {
  CoreEnv env;
  auto stored =
      env.store()->CreateJob("alice", R"({"models": ["fg_a"], "window_length": "x"})", {"fg_a"});
  ASSERT_TRUE(stored.ok()) << stored.status();
  const std::string job = absl::StrFormat("job %d", stored->id);
  auto claimed = env.coordinator()->Claim(env.worker()->options().name, 0);
  EXPECT_EQ(claimed.status().code(), absl::StatusCode::kDataLoss) << claimed.status();
  EXPECT_THAT(std::string(claimed.status().message()), HasSubstr(job));
  auto read = env.Get(Alice(), stored->id);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(job));
}

// CancelJob on a RUNNING job promises a stop within one batch; here the
// cancel lands after the claim but before the worker starts the audit.
TEST(CoordinatorTest, CancelRequestedAfterClaimCancelsTheRun) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto queued = env.Submit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  ASSERT_TRUE(queued.ok()) << queued.status();
  auto claimed = env.coordinator()->Claim(env.worker()->options().name, 0);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(queued->id());
  auto response = env.core()->CancelJob(Alice(), cancel);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(response->job().cancel_requested());
  env.worker()->RunTask(**claimed);
  env.coordinator()->SweepOnce();
  auto job = env.Get(Alice(), queued->id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
}

TEST(CoordinatorTest, CancelRunningJobStopsIt) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Upload(Alice(), "long", testing::RandomText(16 * 400, 5)).ok());
  ASSERT_TRUE(env.Start().ok());
  v1::AuditSpec spec = SmallSpec({"fg_a", "fg_b"}, "long", "calib");
  spec.set_max_eval_windows(400);
  auto queued = env.Submit(Alice(), spec);
  ASSERT_TRUE(queued.ok()) << queued.status();
  v1::WatchJobRequest watch;
  watch.set_job_id(queued->id());
  Responses seen;
  bool cancel_sent = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const absl::Status st = env.core()->WatchJob(
      Alice(), watch,
      [&](const v1::WatchJobResponse& r) {
        seen.push_back(r);
        if (!cancel_sent && r.event().has_progress()) {
          cancel_sent = true;
          v1::CancelJobRequest cancel;
          cancel.set_job_id(queued->id());
          auto response = env.core()->CancelJob(Alice(), cancel);
          EXPECT_TRUE(response.ok()) << response.status();
          EXPECT_TRUE(response->job().cancel_requested());
        }
        return true;
      },
      [&] { return std::chrono::steady_clock::now() > deadline; });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(cancel_sent);
  EXPECT_EQ(seen.back().event().state(), v1::JOB_STATE_CANCELLED);
  auto job = env.Get(Alice(), queued->id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(job->error().empty()) << job->error();
  // Stopped long before the second model's results.
  int batches = 0;
  for (const auto& r : seen) batches += r.event().has_results();
  EXPECT_LT(batches, 2);
}

// SubmitAudit's QUEUED event must be a job's first: a worker that claims the
// job at once must not get its RUNNING (or even its terminal) event in
// before it. Jobs that fail fast (eval == calib) with a worker that polls
// without pause make the window easy to hit.
TEST(CoordinatorTest, QueuedIsTheFirstEventEvenWithABusyWorker) {
  testing::RunOptions options = testing::FastRunOptions();
  options.worker.poll_interval = std::chrono::milliseconds(0);
  CoreEnv env({}, options);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Start().ok());
  int out_of_order = 0;
  for (int i = 0; i < 40; ++i) {
    auto job = env.Submit(Alice(), SmallSpec({"fg_a"}, "eval", "eval"));
    ASSERT_TRUE(job.ok()) << job.status();
    auto events = env.Watch(Alice(), job->id(), 0);
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_FALSE(events->empty());
    if (events->front().event().state() != v1::JOB_STATE_QUEUED) ++out_of_order;
  }
  env.Stop();
  EXPECT_EQ(out_of_order, 0) << "jobs whose first event was not QUEUED";
}

TEST(CoordinatorTest, WorkerThreadRunsSubmittedJobs) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Start().ok());
  auto queued = env.Submit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  ASSERT_TRUE(queued.ok()) << queued.status();
  // A live watch, woken by the hub while the worker runs the job.
  auto watched = env.Watch(Alice(), queued->id(), 0);
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_FALSE(watched->empty());
  EXPECT_EQ(watched->back().event().state(), v1::JOB_STATE_SUCCEEDED);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  while (std::chrono::steady_clock::now() < deadline) {
    auto job = env.Get(Alice(), queued->id());
    ASSERT_TRUE(job.ok()) << job.status();
    state = job->state();
    if (IsTerminal(state)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(state, v1::JOB_STATE_SUCCEEDED);
  env.Stop();
  env.Stop();  // idempotent
  auto listed = env.core()->ListJobs(Admin(), {});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->jobs_size(), 1);
  EXPECT_EQ(listed->jobs(0).state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace fca::core
