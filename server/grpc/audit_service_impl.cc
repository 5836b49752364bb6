#include "server/grpc/audit_service_impl.h"

#include <glog/logging.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "server/auth/stream_key_check.h"
#include "server/grpc/auth.h"

namespace fca::grpc_server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

// See ServerInterceptors() in the header. gRPC deserializes the request of
// a unary or server-streaming call before the handler and, when that
// fails, sends Status(INTERNAL, "") without calling it; the interceptor
// sees the failure as a received message that is null.
class UnparsableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsableRequestInterceptor(ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsable_ = true;
    }
    if (unparsable_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status sent = methods->GetSendStatus();
      if (sent.error_code() == grpc::StatusCode::INTERNAL && sent.error_message().empty()) {
        LOG(WARNING) << "unparsable " << info_->method() << " request from "
                     << info_->server_context()->peer();
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "the request is not a valid fca.v1 message (text fields must be valid UTF-8)"));
      }
    }
    methods->Proceed();
  }

 private:
  ServerRpcInfo* info_;
  bool unparsable_ = false;
};

class UnparsableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    // A client stream's end also arrives as a null message, so only calls
    // with exactly one request message are judged.
    if (info->type() != ServerRpcInfo::Type::UNARY &&
        info->type() != ServerRpcInfo::Type::SERVER_STREAMING) {
      return nullptr;
    }
    return new UnparsableRequestInterceptor(info);
  }
};

// Counts every call (fca_grpc_requests_total) and its latency
// (fca_grpc_request_duration_seconds: for a stream, its whole life) by
// method and status code. Observed when the call ends; a call whose status
// was never sent (the client went away) counts as CANCELLED.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(ServerRpcInfo* info)
      : method_(info->method() == nullptr ? "" : info->method()),
        start_(std::chrono::steady_clock::now()) {}
  ~MetricsInterceptor() override {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(code_));
    GrpcRequests().WithLabels({method_, code}).Increment();
    GrpcLatency().WithLabels({method_, code}).Observe(seconds);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = static_cast<int>(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

  static metrics::Family<metrics::Counter>& GrpcRequests() {
    static auto& f = metrics::Registry::Default().AddCounter(
        "fca_grpc_requests_total", "gRPC calls served, by method and status code.",
        {"method", "code"});
    return f;
  }
  static metrics::Family<metrics::Histogram>& GrpcLatency() {
    static auto& f = metrics::Registry::Default().AddHistogram(
        "fca_grpc_request_duration_seconds",
        "Latency of gRPC calls (streams: their whole life), by method and status code.",
        {"method", "code"}, metrics::LatencyBuckets());
    return f;
  }

 private:
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  int code_ = static_cast<int>(grpc::StatusCode::CANCELLED);
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  MetricsInterceptorFactory() {
    // Both families are exposed from the start, with no series yet.
    MetricsInterceptor::GrpcRequests();
    MetricsInterceptor::GrpcLatency();
  }
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    return new MetricsInterceptor(info);
  }
};

// The caller of an AuditService method. A worker key runs tasks and
// nothing else: it lists, reads and submits nothing of any user's.
absl::StatusOr<core::Caller> AuthenticateUser(const auth::Authenticator& authenticator,
                                              const grpc::ServerContext& ctx) {
  FCA_ASSIGN_OR_RETURN(core::Caller caller, Authenticate(authenticator, ctx));
  FCA_RETURN_IF_ERROR(auth::MayCallAuditService(caller));
  return caller;
}

// Unary shim: authenticate, call, copy the response, convert the status.
template <typename Resp, typename Fn>
grpc::Status Unary(const auth::Authenticator& authenticator, grpc::ServerContext* ctx, Resp* resp,
                   Fn&& fn) {
  auto caller = AuthenticateUser(authenticator, *ctx);
  if (!caller.ok()) return ToGrpc(caller.status());
  auto result = fn(*caller);
  if (!result.ok()) return ToGrpc(result.status());
  *resp = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<UnparsableRequestInterceptorFactory>());
  // Last: send hooks run in order, so it sees the status the others leave.
  out.push_back(std::make_unique<MetricsInterceptorFactory>());
  return out;
}

void SetServing(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // "" and every name set so far
  health->SetServingStatus(kAuditServiceName, serving);
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kUnknown) {
    LOG(ERROR) << status;
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status AuditServiceImpl::ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->ListModels(c); });
}

