// AuditServiceCore (server/core/service.h) without running audits: spec and
// model checks at submission, per-user limits, owner isolation, cancelling
// queued jobs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "absl/strings/str_format.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
    ASSERT_TRUE(env_.UploadEvalAndCalib(Bob()).ok());
  }

  absl::StatusCode SubmitCode(const Caller& caller, const v1::AuditSpec& spec) {
    return env_.Submit(caller, spec).status().code();
  }

  v1::Job MustSubmit(const Caller& caller) {
    auto job = env_.Submit(caller, SmallSpec({"fg_a"}, "eval", "calib"));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  absl::StatusCode CancelCode(const Caller& caller, int64_t id) {
    v1::CancelJobRequest r;
    r.set_job_id(id);
    return env_.core()->CancelJob(caller, r).status().code();
  }

  absl::StatusCode QueryCode(const Caller& caller, int64_t id) {
    v1::QueryResultsRequest r;
    r.mutable_filter()->set_job_id(id);
    return env_.core()->QueryResults(caller, r).status().code();
  }

  CoreEnv env_;
};

TEST_F(ServiceTest, SubmitQueuesTheNormalizedSpec) {
  v1::AuditSpec spec = SmallSpec({"fg_a", "fg_b"}, "eval", "calib");
  spec.clear_batch_size();
  spec.set_dense_twin("dense");
  auto job = env_.Submit(Alice(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_GT(job->id(), 0);
  EXPECT_EQ(job->owner(), "alice");
  EXPECT_EQ(job->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job->spec().batch_size(), 8);  // default filled
  EXPECT_EQ(job->spec().window_length(), 16);
  EXPECT_EQ(job->spec().dense_twin(), "dense");
  EXPECT_FALSE(job->has_started_at());
  EXPECT_FALSE(job->has_finished_at());
  // The QUEUED event is the first of the job.
  auto events = env_.store()->ListJobEvents(job->id(), 0, 10);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  v1::JobEvent first;
  ASSERT_TRUE(first.ParseFromString((*events)[0].payload));
  EXPECT_EQ(first.state(), v1::JOB_STATE_QUEUED);
}

TEST_F(ServiceTest, SubmitUnknownModelOrDatasetIsNotFound) {
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"nope"}, "eval", "calib")), absl::StatusCode::kNotFound);
  v1::AuditSpec twin = SmallSpec({"fg_a"}, "eval", "calib");
  twin.set_dense_twin("nope");
  EXPECT_EQ(SubmitCode(Alice(), twin), absl::StatusCode::kNotFound);
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"fg_a"}, "missing", "calib")),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"fg_a"}, "eval", "missing")),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"fg_a"}, "sha256:0123", "calib")),
            absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, SubmitByContentHashFindsOwnDatasetOnly) {
  auto carol_data = env_.Upload(Caller{"carol", false}, "carol_eval", "carol's own bytes");
  ASSERT_TRUE(carol_data.ok()) << carol_data.status();
  const std::string own = "sha256:" + env_.core()->ListDatasets(Alice(), {})->datasets(0).sha256();
  EXPECT_TRUE(env_.Submit(Alice(), SmallSpec({"fg_a"}, own, "calib")).ok());
  const std::string carols = "sha256:" + carol_data->dataset().sha256();
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"fg_a"}, carols, "calib")), absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, SubmitChecksModelRoles) {
  v1::AuditSpec dense_audited = SmallSpec({"dense"}, "eval", "calib");
  auto st = env_.Submit(Alice(), dense_audited).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("dense"));

  v1::AuditSpec gate_twin = SmallSpec({"fg_a"}, "eval", "calib");
  gate_twin.set_dense_twin("fg_b");
  st = env_.Submit(Alice(), gate_twin).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("fg_b"));

  // The request is fine; the folder cannot be served.
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"broken"}, "eval", "calib")),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SubmitCode(Alice(), SmallSpec({"../fg_a"}, "eval", "calib")),
            absl::StatusCode::kInvalidArgument);
  v1::AuditSpec bad_window = SmallSpec({"fg_a"}, "eval", "calib");
  bad_window.set_window_length(1);
  EXPECT_EQ(SubmitCode(Alice(), bad_window), absl::StatusCode::kInvalidArgument);
  // Nothing was queued by any of these.
  auto listed = env_.core()->ListJobs(Admin(), {});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
}

