// AuditServiceImpl through a real server on 127.0.0.1: status codes map 1:1,
// large uploads travel in chunks, WatchJob streams end after the terminal
// event, and the server keeps answering after every error.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <future>

#include "common/sha256.h"
#include "tests/grpc/grpc_env.h"

namespace fca::grpc_server {
namespace {

using core::testing::SmallSpec;
using testing::GrpcEnv;
using ::testing::HasSubstr;
using testing::ServerConfig;

// The server still answers a plain call.
void ExpectServing(GrpcEnv* env) {
  v1::ListModelsResponse models;
  const grpc::Status st = env->ListModels("", &models);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(models.models_size(), 3);  // dense, fg_a, fg_b (broken listed as unavailable)
}

TEST(ToGrpcTest, EveryCodeAndMessageMapsOneToOne) {
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status st(static_cast<absl::StatusCode>(code), "why it failed");
    const grpc::Status out = ToGrpc(st);
    EXPECT_EQ(static_cast<int>(out.error_code()), code);
    EXPECT_EQ(out.error_message(), "why it failed");
  }
  EXPECT_EQ(static_cast<int>(grpc::StatusCode::NOT_FOUND),
            static_cast<int>(absl::StatusCode::kNotFound));
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  static ServerConfig Config() {
    ServerConfig config;
    config.limits.max_dataset_bytes = 6 << 20;
    config.limits.max_queued_jobs_per_user = 2;
    return config;
  }
  void SetUp() override { ASSERT_TRUE(env_.started()); }

