// The worker protocol end to end against the real fca-server
// (--workers=0): bad input through raw stubs, each refused with its code, a
// worker whose weights differ refusing its task, and the server serving on
// (remote_worker_fixture.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/remote_worker_fixture.h"

namespace fca::e2e::remote_worker {
namespace {

// (d) Bad input on the worker protocol, each refused with its code; a
// worker whose weights differ refuses the task; the server keeps serving.
TEST_F(RemoteWorkerE2ETest, BadInputIsRefusedAndTheServerKeepsServing) {
  // A worker key in the store (the schema accepts the role).
  CommandResult created =
      e2e::Run({FCA_SERVER_BIN, "--db=" + db_, "--create_api_key=robot", "--role=worker"}, {}, 60);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string robot = created.out.substr(0, created.out.find('\n'));
  ASSERT_EQ(robot.size(), 64u) << created.out;

  auto server = StartServer({"--workers=0", "--lease_seconds=1", "--refusal_grace_seconds=1"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");

  v1::RegisterWorkerRequest reg;
  reg.set_worker("raw");
  reg.set_device("cpu");
  v1::RegisterWorkerResponse reg_response;
  EXPECT_EQ(c.worker->RegisterWorker(Ctx("unknown-key-0123456789").get(), reg, &reg_response)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(c.worker->RegisterWorker(Ctx(kUserKey).get(), reg, &reg_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ClaimTaskRequest claim;
  claim.set_worker("raw");
  v1::ClaimTaskResponse claimed;
  EXPECT_EQ(c.worker->ClaimTask(Ctx(kUserKey).get(), claim, &claimed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A worker key reads no user's data.
  v1::ListJobsResponse jobs;
  EXPECT_EQ(c.audit->ListJobs(Ctx(robot).get(), v1::ListJobsRequest(), &jobs).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::QueryResultsRequest query;
  query.mutable_filter()->set_job_id(1);
  v1::QueryResultsResponse results;
  EXPECT_EQ(c.audit->QueryResults(Ctx(robot).get(), query, &results).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ListDatasetsResponse datasets;
  EXPECT_EQ(c.audit->ListDatasets(Ctx(kWorkerKey).get(), v1::ListDatasetsRequest(), &datasets)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Names that could pose as the server's own workers are refused.
  reg.set_worker("local/0");
  EXPECT_EQ(c.worker->RegisterWorker(Ctx(robot).get(), reg, &reg_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  reg.set_worker("raw");
  grpc::Status status = c.worker->RegisterWorker(Ctx(robot).get(), reg, &reg_response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(reg_response.holder(), "raw@robot");
  EXPECT_EQ(reg_response.lease_ms(), 1000);

  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  status = c.worker->ClaimTask(Ctx(robot).get(), claim, &claimed);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_TRUE(claimed.has_assignment());
  const v1::TaskAssignment& task = claimed.assignment();
  EXPECT_EQ(task.job_id(), job);
  EXPECT_EQ(task.model(), "fg-a");
  EXPECT_EQ(task.weights_sha256().size(), 64u);
  EXPECT_EQ(task.spec().models(0), "fg-a");

  v1::ReportRowsRequest rows;
  rows.set_worker("raw");
  *rows.mutable_lease() = task.lease();
  rows.set_model("fg-a");
  rows.set_weights_sha256(task.weights_sha256());
  v1::Result* row = rows.add_rows();
  row->set_intervention("correct");
  row->set_metric("nll");
  row->set_value(1.5);
  row->set_defined(true);
  row->set_n(1);
  v1::ReportRowsResponse rows_response;
  // A task it does not hold, another worker's name, another key's worker.
  v1::ReportRowsRequest other = rows;
  other.mutable_lease()->set_task_id(task.lease().task_id() + 1000);
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  other = rows;
  other.set_worker("someone-else");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(c.worker->ReportRows(Ctx(kWorkerKey).get(), rows, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Malformed reports on a held lease.
  other = rows;
  other.set_model("fg-b");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  other = rows;
  other.mutable_rows(0)->set_model("dense");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  other = rows;
  other.set_weights_sha256(std::string(64, '0'));
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::ReportProgressRequest progress;
  progress.set_worker("raw");
  *progress.mutable_lease() = task.lease();
  progress.mutable_progress()->set_fraction(std::nan(""));
  v1::ReportProgressResponse progress_response;
  EXPECT_EQ(c.worker->ReportProgress(Ctx(robot).get(), progress, &progress_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::FinishTaskRequest finish;
  finish.set_worker("raw");
  *finish.mutable_lease() = task.lease();
  finish.mutable_outcome()->set_code(99);
  v1::FinishTaskResponse finish_response;
  EXPECT_EQ(c.worker->FinishTask(Ctx(robot).get(), finish, &finish_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    // An entry over the limit, then chunks past the announced size.
    for (const int64_t announced : {int64_t{2} << 30, int64_t{4}}) {
      auto context = Ctx(robot);
      v1::PutCoefficientsResponse put_response;
      auto writer = c.worker->PutCoefficients(context.get(), &put_response);
      v1::PutCoefficientsRequest put;
      v1::PutCoefficientsHeader* header = put.mutable_header();
      header->set_worker("raw");
      *header->mutable_lease() = task.lease();
      header->mutable_key()->set_weights_sha256(task.weights_sha256());
      header->mutable_key()->set_window_hash("w");
      header->mutable_key()->set_dtype("float32");
      header->mutable_key()->set_device("cpu");
      header->set_size_bytes(announced);
      writer->Write(put);
      put.set_chunk(std::string(8, 'x'));
      writer->Write(put);
      writer->WritesDone();
      EXPECT_EQ(writer->Finish().error_code(), announced > 4 ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                                             : grpc::StatusCode::INVALID_ARGUMENT);
    }
  }
  // The lease works meanwhile; then it runs out (1 s, never renewed), and
  // the sweep queues the task again.
  status = c.worker->ReportRows(Ctx(robot).get(), rows, &rows_response);
  EXPECT_TRUE(status.ok()) << Describe(status);
  v1::GetCoefficientsRequest probe;  // checks the lease, changes nothing
  probe.set_worker("raw");
  *probe.mutable_lease() = task.lease();
  *probe.mutable_key() = v1::CoefficientKey();
  probe.mutable_key()->set_weights_sha256(task.weights_sha256());
  probe.mutable_key()->set_window_hash("w");
  probe.mutable_key()->set_dtype("float32");
  probe.mutable_key()->set_device("cpu");
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto context = Ctx(robot);
    auto reader = c.worker->GetCoefficients(context.get(), probe);
    v1::GetCoefficientsResponse part;
    while (reader->Read(&part)) {
    }
    status = reader->Finish();
  } while (status.ok() && Clock::now() < deadline);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(status);
  v1::RenewLeaseRequest renew;
  renew.set_worker("raw");
  *renew.mutable_lease() = task.lease();
  v1::RenewLeaseResponse renew_response;
  EXPECT_EQ(c.worker->RenewLease(Ctx(robot).get(), renew, &renew_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), rows, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  finish.mutable_outcome()->set_code(0);
  EXPECT_EQ(c.worker->FinishTask(Ctx(robot).get(), finish, &finish_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::ReadDatasetRequest read;
  read.set_worker("raw");
  *read.mutable_lease() = task.lease();
  {
    auto context = Ctx(robot);
    auto reader = c.worker->ReadDataset(context.get(), read);
    v1::ReadDatasetResponse part;
    while (reader->Read(&part)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }

  // A real worker whose fg-a differs refuses the (queued again) task; it is
  // the only live worker (raw's last claim is older than a lease), so the
  // task fails once the refusal grace (1 s here) has passed.
  auto stranger = StartWorker(server->address(), "stranger", "other-models");
  const v1::Job failed = WaitJob(c, job, 60);
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed.error().find("differ"), std::string::npos) << failed.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("worker stranger@pool refused it"), std::string::npos) << notes;
  EXPECT_NE(notes.find("differ from the coordinator's"), std::string::npos) << notes;
  // The stored row of the expired lease stays the only one.
  EXPECT_EQ(Results(c, job).size(), 1u);

  // A model the worker cannot load fails that task, not the worker.
  const int64_t missing = Submit(c, Spec({"fg-b"}, "eval"));
  const v1::Job missing_done = WaitJob(c, missing, 60);
  EXPECT_EQ(missing_done.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(missing_done.error().find("fg-b"), std::string::npos) << missing_done.error();
  EXPECT_TRUE(stranger->Running()) << stranger->Stderr();

  // The server still serves.
  v1::ListModelsResponse models;
  status = c.audit->ListModels(Ctx(kUserKey).get(), v1::ListModelsRequest(), &models);
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_GE(models.models_size(), 4);
  stranger->Signal(SIGTERM);
  EXPECT_EQ(stranger->Wait(20), 0) << stranger->Stderr();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

}  // namespace
}  // namespace fca::e2e::remote_worker
