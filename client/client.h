// AuditClient: a thin, blocking wrapper around the fca.v1.AuditService stub.
//
// One method per RPC. Every method returns absl::Status / absl::StatusOr with
// the server's status code and message unchanged (gRPC and Abseil share the
// code numbering; the conversion lives in ToAbslStatus), or a usage error
// for a request holding text that is not UTF-8 (nothing is sent then). Unary calls carry the
// configured deadline; streaming calls have none, because a watched job may
// run for hours. Every call carries `authorization: Bearer <token>` metadata
// when a token is configured.
//
// Thread-safety: an AuditClient may be used from several threads at once
// (the gRPC stub is thread-safe and the client holds no other mutable state).
#ifndef FCA_CLIENT_CLIENT_H_
#define FCA_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

namespace fca::client {

// The one place a grpc::Status becomes an absl::Status.
[[nodiscard]] absl::Status ToAbslStatus(const grpc::Status& status);

// Usage error naming the first `string` field of `message` (nested
// messages and repeated fields included; `bytes` fields excluded) that is
// not valid UTF-8. Protobuf serializes such a field anyway, logging an
// error, and the server cannot parse the request; every AuditClient call
// checks its request with this first and sends nothing when it fails.
[[nodiscard]] absl::Status CheckStringFieldsAreUtf8(const google::protobuf::Message& message);

// Largest chunk the client sends; the contract allows at most 1 MiB.
inline constexpr size_t kUploadChunkBytes = 1 << 20;
// Rows asked per page where the client reads every page (ListDatasets).
inline constexpr int kListPageSize = 1000;

struct ClientOptions {
  std::string address = "127.0.0.1:7400";  // host:port
  std::string token;                       // empty: send no authorization
  bool use_tls = false;
  // PEM root certificates for TLS; empty means the system roots.
  std::string ca_cert_pem;
  // Deadline of every unary call. Streams have no deadline.
  absl::Duration timeout = absl::Seconds(30);
};

// Drives a paged listing: calls `fetch_page(token)` with "" and then with each
// returned next_page_token until one is empty. A server that hands back the
// token it was given would loop forever, so that is INTERNAL.
[[nodiscard]] absl::Status FollowPages(
    const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch_page);

class AuditClient {
 public:
  // Creates the channel (it connects lazily, on the first call; an
  // unreachable server shows up there as UNAVAILABLE).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AuditClient>> Open(
      const ClientOptions& options);