grpc::Status AuditServiceImpl::UploadDataset(grpc::ServerContext* ctx,
                                             grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                                             v1::UploadDatasetResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) {
    return core_->UploadDataset(c,
                                [&](v1::UploadDatasetRequest* part) { return reader->Read(part); });
  });
}

grpc::Status AuditServiceImpl::ListDatasets(grpc::ServerContext* ctx,
                                            const v1::ListDatasetsRequest* req,
                                            v1::ListDatasetsResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListDatasets(c, *req); });
}

grpc::Status AuditServiceImpl::SubmitAudit(grpc::ServerContext* ctx,
                                           const v1::SubmitAuditRequest* req,
                                           v1::SubmitAuditResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->SubmitAudit(c, *req); });
}

grpc::Status AuditServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                        grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  auto caller = AuthenticateUser(auth_, *ctx);
  if (!caller.ok()) return ToGrpc(caller.status());
  auth::StreamKeyCheck key(&auth_, Authorization(*ctx), ctx->peer());
  return ToGrpc(core_->WatchJob(
      *caller, *req, [&](const v1::WatchJobResponse& r) { return writer->Write(r); },
      [&] { return ctx->IsCancelled() || shutting_down_.load(); },
      [&](bool at_event) { return key.Check(at_event); }));
}

grpc::Status AuditServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                      v1::GetJobResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->GetJob(c, *req); });
}

grpc::Status AuditServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                        v1::ListJobsResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->ListJobs(c, *req); });
}

grpc::Status AuditServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                         v1::CancelJobResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->CancelJob(c, *req); });
}

grpc::Status AuditServiceImpl::DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                                         v1::DeleteJobResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->DeleteJob(c, *req); });
}

grpc::Status AuditServiceImpl::DeleteDataset(grpc::ServerContext* ctx,
                                             const v1::DeleteDatasetRequest* req,
                                             v1::DeleteDatasetResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->DeleteDataset(c, *req); });
}

grpc::Status AuditServiceImpl::QueryResults(grpc::ServerContext* ctx,
                                            const v1::QueryResultsRequest* req,
                                            v1::QueryResultsResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->QueryResults(c, *req); });
}

grpc::Status AuditServiceImpl::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                        v1::TokenizeResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->Tokenize(c, *req); });
}

grpc::Status AuditServiceImpl::ExportCoefficients(
    grpc::ServerContext* ctx, const v1::ExportCoefficientsRequest* req,
    grpc::ServerWriter<v1::ExportCoefficientsResponse>* writer) {
  auto caller = AuthenticateUser(auth_, *ctx);
  if (!caller.ok()) return ToGrpc(caller.status());
  return ToGrpc(core_->ExportCoefficients(
      *caller, *req, [&](const v1::ExportCoefficientsResponse& r) { return writer->Write(r); }));
}

grpc::Status AuditServiceImpl::GetReport(grpc::ServerContext* ctx, const v1::GetReportRequest* req,
                                         v1::GetReportResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->GetReport(c, *req); });
}

grpc::Status AuditServiceImpl::CompareJobs(grpc::ServerContext* ctx,
                                           const v1::CompareJobsRequest* req,
                                           v1::CompareJobsResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->CompareJobs(c, *req); });
}

grpc::Status AuditServiceImpl::PoolJobs(grpc::ServerContext* ctx, const v1::PoolJobsRequest* req,
                                        v1::PoolJobsResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->PoolJobs(c, *req); });
}

grpc::Status AuditServiceImpl::GetServerInfo(grpc::ServerContext* ctx,
                                             const v1::GetServerInfoRequest*,
                                             v1::GetServerInfoResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->GetServerInfo(c); });
}

grpc::Status AuditServiceImpl::GetQueue(grpc::ServerContext* ctx, const v1::GetQueueRequest*,
                                        v1::GetQueueResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->GetQueue(c); });
}

grpc::Status AuditServiceImpl::ListJobWindows(grpc::ServerContext* ctx,
                                              const v1::ListJobWindowsRequest* req,
                                              v1::ListJobWindowsResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListJobWindows(c, *req); });
}

grpc::Status AuditServiceImpl::BackupDatabase(grpc::ServerContext* ctx,
                                              const v1::BackupDatabaseRequest* req,
                                              v1::BackupDatabaseResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->BackupDatabase(c, *req); });
}