TEST(ServiceLimitsTest, QueuedJobsPerUserAreLimited) {
  ServiceLimits limits;
  limits.max_queued_jobs_per_user = 2;
  CoreEnv env(limits);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.UploadEvalAndCalib(Bob()).ok());
  const v1::AuditSpec spec = SmallSpec({"fg_a"}, "eval", "calib");
  auto first = env.Submit(Alice(), spec);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(env.Submit(Alice(), spec).ok());
  auto third = env.Submit(Alice(), spec);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("2"));
  // The limit is per user, and a cancelled job no longer counts.
  EXPECT_TRUE(env.Submit(Bob(), spec).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(first->id());
  ASSERT_TRUE(env.core()->CancelJob(Alice(), cancel).ok());
  EXPECT_TRUE(env.Submit(Alice(), spec).ok());
}

TEST_F(ServiceTest, OtherUsersJobsAreNotFound) {
  const v1::Job job = MustSubmit(Alice());
  EXPECT_EQ(env_.Get(Bob(), job.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CancelCode(Bob(), job.id()), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_.Watch(Bob(), job.id(), 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(QueryCode(Bob(), job.id()), absl::StatusCode::kNotFound);
  // The same answer as for a job that does not exist: ids are not disclosed.
  EXPECT_EQ(env_.Get(Bob(), job.id()).status().message(),
            absl::StrFormat("job %d does not exist", job.id()));
  EXPECT_EQ(env_.Get(Bob(), 9999).status().code(), absl::StatusCode::kNotFound);
  // Bob's refused cancel changed nothing.
  auto still = env_.Get(Alice(), job.id());
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->state(), v1::JOB_STATE_QUEUED);
}

TEST_F(ServiceTest, AdminSeesAndCancelsEveryonesJobs) {
  const v1::Job job = MustSubmit(Alice());
  auto seen = env_.Get(Admin(), job.id());
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->owner(), "alice");
  EXPECT_EQ(QueryCode(Admin(), job.id()), absl::StatusCode::kOk);
  EXPECT_EQ(CancelCode(Admin(), job.id()), absl::StatusCode::kOk);
  auto watched = env_.Watch(Admin(), job.id(), 0);
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_EQ(watched->size(), 2u);
  EXPECT_EQ(watched->back().event().state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(ServiceTest, ListJobsShowsOwnJobsNewestFirstAndAdminAll) {
  const v1::Job a1 = MustSubmit(Alice());
  const v1::Job b1 = MustSubmit(Bob());
  const v1::Job a2 = MustSubmit(Alice());
  auto mine = env_.core()->ListJobs(Alice(), {});
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->jobs_size(), 2);
  EXPECT_EQ(mine->jobs(0).id(), a2.id());
  EXPECT_EQ(mine->jobs(1).id(), a1.id());
  auto all = env_.core()->ListJobs(Admin(), {});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->jobs_size(), 3);
  v1::ListJobsRequest paged;
  paged.set_page_size(1);
  auto page = env_.core()->ListJobs(Admin(), paged);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs_size(), 1);
  EXPECT_FALSE(page->next_page_token().empty());
  paged.set_page_size(501);
  EXPECT_EQ(env_.core()->ListJobs(Admin(), paged).status().code(),
            absl::StatusCode::kInvalidArgument);
  (void)b1;
}

