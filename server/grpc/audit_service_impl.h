// fca.v1.AuditService over gRPC: each method authenticates, calls the core
// once and converts the status once. The logic lives in server/core.
#ifndef FCA_SERVER_GRPC_AUDIT_SERVICE_IMPL_H_
#define FCA_SERVER_GRPC_AUDIT_SERVICE_IMPL_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/server.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <memory>
#include <vector>

#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "server/core/service.h"
#include "server/grpc/auth.h"

namespace fca::grpc_server {

grpc::Status ToGrpc(const absl::Status& status);

// The name grpc.health.v1 clients ask about for this service.
inline constexpr char kAuditServiceName[] = "fca.v1.AuditService";

// Sets the health status of the whole server ("") and of
// fca.v1.AuditService in gRPC's default health service (which
// grpc::EnableDefaultHealthCheckService(true) before building `server`
// provides; without it this does nothing).
void SetServing(grpc::Server& server, bool serving);

// The interceptors every server of AuditServiceImpl installs
// (grpc::ServerBuilder::experimental().SetInterceptorCreators). A request
// that gRPC cannot parse into its message, e.g. a proto3 `string` field
// holding invalid UTF-8, is refused by gRPC before any handler runs, as
// INTERNAL with an empty message; the interceptor turns that into
// INVALID_ARGUMENT with a message, and logs the peer and the method. The
// last one counts every call and its latency by method and status code
// (fca_grpc_requests_total, fca_grpc_request_duration_seconds).
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerInterceptors();

class AuditServiceImpl final : public v1::AuditService::Service {
 public:
  AuditServiceImpl(core::AuditServiceCore* core, auth::Authenticator auth)
      : core_(core), auth_(std::move(auth)) {}

  // Ends open WatchJob streams (server shutdown).
  void Shutdown() { shutting_down_ = true; }

  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* resp) override;
  grpc::Status UploadDataset(grpc::ServerContext* ctx,
                             grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                             v1::UploadDatasetResponse* resp) override;
  grpc::Status ListDatasets(grpc::ServerContext* ctx, const v1::ListDatasetsRequest* req,
                            v1::ListDatasetsResponse* resp) override;
  grpc::Status SubmitAudit(grpc::ServerContext* ctx, const v1::SubmitAuditRequest* req,
                           v1::SubmitAuditResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::WatchJobResponse>* writer) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::GetJobResponse* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override;
  grpc::Status DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override;
  grpc::Status DeleteDataset(grpc::ServerContext* ctx, const v1::DeleteDatasetRequest* req,
                             v1::DeleteDatasetResponse* resp) override;
  grpc::Status QueryResults(grpc::ServerContext* ctx, const v1::QueryResultsRequest* req,
                            v1::QueryResultsResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                        v1::TokenizeResponse* resp) override;
  grpc::Status ExportCoefficients(
      grpc::ServerContext* ctx, const v1::ExportCoefficientsRequest* req,
      grpc::ServerWriter<v1::ExportCoefficientsResponse>* writer) override;
  grpc::Status GetReport(grpc::ServerContext* ctx, const v1::GetReportRequest* req,
                         v1::GetReportResponse* resp) override;
  grpc::Status CompareJobs(grpc::ServerContext* ctx, const v1::CompareJobsRequest* req,
                           v1::CompareJobsResponse* resp) override;
  grpc::Status PoolJobs(grpc::ServerContext* ctx, const v1::PoolJobsRequest* req,
                        v1::PoolJobsResponse* resp) override;
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest* req,
                             v1::GetServerInfoResponse* resp) override;
  grpc::Status GetQueue(grpc::ServerContext* ctx, const v1::GetQueueRequest* req,
                        v1::GetQueueResponse* resp) override;
  grpc::Status ListJobWindows(grpc::ServerContext* ctx, const v1::ListJobWindowsRequest* req,
                              v1::ListJobWindowsResponse* resp) override;
  grpc::Status BackupDatabase(grpc::ServerContext* ctx, const v1::BackupDatabaseRequest* req,
                              v1::BackupDatabaseResponse* resp) override;
  grpc::Status CreateApiKey(grpc::ServerContext* ctx, const v1::CreateApiKeyRequest* req,
                            v1::CreateApiKeyResponse* resp) override;
  grpc::Status ListApiKeys(grpc::ServerContext* ctx, const v1::ListApiKeysRequest* req,
                           v1::ListApiKeysResponse* resp) override;
  grpc::Status RevokeApiKey(grpc::ServerContext* ctx, const v1::RevokeApiKeyRequest* req,
                            v1::RevokeApiKeyResponse* resp) override;
  grpc::Status RotateApiKey(grpc::ServerContext* ctx, const v1::RotateApiKeyRequest* req,
                            v1::RotateApiKeyResponse* resp) override;
  grpc::Status QueryAuditLog(grpc::ServerContext* ctx, const v1::QueryAuditLogRequest* req,
                             v1::QueryAuditLogResponse* resp) override;
  grpc::Status AddWebhook(grpc::ServerContext* ctx, const v1::AddWebhookRequest* req,
                          v1::AddWebhookResponse* resp) override;
  grpc::Status ListWebhooks(grpc::ServerContext* ctx, const v1::ListWebhooksRequest* req,
                            v1::ListWebhooksResponse* resp) override;
  grpc::Status RemoveWebhook(grpc::ServerContext* ctx, const v1::RemoveWebhookRequest* req,
                             v1::RemoveWebhookResponse* resp) override;
  grpc::Status ListWebhookDeliveries(grpc::ServerContext* ctx,
                                     const v1::ListWebhookDeliveriesRequest* req,
                                     v1::ListWebhookDeliveriesResponse* resp) override;
  grpc::Status CreateProject(grpc::ServerContext* ctx, const v1::CreateProjectRequest* req,
                             v1::CreateProjectResponse* resp) override;
  grpc::Status ListProjects(grpc::ServerContext* ctx, const v1::ListProjectsRequest* req,
                            v1::ListProjectsResponse* resp) override;
  grpc::Status GetProject(grpc::ServerContext* ctx, const v1::GetProjectRequest* req,
                          v1::GetProjectResponse* resp) override;
  grpc::Status AddProjectMember(grpc::ServerContext* ctx, const v1::AddProjectMemberRequest* req,
                                v1::AddProjectMemberResponse* resp) override;
  grpc::Status RemoveProjectMember(grpc::ServerContext* ctx,
                                   const v1::RemoveProjectMemberRequest* req,
                                   v1::RemoveProjectMemberResponse* resp) override;
  grpc::Status DeleteProject(grpc::ServerContext* ctx, const v1::DeleteProjectRequest* req,
                             v1::DeleteProjectResponse* resp) override;
  grpc::Status GetRetention(grpc::ServerContext* ctx, const v1::GetRetentionRequest* req,
                            v1::GetRetentionResponse* resp) override;
  grpc::Status SetRetention(grpc::ServerContext* ctx, const v1::SetRetentionRequest* req,
                            v1::SetRetentionResponse* resp) override;

 private:
  core::AuditServiceCore* core_;
  auth::Authenticator auth_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_AUDIT_SERVICE_IMPL_H_
