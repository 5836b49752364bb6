#include "client/client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/text_safety.h"
#include "common/status_macros.h"

namespace fca::client {

namespace v1 = ::fca::v1;

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode both number the canonical codes
  // of google.rpc.Code, so the cast is exact.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

namespace {

// CheckStringFieldsAreUtf8 below `message`, whose field names are prefixed
// with `path`.
absl::Status CheckUtf8Below(const google::protobuf::Message& message, const std::string& path) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = path + field->name();
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      if (field->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            field->is_repeated()
                ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                : reflection->GetStringReference(message, field, &scratch);
        if (!IsValidUtf8(value)) {
          return UsageError(absl::StrFormat(
              "%s is not valid UTF-8 text; text sent to the server must be UTF-8", name));
        }
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Message& child =
            field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                 : reflection->GetMessage(message, field);
        FCA_RETURN_IF_ERROR(CheckUtf8Below(child, name + "."));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStringFieldsAreUtf8(const google::protobuf::Message& message) {
  return CheckUtf8Below(message, "");
}

absl::Status FollowPages(
    const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch_page) {
  std::string token;
  while (true) {
    FCA_ASSIGN_OR_RETURN(std::string next, fetch_page(token));
    if (next.empty()) return absl::OkStatus();
    if (next == token) {
      return absl::InternalError("server returned the same page token twice; stopping");
    }
    token = std::move(next);
  }
}

namespace {

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  // gRPC's own reconnect backoff grows to 120 s; a server restarted during a
  // watch would then sit unnoticed for most of the CLI's 30 s retry budget.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 4000);
  // A watch of a queued job may see no event for hours; keepalive pings
  // detect a silently dropped connection (the stream then fails UNAVAILABLE
  // and is resumed). Every 6 min stays above the 5 min minimum a default
  // gRPC server accepts, and pings continue without data frames.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 6 * 60 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A Tokenize reply for the server's largest text (1 MiB, up to one id per
  // byte at <= 5 bytes each) exceeds gRPC's default 4 MiB.
  args.SetMaxReceiveMessageSize(16 << 20);
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditClient>> AuditClient::Open(const ClientOptions& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("empty server address");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.ca_cert_pem;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  auto channel = grpc::CreateCustomChannel(options.address, credentials, ChannelArgs());
  if (channel == nullptr) {
    return absl::InternalError(absl::StrFormat("cannot create a channel to %s", options.address));
  }
  return std::make_unique<AuditClient>(std::move(channel), options);
}

AuditClient::AuditClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(std::move(options)), stub_(v1::AuditService::NewStub(std::move(channel))) {}

std::unique_ptr<grpc::ClientContext> AuditClient::NewContext(bool unary) const {
  auto context = std::make_unique<grpc::ClientContext>();
  // Plain metadata rather than CallCredentials: gRPC refuses to send call
  // credentials over an insecure channel, and a lab server on localhost
  // often runs without TLS.
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.token);
  }
  if (unary && options_.timeout > absl::ZeroDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  }
  return context;
}

absl::StatusOr<v1::ListModelsResponse> AuditClient::ListModels() {
  auto context = NewContext(/*unary=*/true);
  v1::ListModelsResponse response;
  FCA_RETURN_IF_ERROR(
      ToAbslStatus(stub_->ListModels(context.get(), v1::ListModelsRequest(), &response)));
  return response;
}

absl::StatusOr<v1::UploadDatasetResponse> AuditClient::UploadDataset(
    const v1::UploadDatasetHeader& header, std::istream& data) {
  // A client stream may take long for a big file: no deadline.
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(header));
  auto context = NewContext(/*unary=*/false);
  v1::UploadDatasetResponse response;
  auto writer = stub_->UploadDataset(context.get(), &response);
  v1::UploadDatasetRequest request;
  *request.mutable_header() = header;
  bool open = writer->Write(request);
  std::string buffer(kUploadChunkBytes, '\0');
  while (open && data) {
    data.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = data.gcount();
    if (got <= 0) break;
    request.set_chunk(buffer.data(), static_cast<size_t>(got));
    // A false Write means the server already ended the call (e.g. it
    // rejected the header); Finish below reports why.
    open = writer->Write(request);
  }
  if (data.bad()) {
    context->TryCancel();
    writer->Finish().IgnoreError();
    return absl::DataLossError("read error on the local dataset file");
  }
  if (open) writer->WritesDone();
  FCA_RETURN_IF_ERROR(ToAbslStatus(writer->Finish()));
  return response;
}

absl::StatusOr<std::vector<v1::Dataset>> AuditClient::ListDatasets(const std::string& project) {
  v1::ListDatasetsRequest request;
  request.set_project(project);
  request.set_page_size(kListPageSize);
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  std::vector<v1::Dataset> datasets;
  do {  // every page, each its own call (and deadline)
    auto context = NewContext(/*unary=*/true);
    v1::ListDatasetsResponse response;
    FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListDatasets(context.get(), request, &response)));
    datasets.insert(datasets.end(), response.datasets().begin(), response.datasets().end());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return datasets;
}