  // For tests and embedding: wraps an existing channel.
  AuditClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options);

  // The servable models and the folders the server cannot serve, with why.
  [[nodiscard]] absl::StatusOr<fca::v1::ListModelsResponse> ListModels();

  // Sends `header`, then `data` in chunks of kUploadChunkBytes until EOF.
  // `header.size_bytes` and `header.sha256` must already describe the bytes.
  [[nodiscard]] absl::StatusOr<fca::v1::UploadDatasetResponse> UploadDataset(
      const fca::v1::UploadDatasetHeader& header, std::istream& data);

  // `project` "": the caller's personal project (an admin's: every
  // project). Every page, newest first.
  [[nodiscard]] absl::StatusOr<std::vector<fca::v1::Dataset>> ListDatasets(
      const std::string& project = "");

  // `project` "": the caller's personal project.
  [[nodiscard]] absl::StatusOr<fca::v1::Job> SubmitAudit(const fca::v1::AuditSpec& spec,
                                                         const std::string& project = "");

  // Streams the job's events after `after_seq` to `on_event` until the server
  // ends the stream (its final status is returned) or `on_event` returns
  // false (the call is cancelled and OK returned). Blocks.
  [[nodiscard]] absl::Status WatchJob(
      int64_t job_id, int64_t after_seq,
      const std::function<bool(const fca::v1::WatchJobResponse&)>& on_event);

  [[nodiscard]] absl::StatusOr<fca::v1::Job> GetJob(int64_t job_id);

  // One page; see FollowPages.
  [[nodiscard]] absl::StatusOr<fca::v1::ListJobsResponse> ListJobs(
      const fca::v1::ListJobsRequest& request);

  [[nodiscard]] absl::StatusOr<fca::v1::Job> CancelJob(int64_t job_id);
  [[nodiscard]] absl::Status DeleteJob(int64_t job_id);
  // Returns the bytes the server freed.
  [[nodiscard]] absl::StatusOr<int64_t> DeleteDataset(const std::string& name,
                                                      const std::string& project = "");

  // Projects and their members (one unary call each).
  [[nodiscard]] absl::StatusOr<fca::v1::CreateProjectResponse> CreateProject(
      const fca::v1::CreateProjectRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::ListProjectsResponse> ListProjects(
      const fca::v1::ListProjectsRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::GetProjectResponse> GetProject(
      const fca::v1::GetProjectRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::GetRetentionResponse> GetRetention(
      const fca::v1::GetRetentionRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::SetRetentionResponse> SetRetention(
      const fca::v1::SetRetentionRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::AddProjectMemberResponse> AddProjectMember(
      const fca::v1::AddProjectMemberRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::RemoveProjectMemberResponse> RemoveProjectMember(
      const fca::v1::RemoveProjectMemberRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::DeleteProjectResponse> DeleteProject(
      const fca::v1::DeleteProjectRequest& request);

  // One page; see FollowPages.
  [[nodiscard]] absl::StatusOr<fca::v1::QueryResultsResponse> QueryResults(
      const fca::v1::QueryResultsRequest& request);

  [[nodiscard]] absl::StatusOr<fca::v1::TokenizeResponse> Tokenize(
      const fca::v1::TokenizeRequest& request);

  // The job's report, computed by the server (GetReport).
  [[nodiscard]] absl::StatusOr<fca::v1::GetReportResponse> GetReport(int64_t job_id);
  [[nodiscard]] absl::StatusOr<fca::v1::CompareJobsResponse> CompareJobs(
      const fca::v1::CompareJobsRequest& request);
  // Several finished jobs as one report (PoolJobs).
  [[nodiscard]] absl::StatusOr<fca::v1::PoolJobsResponse> PoolJobs(
      const fca::v1::PoolJobsRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::GetServerInfoResponse> GetServerInfo();
  // The queue as the caller may see it.
  [[nodiscard]] absl::StatusOr<fca::v1::GetQueueResponse> GetQueue();
  [[nodiscard]] absl::StatusOr<fca::v1::ListJobWindowsResponse> ListJobWindows(
      const fca::v1::ListJobWindowsRequest& request);
  // Admins only: a checked copy of the server's database, `name` in its
  // --backup_dir. No deadline: a large database takes minutes.
  [[nodiscard]] absl::StatusOr<fca::v1::BackupDatabaseResponse> BackupDatabase(
      const std::string& name);
  // Webhooks of a project (its managers only).
  [[nodiscard]] absl::StatusOr<fca::v1::AddWebhookResponse> AddWebhook(
      const fca::v1::AddWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::ListWebhooksResponse> ListWebhooks(
      const fca::v1::ListWebhooksRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::RemoveWebhookResponse> RemoveWebhook(
      const fca::v1::RemoveWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::ListWebhookDeliveriesResponse> ListWebhookDeliveries(
      const fca::v1::ListWebhookDeliveriesRequest& request);

  // API keys (the new key's secret is in the create and rotate responses)
  // and, for admins, the audit log.
  [[nodiscard]] absl::StatusOr<fca::v1::CreateApiKeyResponse> CreateApiKey(
      const fca::v1::CreateApiKeyRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::ListApiKeysResponse> ListApiKeys(
      const fca::v1::ListApiKeysRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::RevokeApiKeyResponse> RevokeApiKey(int64_t id);
  [[nodiscard]] absl::StatusOr<fca::v1::RotateApiKeyResponse> RotateApiKey(
      const fca::v1::RotateApiKeyRequest& request);
  [[nodiscard]] absl::StatusOr<fca::v1::QueryAuditLogResponse> QueryAuditLog(
      const fca::v1::QueryAuditLogRequest& request);

  // Calls `on_header` once with the first message, then `on_chunk` for every
  // chunk in order. A callback's error cancels the stream and is returned.
  [[nodiscard]] absl::Status ExportCoefficients(
      const fca::v1::ExportCoefficientsRequest& request,
      const std::function<absl::Status(const fca::v1::CoefficientsHeader&)>& on_header,
      const std::function<absl::Status(const std::string&)>& on_chunk);

 private:
  // A context with the authorization metadata and, for unary calls, the
  // deadline.
  std::unique_ptr<grpc::ClientContext> NewContext(bool unary) const;

  ClientOptions options_;
  std::unique_ptr<fca::v1::AuditService::Stub> stub_;
};

}  // namespace fca::client

#endif  // FCA_CLIENT_CLIENT_H_
