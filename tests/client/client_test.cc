// AuditClient against an in-process fake AuditService on 127.0.0.1: the
// authorization metadata, deadlines, chunking and status conversion.
#include "client/client.h"

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/exit_codes.h"
#include "client/report_format.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/grpc/listener.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "secret-key";

class FakeService final : public v1::AuditService::Service {
 public:
  std::vector<size_t> chunk_sizes;
  std::string uploaded;
  v1::UploadDatasetHeader header;

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* response) override {
    if (auto status = CheckAuth(context); !status.ok()) return status;
    response->add_models()->set_name("a");
    response->add_models()->set_name("b");
    return grpc::Status::OK;
  }

  grpc::Status UploadDataset(grpc::ServerContext* context,
                             grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                             v1::UploadDatasetResponse* response) override {
    v1::UploadDatasetRequest request;
    if (!reader->Read(&request) || !request.has_header()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "header first"};
    }
    header = request.header();
    while (reader->Read(&request)) {
      if (!request.has_chunk()) {
        return {grpc::StatusCode::INVALID_ARGUMENT, "second header"};
      }
      chunk_sizes.push_back(request.chunk().size());
      uploaded += request.chunk();
    }
    response->mutable_dataset()->set_name(header.name());
    response->mutable_dataset()->set_size_bytes(uploaded.size());
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    if (request->job_id() == 42) {  // slow: exercises the deadline
      while (!context->IsCancelled()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return grpc::Status::CANCELLED;
    }
    return {grpc::StatusCode::NOT_FOUND, "job " + std::to_string(request->job_id()) + " not found"};
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    const int page = request->page_token().empty() ? 0 : std::stoi(request->page_token());
    response->add_jobs()->set_id(page + 1);
    if (page < 2) response->set_next_page_token(std::to_string(page + 1));
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::WatchJobResponse>* writer) override {
    // A stream has no deadline however long the job runs.
    if (context->deadline() != std::chrono::system_clock::time_point::max()) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "stream has a deadline"};
    }
    if (request->job_id() == 77) {  // one event, then never ends by itself
      v1::WatchJobResponse response;
      response.mutable_event()->set_seq(1);
      writer->Write(response);
      while (!context->IsCancelled()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return grpc::Status::CANCELLED;
    }
    for (int64_t seq = request->after_seq() + 1; seq <= 5; ++seq) {
      v1::WatchJobResponse response;
      response.mutable_event()->set_seq(seq);
      writer->Write(response);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetReport(grpc::ServerContext* context, const v1::GetReportRequest* request,
                         v1::GetReportResponse* response) override {
    if (auto status = CheckAuth(context); !status.ok()) return status;
    response->mutable_job()->set_id(request->job_id());
    response->add_models("m");
    return grpc::Status::OK;
  }

  grpc::Status CompareJobs(grpc::ServerContext*, const v1::CompareJobsRequest* request,
                           v1::CompareJobsResponse* response) override {
    for (int64_t id : request->job_ids()) response->add_reports()->mutable_job()->set_id(id);
    return grpc::Status::OK;
  }

  // Model "m<id>" from each job, in request order.
  grpc::Status PoolJobs(grpc::ServerContext*, const v1::PoolJobsRequest* request,
                        v1::PoolJobsResponse* response) override {
    for (int64_t id : request->job_ids()) {
      v1::PooledModel* m = response->add_models();
      m->set_model("m" + std::to_string(id));
      m->set_job_id(id);
      response->mutable_report()->add_models(m->model());
    }
    response->mutable_report()->mutable_job()->set_state(v1::JOB_STATE_SUCCEEDED);
    return grpc::Status::OK;
  }

  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                             v1::GetServerInfoResponse* response) override {
    response->set_server_version("9.9");
    response->add_metrics()->set_name("penalty");
    return grpc::Status::OK;
  }

  grpc::Status ListJobWindows(grpc::ServerContext*, const v1::ListJobWindowsRequest* request,
                              v1::ListJobWindowsResponse* response) override {
    response->set_model(request->model());
    response->add_windows()->set_hash("h" + std::to_string(request->job_id()));
    return grpc::Status::OK;
  }

  grpc::Status ExportCoefficients(
      grpc::ServerContext*, const v1::ExportCoefficientsRequest* request,
      grpc::ServerWriter<v1::ExportCoefficientsResponse>* writer) override {
    v1::ExportCoefficientsResponse response;
    response.mutable_header()->set_model(request->model());
    response.mutable_header()->set_total_bytes(6);
    writer->Write(response);
    if (request->model() == "headerless-chunk") writer->Write(response);
    for (const char* chunk : {"abc", "def"}) {
      response.set_chunk(chunk);
      writer->Write(response);
    }
    return grpc::Status::OK;
  }

 private:
  static grpc::Status CheckAuth(grpc::ServerContext* context) {
    auto it = context->client_metadata().find("authorization");
    if (it == context->client_metadata().end() ||
        std::string(it->second.data(), it->second.size()) != std::string("Bearer ") + kToken) {
      return {grpc::StatusCode::UNAUTHENTICATED, "missing or bad API key"};
    }
    return grpc::Status::OK;
  }
};

class AuditClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<grpc_server::Listener> listener = grpc_server::Listen({&service_}, {});
    ASSERT_TRUE(listener.ok()) << listener.status();
    server_ = std::move(listener->server);
    port_ = listener->port;
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<AuditClient> Connect(std::string token = kToken) {
    ClientOptions options;
    options.address = "127.0.0.1:" + std::to_string(port_);
    options.token = std::move(token);
    options.timeout = absl::Milliseconds(300);
    auto client = AuditClient::Open(options);
    EXPECT_TRUE(client.ok());
    return std::move(client).value();
  }

  FakeService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(AuditClientTest, SendsBearerToken) {
  auto models = Connect()->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->models_size(), 2);
  EXPECT_EQ(models->models(1).name(), "b");
}

TEST_F(AuditClientTest, WrongTokenIsUnauthenticated) {
  for (const std::string token : {"", "wrong"}) {
    auto models = Connect(token)->ListModels();
    ASSERT_FALSE(models.ok());
    EXPECT_EQ(models.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(models.status().message(), "missing or bad API key");
  }
}

TEST_F(AuditClientTest, UploadsInChunksOfAtMostOneMiB) {
  std::string data(kUploadChunkBytes * 2 + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::istringstream in(data);
  v1::UploadDatasetHeader header;
  header.set_name("corpus");
  header.set_size_bytes(static_cast<int64_t>(data.size()));
  auto response = Connect()->UploadDataset(header, in);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(service_.header.name(), "corpus");
  EXPECT_THAT(service_.chunk_sizes, ElementsAre(kUploadChunkBytes, kUploadChunkBytes, 123u));
  EXPECT_EQ(service_.uploaded, data);
  EXPECT_EQ(response->dataset().size_bytes(), static_cast<int64_t>(data.size()));
}

TEST_F(AuditClientTest, NonUtf8TextIsRefusedBeforeAnythingIsSent) {
  auto client = Connect();
  v1::AuditSpec spec;
  spec.add_models("fg-a");
  spec.set_label("label \xff");
  // The fake has no SubmitAudit: reaching it would be UNIMPLEMENTED.
  auto job = client->SubmitAudit(spec);
  EXPECT_TRUE(IsUsageError(job.status())) << job.status();
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("spec.label"));
  v1::UploadDatasetHeader header;
  header.set_name("data\xc3");
  std::istringstream data("abc");
  auto upload = client->UploadDataset(header, data);
  EXPECT_TRUE(IsUsageError(upload.status())) << upload.status();
  EXPECT_EQ(service_.header.name(), "");  // the fake received nothing
}

TEST_F(AuditClientTest, ServerStatusArrivesUnchanged) {
  auto job = Connect()->GetJob(7);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "job 7 not found");
}