absl::StatusOr<v1::Job> AuditClient::SubmitAudit(const v1::AuditSpec& spec,
                                                 const std::string& project) {
  v1::SubmitAuditRequest request;
  *request.mutable_spec() = spec;
  request.set_project(project);
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::SubmitAuditResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->SubmitAudit(context.get(), request, &response)));
  return response.job();
}

absl::Status AuditClient::WatchJob(
    int64_t job_id, int64_t after_seq,
    const std::function<bool(const v1::WatchJobResponse&)>& on_event) {
  auto context = NewContext(/*unary=*/false);
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  auto reader = stub_->WatchJob(context.get(), request);
  v1::WatchJobResponse response;
  while (reader->Read(&response)) {
    if (!on_event(response)) {
      // The caller has what it needs; the CANCELLED that Finish now reports
      // is our own doing, not the server's.
      context->TryCancel();
      reader->Finish().IgnoreError();
      return absl::OkStatus();
    }
  }
  return ToAbslStatus(reader->Finish());
}

absl::StatusOr<v1::Job> AuditClient::GetJob(int64_t job_id) {
  auto context = NewContext(/*unary=*/true);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->GetJob(context.get(), request, &response)));
  return response.job();
}

absl::StatusOr<v1::ListJobsResponse> AuditClient::ListJobs(const v1::ListJobsRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListJobsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListJobs(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::Job> AuditClient::CancelJob(int64_t job_id) {
  auto context = NewContext(/*unary=*/true);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::CancelJobResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->CancelJob(context.get(), request, &response)));
  return response.job();
}

absl::Status AuditClient::DeleteJob(int64_t job_id) {
  auto context = NewContext(/*unary=*/true);
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  v1::DeleteJobResponse response;
  return ToAbslStatus(stub_->DeleteJob(context.get(), request, &response));
}

absl::StatusOr<int64_t> AuditClient::DeleteDataset(const std::string& name,
                                                   const std::string& project) {
  auto context = NewContext(/*unary=*/true);
  v1::DeleteDatasetRequest request;
  request.set_name(name);
  request.set_project(project);
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  v1::DeleteDatasetResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->DeleteDataset(context.get(), request, &response)));
  return response.bytes_freed();
}