  GrpcEnv env_{Config()};
};

TEST_F(GrpcServiceTest, ListModelsOverTheWire) {
  v1::ListModelsResponse models;
  ASSERT_TRUE(env_.ListModels("", &models).ok());
  ASSERT_EQ(models.models_size(), 3);
  EXPECT_EQ(models.models(0).name(), "dense");
  EXPECT_EQ(models.models(1).name(), "fg_a");
  EXPECT_EQ(models.models(2).name(), "fg_b");
}

TEST_F(GrpcServiceTest, NotFoundForUnknownJobAndModel) {
  auto ctx = GrpcEnv::Context();
  v1::GetJobRequest get;
  get.set_job_id(4242);
  v1::GetJobResponse got;
  grpc::Status st = env_.stub()->GetJob(ctx.get(), get, &got);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("4242"));
  ExpectServing(&env_);
  ASSERT_TRUE(env_.UploadEvalAndCalib("").ok());
  st = env_.Submit("", SmallSpec({"nope"}, "eval", "calib"), nullptr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectServing(&env_);
}

TEST_F(GrpcServiceTest, InvalidArgumentForBadSpecAndBadStream) {
  grpc::Status st = env_.Submit("", v1::AuditSpec(), nullptr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectServing(&env_);
  st = env_.Upload("", "../escape", "bytes");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectServing(&env_);
  st = env_.Upload("", "sum", "bytes", nullptr, -1, Sha256Hex("other"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("checksum"));
  ExpectServing(&env_);
  // A stream that starts with a chunk instead of a header.
  auto ctx = GrpcEnv::Context();
  v1::UploadDatasetResponse response;
  auto writer = env_.stub()->UploadDataset(ctx.get(), &response);
  v1::UploadDatasetRequest chunk;
  chunk.set_chunk("headless");
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectServing(&env_);
}

TEST_F(GrpcServiceTest, OversizedUploadIsResourceExhausted) {
  const std::string big(7 << 20, 'x');  // the limit is 6 MiB
  grpc::Status st = env_.Upload("", "big", big);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr(std::to_string(6 << 20)));
  ExpectServing(&env_);
  // A header that understates the size does not get the bytes in either.
  st = env_.Upload("", "liar", big, nullptr, /*announced=*/1 << 20);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.error_code(), ::testing::AnyOf(grpc::StatusCode::INVALID_ARGUMENT,
                                                grpc::StatusCode::RESOURCE_EXHAUSTED));
  ExpectServing(&env_);
  v1::ListDatasetsResponse datasets;
  auto ctx = GrpcEnv::Context();
  ASSERT_TRUE(env_.stub()->ListDatasets(ctx.get(), {}, &datasets).ok());
  EXPECT_EQ(datasets.datasets_size(), 0);
}

TEST_F(GrpcServiceTest, UploadOfMoreThanFourMebibytesInChunks) {
  std::string bytes = core::testing::RandomText((5 << 20) + 17, 9);
  v1::UploadDatasetResponse response;
  grpc::Status st = env_.Upload("", "large", bytes, &response, -1, Sha256Hex(bytes));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.dataset().size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(response.dataset().sha256(), Sha256Hex(bytes));
  EXPECT_FALSE(response.deduplicated());
  auto stored = env_.core_env()->store()->ReadDatasetBytes(response.dataset().id());
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(*stored == bytes);
  v1::UploadDatasetResponse again;
  ASSERT_TRUE(env_.Upload("", "large_copy", bytes, &again).ok());
  EXPECT_TRUE(again.deduplicated());
}

TEST_F(GrpcServiceTest, ResourceExhaustedForTooManyQueuedJobs) {
  ASSERT_TRUE(env_.UploadEvalAndCalib("").ok());
  const v1::AuditSpec spec = SmallSpec({"fg_a"}, "eval", "calib");
  ASSERT_TRUE(env_.Submit("", spec, nullptr).ok());
  ASSERT_TRUE(env_.Submit("", spec, nullptr).ok());
  EXPECT_EQ(env_.Submit("", spec, nullptr).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ExpectServing(&env_);
}

TEST_F(GrpcServiceTest, FailedPreconditionCancellingAFinishedJob) {
  ASSERT_TRUE(env_.UploadEvalAndCalib("").ok());
  v1::Job job;
  ASSERT_TRUE(env_.Submit("", SmallSpec({"fg_a"}, "eval", "calib"), &job).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  v1::CancelJobResponse cancelled;
  auto ctx = GrpcEnv::Context();
  ASSERT_TRUE(env_.stub()->CancelJob(ctx.get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);
  auto again = GrpcEnv::Context();
  const grpc::Status st = env_.stub()->CancelJob(again.get(), cancel, &cancelled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ExpectServing(&env_);
}

TEST_F(GrpcServiceTest, WatchJobStreamEndsAfterTheTerminalEvent) {
  ASSERT_TRUE(env_.UploadEvalAndCalib("").ok());
  ASSERT_TRUE(env_.core_env()->Start().ok());
  v1::Job job;
  ASSERT_TRUE(env_.Submit("", SmallSpec({"fg_a"}, "eval", "calib"), &job).ok());
  std::vector<v1::WatchJobResponse> events;
  grpc::Status st = env_.Watch("", job.id(), 0, &events);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_GE(events.size(), 4u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].event().seq(), static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ(events.back().event().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(events.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  // Resumed near the end: exactly the rest; at the end: nothing, at once.
  std::vector<v1::WatchJobResponse> rest;
  ASSERT_TRUE(env_.Watch("", job.id(), events.size() - 2, &rest).ok());
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[1].event().seq(), static_cast<int64_t>(events.size()));
  std::vector<v1::WatchJobResponse> none;
  ASSERT_TRUE(env_.Watch("", job.id(), events.size(), &none).ok());
  EXPECT_TRUE(none.empty());
  // The stored results are queryable over the wire.
  v1::QueryResultsRequest query;
  query.mutable_filter()->set_job_id(job.id());
  query.mutable_filter()->set_intervention("cross_input");
  query.mutable_filter()->set_metric("penalty");
  v1::QueryResultsResponse results;
  auto ctx = GrpcEnv::Context();
  ASSERT_TRUE(env_.stub()->QueryResults(ctx.get(), query, &results).ok());
  ASSERT_EQ(results.results_size(), 1);
  EXPECT_TRUE(results.results(0).has_ci_low());
  env_.core_env()->Stop();
}

TEST_F(GrpcServiceTest, WatchUnknownJobIsNotFound) {
  std::vector<v1::WatchJobResponse> events;
  EXPECT_EQ(env_.Watch("", 777, 0, &events).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(events.empty());
  ExpectServing(&env_);
}

// grpc.health.v1.Health/Check by hand (no generated health stubs here):
// HealthCheckRequest{service = 1} goes out, the HealthCheckResponse's bytes
// come back ("\x08\x01" is status SERVING, "\x08\x02" NOT_SERVING).
grpc::Status HealthCheck(int port, const std::string& service, std::string* reply) {
  grpc::GenericStub stub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  const std::string request =
      std::string(1, '\x0a') + std::string(1, static_cast<char>(service.size())) + service;
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  auto ctx = GrpcEnv::Context();
  std::promise<grpc::Status> done;
  stub.UnaryCall(ctx.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out,
                 [&](grpc::Status st) { done.set_value(std::move(st)); });
  const grpc::Status st = done.get_future().get();
  std::vector<grpc::Slice> slices;
  reply->clear();
  if (st.ok() && out.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) reply->append(s.begin(), s.end());
  }
  return st;
}

TEST_F(GrpcServiceTest, HealthNamesTheAuditService) {
  std::string reply;
  for (const std::string service : {"", "fca.v1.AuditService"}) {
    const grpc::Status st = HealthCheck(env_.port(), service, &reply);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_message();
    EXPECT_EQ(reply, std::string("\x08\x01", 2)) << service;  // SERVING
  }
  EXPECT_EQ(HealthCheck(env_.port(), "fca.v1.Nope", &reply).error_code(),
            grpc::StatusCode::NOT_FOUND);
  env_.server()->SetServing(false);  // what a draining server says
  ASSERT_TRUE(HealthCheck(env_.port(), "fca.v1.AuditService", &reply).ok());
  EXPECT_EQ(reply, std::string("\x08\x02", 2));  // NOT_SERVING
}

TEST_F(GrpcServiceTest, ReportAndServerInfoOverTheWire) {
  ASSERT_TRUE(env_.UploadEvalAndCalib("").ok());
  v1::Job job;
  ASSERT_TRUE(env_.Submit("", SmallSpec({"fg_a"}, "eval", "calib"), &job).ok());
  auto ctx = GrpcEnv::Context();
  v1::GetReportRequest get;
  get.set_job_id(job.id());
  v1::GetReportResponse report;
  ASSERT_TRUE(env_.stub()->GetReport(ctx.get(), get, &report).ok());
  EXPECT_EQ(report.job().id(), job.id());
  get.set_job_id(job.id() + 100);
  auto missing = GrpcEnv::Context();
  EXPECT_EQ(env_.stub()->GetReport(missing.get(), get, &report).error_code(),
            grpc::StatusCode::NOT_FOUND);
  auto compare = GrpcEnv::Context();
  v1::CompareJobsResponse compared;
  EXPECT_EQ(env_.stub()->CompareJobs(compare.get(), {}, &compared).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  auto info_ctx = GrpcEnv::Context();
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(env_.stub()->GetServerInfo(info_ctx.get(), {}, &info).ok());
  EXPECT_FALSE(info.engine_version().empty());
  EXPECT_FALSE(info.metrics().empty());
  EXPECT_FALSE(info.auth());
  auto windows_ctx = GrpcEnv::Context();
  v1::ListJobWindowsRequest list;
  list.set_job_id(job.id());
  v1::ListJobWindowsResponse windows;
  ASSERT_TRUE(env_.stub()->ListJobWindows(windows_ctx.get(), list, &windows).ok());
  EXPECT_EQ(windows.windows_size(), 6 + 4);
}

}  // namespace
}  // namespace fca::grpc_server