TEST_F(ServiceTest, CancelQueuedJobCancelsAtOnceWithAnEvent) {
  const v1::Job job = MustSubmit(Alice());
  v1::CancelJobRequest request;
  request.set_job_id(job.id());
  auto cancelled = env_.core()->CancelJob(Alice(), request);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(cancelled->job().has_finished_at());
  auto events = env_.Watch(Alice(), job.id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].event().state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ((*events)[1].event().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ((*events)[1].event().seq(), 2);
  EXPECT_EQ((*events)[1].job().state(), v1::JOB_STATE_CANCELLED);
  // It is never claimed, and a second cancel finds it finished.
  auto claimed = testing::ClaimAsLocalWorker(env_.store());
  ASSERT_TRUE(claimed.ok());
  EXPECT_FALSE(claimed->has_value());
  EXPECT_EQ(CancelCode(Alice(), job.id()), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ServiceTest, QueryResultsNeedsAJobUnlessAdmin) {
  v1::QueryResultsRequest request;
  EXPECT_EQ(env_.core()->QueryResults(Alice(), request).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto all = env_.core()->QueryResults(Admin(), request);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->results_size(), 0);
  request.set_page_size(1001);
  EXPECT_EQ(env_.core()->QueryResults(Admin(), request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 9: a far-future created_after used to overflow into the past and
// return every row.
TEST_F(ServiceTest, FarFutureTimeBoundsDoNotWrapAround) {
  const v1::Job job = MustSubmit(Alice());
  storage::ResultRow row;
  row.model = "m";
  row.weights_sha256 = "w";
  row.dataset_sha256 = "d";
  row.intervention = "correct";
  row.metric = "nll";
  row.n = 1;
  ASSERT_TRUE(env_.store()->InsertResults(job.id(), {row}).ok());
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(job.id());
  request.mutable_filter()->mutable_created_after()->set_seconds(
      std::numeric_limits<int64_t>::max() / 2);
  auto future = env_.core()->QueryResults(Alice(), request);
  ASSERT_TRUE(future.ok()) << future.status();
  EXPECT_EQ(future->results_size(), 0);
  request.mutable_filter()->clear_created_after();
  request.mutable_filter()->mutable_created_before()->set_seconds(
      std::numeric_limits<int64_t>::min() / 2);
  auto past = env_.core()->QueryResults(Alice(), request);
  ASSERT_TRUE(past.ok()) << past.status();
  EXPECT_EQ(past->results_size(), 0);
  request.mutable_filter()->clear_created_before();
  auto all = env_.core()->QueryResults(Alice(), request);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->results_size(), 1);
}

TEST_F(ServiceTest, WatchWithNegativeAfterSeqIsInvalid) {
  const v1::Job job = MustSubmit(Alice());
  EXPECT_EQ(env_.Watch(Alice(), job.id(), -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, ListModelsListsBrokenApartAndDescribesSites) {
  auto models = env_.core()->ListModels(Alice());
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->models_size(), 3);  // broken is listed apart, with why
  ASSERT_EQ(models->unavailable_size(), 1);
  EXPECT_EQ(models->unavailable(0).name(), "broken");
  EXPECT_THAT(models->unavailable(0).reason(), HasSubstr("config.json"));
  EXPECT_EQ(models->models(0).name(), "dense");
  EXPECT_EQ(models->models(0).sites_size(), 0);
  EXPECT_EQ(models->models(1).name(), "fg_a");
  EXPECT_EQ(models->models(1).family(), "featuregate");
  EXPECT_EQ(models->models(1).sites_size(), 4);  // attn_gate and mlp_gate x 2 layers
  EXPECT_EQ(models->models(1).sites(0).channels(), 4);
  EXPECT_EQ(models->models(1).tokenizer(), "byte");
  // Listing loads nothing, so the weights are not hashed yet.
  EXPECT_EQ(env_.models()->loads_attempted(), 0);
  EXPECT_EQ(models->models(1).weights_sha256(), "");
  // Loaded models are listed with their hash, and recorded in the store.
  ASSERT_TRUE(env_.models()->Get(testing::kGateA).ok());
  ASSERT_TRUE(env_.models()->Get(testing::kGateB).ok());
  models = env_.core()->ListModels(Alice());
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_EQ(models->models(1).weights_sha256().size(), 64u);
  EXPECT_NE(models->models(1).weights_sha256(), models->models(2).weights_sha256());
  auto recorded = env_.store()->GetModel(testing::kGateA);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->weights_sha256, models->models(1).weights_sha256());
  EXPECT_EQ(recorded->family, "featuregate");
  EXPECT_THAT(recorded->config_json, ::testing::HasSubstr("featuregate"));
}

TEST_F(ServiceTest, TokenizeUsesTheModelsTokenizer) {
  v1::TokenizeRequest request;
  request.set_model("fg_a");
  request.set_text(std::string("Hi\n\xff", 4));  // any bytes: the byte tokenizer
  auto response = env_.core()->Tokenize(Alice(), request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->tokenizer(), "byte");
  EXPECT_EQ(response->vocab_size(), 256);
  EXPECT_EQ(std::vector<int32_t>(response->ids().begin(), response->ids().end()),
            (std::vector<int32_t>{'H', 'i', '\n', 255}));
  request.set_text("");
  response = env_.core()->Tokenize(Alice(), request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->ids_size(), 0);
}

TEST_F(ServiceTest, TokenizeRefusesUnknownModelsBadNamesAndLargeText) {
  v1::TokenizeRequest request;
  request.set_model("no_such_model");
  EXPECT_EQ(env_.core()->Tokenize(Alice(), request).status().code(), absl::StatusCode::kNotFound);
  request.set_model("../fg_a");
  EXPECT_EQ(env_.core()->Tokenize(Alice(), request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_model("fg_a");
  request.set_text(std::string(env_.core()->limits().max_tokenize_bytes + 1, 'x'));
  auto big = env_.core()->Tokenize(Alice(), request);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()), ::testing::HasSubstr("bytes"));
  // At the limit it is fine.
  request.set_text(std::string(env_.core()->limits().max_tokenize_bytes, 'x'));
  EXPECT_TRUE(env_.core()->Tokenize(Alice(), request).ok());
}

}  // namespace
}  // namespace fca::core