TEST_F(AuditClientTest, UnaryCallsHaveTheDeadline) {
  auto job = Connect()->GetJob(42);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(AuditClientTest, WatchStreamsFromAfterSeqWithoutDeadline) {
  std::vector<int64_t> seqs;
  absl::Status status = Connect()->WatchJob(1, 2, [&](const v1::WatchJobResponse& r) {
    seqs.push_back(r.event().seq());
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(seqs, ElementsAre(3, 4, 5));
}

TEST_F(AuditClientTest, WatchStopsWhenTheCallbackSaysSo) {
  int events = 0;
  absl::Status status = Connect()->WatchJob(77, 0, [&](const v1::WatchJobResponse&) {
    ++events;
    return false;
  });
  EXPECT_TRUE(status.ok()) << status;  // our own cancel is not an error
  EXPECT_EQ(events, 1);
}

TEST_F(AuditClientTest, FollowPagesCollectsEveryPage) {
  auto client = Connect();
  std::vector<int64_t> ids;
  v1::ListJobsRequest request;
  absl::Status status = FollowPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    request.set_page_token(token);
    auto page = client->ListJobs(request);
    if (!page.ok()) return page.status();
    for (const auto& job : page->jobs()) ids.push_back(job.id());
    return page->next_page_token();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(ids, ElementsAre(1, 2, 3));
}

TEST_F(AuditClientTest, ExportDeliversHeaderThenChunks) {
  v1::ExportCoefficientsRequest request;
  request.set_model("m");
  std::string model, bytes;
  absl::Status status = Connect()->ExportCoefficients(
      request,
      [&](const v1::CoefficientsHeader& h) {
        model = h.model();
        return absl::OkStatus();
      },
      [&](const std::string& chunk) {
        bytes += chunk;
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(model, "m");
  EXPECT_EQ(bytes, "abcdef");
}

TEST_F(AuditClientTest, ExportRejectsASecondHeaderAndStopsOnCallbackError) {
  v1::ExportCoefficientsRequest request;
  request.set_model("headerless-chunk");
  auto ok = [](const auto&) { return absl::OkStatus(); };
  absl::Status status = Connect()->ExportCoefficients(request, ok, ok);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);

  request.set_model("m");
  status = Connect()->ExportCoefficients(
      request, ok, [](const std::string&) { return absl::DataLossError("disk full"); });
  EXPECT_EQ(status, absl::DataLossError("disk full"));
}

TEST_F(AuditClientTest, ReportCompareInfoAndWindowsReachTheServer) {
  auto client = Connect();
  auto report = client->GetReport(7);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->job().id(), 7);
  EXPECT_THAT(report->models(), ElementsAre("m"));
  EXPECT_EQ(Connect("wrong")->GetReport(7).status().code(), absl::StatusCode::kUnauthenticated);
  v1::CompareJobsRequest compare;
  compare.add_job_ids(3);
  compare.add_job_ids(1);
  auto both = client->CompareJobs(compare);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->reports_size(), 2);
  EXPECT_EQ(both->reports(1).job().id(), 1);
  v1::PoolJobsRequest pool;
  pool.add_job_ids(3);
  pool.add_job_ids(1);
  auto pooled = client->PoolJobs(pool);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  ASSERT_EQ(pooled->models_size(), 2);
  EXPECT_EQ(pooled->models(1).job_id(), 1);
  // `fca pool` prints the job each model came from, then the report.
  const std::string text = FormatPoolText(*pooled);
  EXPECT_THAT(text, HasSubstr("POOLED  jobs 3, 1\nmodels from: m3 (job 3), m1 (job 1)"));
  EXPECT_THAT(text, HasSubstr("AUDIT REPORT  pooled jobs (SUCCEEDED)\nmodels: m3, m1"));
  auto info = client->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->server_version(), "9.9");
  v1::ListJobWindowsRequest windows;
  windows.set_job_id(5);
  windows.set_model("fg");
  auto listed = client->ListJobWindows(windows);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->model(), "fg");
  EXPECT_EQ(listed->windows(0).hash(), "h5");
  windows.set_model("bad\xff");
  EXPECT_TRUE(IsUsageError(client->ListJobWindows(windows).status()));  // nothing sent
}

TEST(AuditClientOpenTest, UnreachableServerIsUnavailable) {
  ClientOptions options;
  options.address = "127.0.0.1:1";  // nothing listens on port 1
  options.timeout = absl::Seconds(5);
  auto client = AuditClient::Open(options);
  ASSERT_TRUE(client.ok());
  auto models = (*client)->ListModels();
  ASSERT_FALSE(models.ok());
  EXPECT_EQ(models.status().code(), absl::StatusCode::kUnavailable);
}

TEST(AuditClientOpenTest, EmptyAddressIsRejected) {
  ClientOptions options;
  options.address = "";
  EXPECT_FALSE(AuditClient::Open(options).ok());
}

TEST(ToAbslStatusTest, KeepsCodeAndMessageForEveryCode) {
  EXPECT_TRUE(ToAbslStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status =
        ToAbslStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "msg"));
    EXPECT_EQ(static_cast<int>(status.code()), code);
    EXPECT_EQ(status.message(), "msg");
  }
  EXPECT_EQ(ToAbslStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "x")).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ToAbslStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "x")).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(FollowPagesTest, StopsOnErrorAndOnARepeatedToken) {
  int calls = 0;
  absl::Status error = FollowPages([&](const std::string&) -> absl::StatusOr<std::string> {
    return ++calls < 2 ? absl::StatusOr<std::string>("next")
                       : absl::StatusOr<std::string>(absl::UnavailableError("down"));
  });
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);

  absl::Status loop =
      FollowPages([](const std::string&) -> absl::StatusOr<std::string> { return "same"; });
  EXPECT_EQ(loop.code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace fca::client