grpc::Status AuditServiceImpl::CreateApiKey(grpc::ServerContext* ctx,
                                            const v1::CreateApiKeyRequest* req,
                                            v1::CreateApiKeyResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->CreateApiKey(c, *req); });
}

grpc::Status AuditServiceImpl::ListApiKeys(grpc::ServerContext* ctx,
                                           const v1::ListApiKeysRequest* req,
                                           v1::ListApiKeysResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListApiKeys(c, *req); });
}

grpc::Status AuditServiceImpl::RevokeApiKey(grpc::ServerContext* ctx,
                                            const v1::RevokeApiKeyRequest* req,
                                            v1::RevokeApiKeyResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->RevokeApiKey(c, *req); });
}

grpc::Status AuditServiceImpl::RotateApiKey(grpc::ServerContext* ctx,
                                            const v1::RotateApiKeyRequest* req,
                                            v1::RotateApiKeyResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->RotateApiKey(c, *req); });
}

grpc::Status AuditServiceImpl::QueryAuditLog(grpc::ServerContext* ctx,
                                             const v1::QueryAuditLogRequest* req,
                                             v1::QueryAuditLogResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->QueryAuditLog(c, *req); });
}

grpc::Status AuditServiceImpl::AddWebhook(grpc::ServerContext* ctx,
                                          const v1::AddWebhookRequest* req,
                                          v1::AddWebhookResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->AddWebhook(c, *req); });
}

grpc::Status AuditServiceImpl::ListWebhooks(grpc::ServerContext* ctx,
                                            const v1::ListWebhooksRequest* req,
                                            v1::ListWebhooksResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListWebhooks(c, *req); });
}

grpc::Status AuditServiceImpl::RemoveWebhook(grpc::ServerContext* ctx,
                                             const v1::RemoveWebhookRequest* req,
                                             v1::RemoveWebhookResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->RemoveWebhook(c, *req); });
}

grpc::Status AuditServiceImpl::ListWebhookDeliveries(grpc::ServerContext* ctx,
                                                     const v1::ListWebhookDeliveriesRequest* req,
                                                     v1::ListWebhookDeliveriesResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListWebhookDeliveries(c, *req); });
}

grpc::Status AuditServiceImpl::CreateProject(grpc::ServerContext* ctx,
                                             const v1::CreateProjectRequest* req,
                                             v1::CreateProjectResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->CreateProject(c, *req); });
}

grpc::Status AuditServiceImpl::ListProjects(grpc::ServerContext* ctx,
                                            const v1::ListProjectsRequest* req,
                                            v1::ListProjectsResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->ListProjects(c, *req); });
}

grpc::Status AuditServiceImpl::GetProject(grpc::ServerContext* ctx,
                                          const v1::GetProjectRequest* req,
                                          v1::GetProjectResponse* resp) {
  return Unary(auth_, ctx, resp, [&](const core::Caller& c) { return core_->GetProject(c, *req); });
}

grpc::Status AuditServiceImpl::AddProjectMember(grpc::ServerContext* ctx,
                                                const v1::AddProjectMemberRequest* req,
                                                v1::AddProjectMemberResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->AddProjectMember(c, *req); });
}

grpc::Status AuditServiceImpl::RemoveProjectMember(grpc::ServerContext* ctx,
                                                   const v1::RemoveProjectMemberRequest* req,
                                                   v1::RemoveProjectMemberResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->RemoveProjectMember(c, *req); });
}

grpc::Status AuditServiceImpl::DeleteProject(grpc::ServerContext* ctx,
                                             const v1::DeleteProjectRequest* req,
                                             v1::DeleteProjectResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->DeleteProject(c, *req); });
}

grpc::Status AuditServiceImpl::GetRetention(grpc::ServerContext* ctx,
                                            const v1::GetRetentionRequest* req,
                                            v1::GetRetentionResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->GetRetention(c, *req); });
}

grpc::Status AuditServiceImpl::SetRetention(grpc::ServerContext* ctx,
                                            const v1::SetRetentionRequest* req,
                                            v1::SetRetentionResponse* resp) {
  return Unary(auth_, ctx, resp,
               [&](const core::Caller& c) { return core_->SetRetention(c, *req); });
}

}  // namespace fca::grpc_server