absl::StatusOr<v1::QueryResultsResponse> AuditClient::QueryResults(
    const v1::QueryResultsRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::QueryResultsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->QueryResults(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::TokenizeResponse> AuditClient::Tokenize(const v1::TokenizeRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::TokenizeResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->Tokenize(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::GetReportResponse> AuditClient::GetReport(int64_t job_id) {
  auto context = NewContext(/*unary=*/true);
  v1::GetReportRequest request;
  request.set_job_id(job_id);
  v1::GetReportResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->GetReport(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::CompareJobsResponse> AuditClient::CompareJobs(
    const v1::CompareJobsRequest& request) {
  auto context = NewContext(/*unary=*/true);
  v1::CompareJobsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->CompareJobs(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::PoolJobsResponse> AuditClient::PoolJobs(const v1::PoolJobsRequest& request) {
  auto context = NewContext(/*unary=*/true);
  v1::PoolJobsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->PoolJobs(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::GetServerInfoResponse> AuditClient::GetServerInfo() {
  auto context = NewContext(/*unary=*/true);
  v1::GetServerInfoResponse response;
  FCA_RETURN_IF_ERROR(
      ToAbslStatus(stub_->GetServerInfo(context.get(), v1::GetServerInfoRequest(), &response)));
  return response;
}

absl::StatusOr<v1::GetQueueResponse> AuditClient::GetQueue() {
  auto context = NewContext(/*unary=*/true);
  v1::GetQueueResponse response;
  FCA_RETURN_IF_ERROR(
      ToAbslStatus(stub_->GetQueue(context.get(), v1::GetQueueRequest(), &response)));
  return response;
}

absl::StatusOr<v1::ListJobWindowsResponse> AuditClient::ListJobWindows(
    const v1::ListJobWindowsRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListJobWindowsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListJobWindows(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::BackupDatabaseResponse> AuditClient::BackupDatabase(const std::string& name) {
  v1::BackupDatabaseRequest request;
  request.set_name(name);
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/false);
  v1::BackupDatabaseResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->BackupDatabase(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::CreateApiKeyResponse> AuditClient::CreateApiKey(
    const v1::CreateApiKeyRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::CreateApiKeyResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->CreateApiKey(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::ListApiKeysResponse> AuditClient::ListApiKeys(
    const v1::ListApiKeysRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListApiKeysResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListApiKeys(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::RevokeApiKeyResponse> AuditClient::RevokeApiKey(int64_t id) {
  v1::RevokeApiKeyRequest request;
  request.set_id(id);
  auto context = NewContext(/*unary=*/true);
  v1::RevokeApiKeyResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->RevokeApiKey(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::RotateApiKeyResponse> AuditClient::RotateApiKey(
    const v1::RotateApiKeyRequest& request) {
  auto context = NewContext(/*unary=*/true);
  v1::RotateApiKeyResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->RotateApiKey(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::QueryAuditLogResponse> AuditClient::QueryAuditLog(
    const v1::QueryAuditLogRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::QueryAuditLogResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->QueryAuditLog(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::AddWebhookResponse> AuditClient::AddWebhook(
    const v1::AddWebhookRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::AddWebhookResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->AddWebhook(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::ListWebhooksResponse> AuditClient::ListWebhooks(
    const v1::ListWebhooksRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListWebhooksResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListWebhooks(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::RemoveWebhookResponse> AuditClient::RemoveWebhook(
    const v1::RemoveWebhookRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::RemoveWebhookResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->RemoveWebhook(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::ListWebhookDeliveriesResponse> AuditClient::ListWebhookDeliveries(
    const v1::ListWebhookDeliveriesRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListWebhookDeliveriesResponse response;
  FCA_RETURN_IF_ERROR(
      ToAbslStatus(stub_->ListWebhookDeliveries(context.get(), request, &response)));
  return response;
}

absl::Status AuditClient::ExportCoefficients(
    const v1::ExportCoefficientsRequest& request,
    const std::function<absl::Status(const v1::CoefficientsHeader&)>& on_header,
    const std::function<absl::Status(const std::string&)>& on_chunk) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/false);
  auto reader = stub_->ExportCoefficients(context.get(), request);
  v1::ExportCoefficientsResponse response;
  bool seen_header = false;
  absl::Status local = absl::OkStatus();
  while (local.ok() && reader->Read(&response)) {
    if (response.has_header() && !seen_header) {
      seen_header = true;
      local = on_header(response.header());
    } else if (response.has_chunk() && seen_header) {
      local = on_chunk(response.chunk());
    } else {
      local = absl::InternalError("malformed export stream: expected one header, then chunks");
    }
  }
  if (!local.ok()) {
    // Stop the server from sending the rest; its status no longer matters.
    context->TryCancel();
    reader->Finish().IgnoreError();
    return local;
  }
  FCA_RETURN_IF_ERROR(ToAbslStatus(reader->Finish()));
  if (!seen_header) {
    return absl::InternalError("export stream ended without a header");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CreateProjectResponse> AuditClient::CreateProject(
    const v1::CreateProjectRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::CreateProjectResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->CreateProject(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::ListProjectsResponse> AuditClient::ListProjects(
    const v1::ListProjectsRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::ListProjectsResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->ListProjects(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::GetProjectResponse> AuditClient::GetProject(
    const v1::GetProjectRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::GetProjectResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->GetProject(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::GetRetentionResponse> AuditClient::GetRetention(
    const v1::GetRetentionRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::GetRetentionResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->GetRetention(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::SetRetentionResponse> AuditClient::SetRetention(
    const v1::SetRetentionRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::SetRetentionResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->SetRetention(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::AddProjectMemberResponse> AuditClient::AddProjectMember(
    const v1::AddProjectMemberRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::AddProjectMemberResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->AddProjectMember(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::RemoveProjectMemberResponse> AuditClient::RemoveProjectMember(
    const v1::RemoveProjectMemberRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::RemoveProjectMemberResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->RemoveProjectMember(context.get(), request, &response)));
  return response;
}

absl::StatusOr<v1::DeleteProjectResponse> AuditClient::DeleteProject(
    const v1::DeleteProjectRequest& request) {
  FCA_RETURN_IF_ERROR(CheckStringFieldsAreUtf8(request));
  auto context = NewContext(/*unary=*/true);
  v1::DeleteProjectResponse response;
  FCA_RETURN_IF_ERROR(ToAbslStatus(stub_->DeleteProject(context.get(), request, &response)));
  return response;
}

}  // namespace fca::client
