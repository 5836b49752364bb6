// fca.v1.WorkerService over gRPC: the worker protocol (runtime::TaskBroker)
// for fca-worker processes, over the coordinator.
//
// Every call authenticates with the server's auth::Authenticator; only keys of
// role "worker" (and admins) get in, others are PERMISSION_DENIED. A worker
// holds leases under "<its name>@<its key's user>", so one key's workers
// cannot act for another key's tasks. Every call after ClaimTask checks that
// the lease is the task's current one and that the caller holds it, else
// FAILED_PRECONDITION (an unknown task too: the caller holds no lease on
// it). Sizes are bounded (Limits); no client input can crash the server.
#ifndef FCA_SERVER_GRPC_WORKER_SERVICE_IMPL_H_
#define FCA_SERVER_GRPC_WORKER_SERVICE_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/fca/v1/worker_service.grpc.pb.h"
#include "server/grpc/auth.h"
#include "server/jobs/coordinator.h"

namespace fca::grpc_server {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  struct Limits {
    // PutCoefficients: the largest entry (RESOURCE_EXHAUSTED above) and
    // chunk (INVALID_ARGUMENT above).
    int64_t max_coefficient_bytes = int64_t{1} << 30;
    int64_t max_chunk_bytes = int64_t{1} << 20;
    int max_rows = 100000;                // ReportRows
    size_t max_note_bytes = 4096;         // ReportNote
    size_t max_outcome_bytes = 16384;     // FinishTask / ReleaseTask messages
    size_t max_provenance_bytes = 65536;  // FinishTask's provenance, serialized
  };
  // Chunks this service sends (ReadDataset, GetCoefficients).
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  WorkerServiceImpl(jobs::Coordinator* coordinator, auth::Authenticator auth)
      : WorkerServiceImpl(coordinator, std::move(auth), Limits()) {}
  WorkerServiceImpl(jobs::Coordinator* coordinator, auth::Authenticator auth, Limits limits)
      : coordinator_(coordinator), auth_(std::move(auth)), limits_(limits) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::Status ClaimTask(grpc::ServerContext* ctx, const v1::ClaimTaskRequest* req,
                         v1::ClaimTaskResponse* resp) override;
  grpc::Status RenewLease(grpc::ServerContext* ctx, const v1::RenewLeaseRequest* req,
                          v1::RenewLeaseResponse* resp) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* resp) override;
  grpc::Status ReportNote(grpc::ServerContext* ctx, const v1::ReportNoteRequest* req,
                          v1::ReportNoteResponse* resp) override;
  grpc::Status ReportRows(grpc::ServerContext* ctx, const v1::ReportRowsRequest* req,
                          v1::ReportRowsResponse* resp) override;
  grpc::Status FinishTask(grpc::ServerContext* ctx, const v1::FinishTaskRequest* req,
                          v1::FinishTaskResponse* resp) override;
  grpc::Status ReleaseTask(grpc::ServerContext* ctx, const v1::ReleaseTaskRequest* req,
                           v1::ReleaseTaskResponse* resp) override;
  grpc::Status ReadDataset(grpc::ServerContext* ctx, const v1::ReadDatasetRequest* req,
                           grpc::ServerWriter<v1::ReadDatasetResponse>* writer) override;
  grpc::Status GetCoefficients(grpc::ServerContext* ctx, const v1::GetCoefficientsRequest* req,
                               grpc::ServerWriter<v1::GetCoefficientsResponse>* writer) override;
  grpc::Status PutCoefficients(grpc::ServerContext* ctx,
                               grpc::ServerReader<v1::PutCoefficientsRequest>* reader,
                               v1::PutCoefficientsResponse* resp) override;

 private:
  // The holder name of an authenticated worker caller (see above);
  // PERMISSION_DENIED for a user key, INVALID_ARGUMENT for a bad name.
  [[nodiscard]] absl::StatusOr<std::string> Holder(const grpc::ServerContext& ctx,
                                                   const std::string& worker);
  // The task and its job, when `holder` holds the lease now;
  // FAILED_PRECONDITION otherwise.
  [[nodiscard]] absl::StatusOr<storage::TaskClaim> HeldLease(const std::string& holder,
                                                             const v1::TaskLease& lease);
  // Holder + HeldLease: the checks every call after a claim starts with.
  [[nodiscard]] absl::StatusOr<storage::TaskClaim> Check(const grpc::ServerContext& ctx,
                                                         const std::string& worker,
                                                         const v1::TaskLease& lease);

  jobs::Coordinator* coordinator_;
  auth::Authenticator auth_;
  const Limits limits_;
};

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_WORKER_SERVICE_IMPL_H_
