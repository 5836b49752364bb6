#include "server/grpc/remote_broker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "server/runtime/messages.h"
#include "server/runtime/task_messages.h"

namespace fca::grpc_server {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes the broker sends per chunk, and the largest dataset it accepts.
constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int64_t kMaxDatasetBytes = int64_t{1} << 40;
// The service's limits (WorkerServiceImpl::Limits): larger is refused, so
// text is cut to them (utf8::MarkIllFormedBytes, which also makes it the
// valid UTF-8 a proto3 string field must be).
constexpr size_t kMaxNoteBytes = 4096;
constexpr size_t kMaxOutcomeBytes = 16384;
constexpr int64_t kMaxCoefficientBytes = int64_t{1} << 30;

absl::Status ToAbsl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // Both number the canonical codes of google.rpc.Code.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetOutcome(const absl::Status& status, v1::Outcome* out) {
  out->set_code(static_cast<int>(status.code()));
  const absl::string_view message = status.message();
  out->set_message(utf8::MarkIllFormedBytes({message.data(), message.size()}, kMaxOutcomeBytes));
}

v1::CoefficientKey ToProto(const engine::CoefficientCacheKey& key) {
  v1::CoefficientKey out;
  out.set_weights_sha256(key.weights_sha256);
  out.set_window_hash(key.window_hash);
  out.set_dtype(key.dtype);
  out.set_device(key.device);
  return out;
}

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  // Reconnect quickly after a coordinator restart: gRPC's own backoff grows
  // to 120 s, past any lease.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A chunk is 1 MiB; a claim carries a spec.
  args.SetMaxReceiveMessageSize(8 << 20);
  return args;
}

// A stream that broke the protocol: the call is cancelled, the error kept.
grpc::Status ProtocolError(grpc::ClientContext* context, const std::string& what) {
  context->TryCancel();
  return grpc::Status(grpc::StatusCode::DATA_LOSS,
                      "the coordinator's stream is malformed: " + what);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteBroker>> RemoteBroker::Create(const Options& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no coordinator address");
  if (options.worker.empty()) return absl::InvalidArgumentError("no worker name");
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, credentials, ChannelArgs());
  if (channel == nullptr) {
    return absl::InternalError("cannot create a channel to " + options.address);
  }
  return std::make_unique<RemoteBroker>(std::move(channel), options);
}

RemoteBroker::RemoteBroker(std::shared_ptr<grpc::Channel> channel, Options options)
    : options_(std::move(options)),
      stub_(v1::WorkerService::NewStub(std::move(channel))),
      retry_window_ms_(options_.retry_window.count()) {}

void RemoteBroker::StopRetrying() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void RemoteBroker::Prepare(grpc::ClientContext* context, std::chrono::milliseconds timeout) const {
  // Plain metadata rather than CallCredentials, as the CLI: gRPC refuses to
  // send call credentials over an insecure channel.
  if (!options_.api_key.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.api_key);
  }
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

template <typename Call>
absl::Status RemoteBroker::WithRetries(std::chrono::milliseconds timeout, bool held, Call&& call) {
  const Clock::time_point start = Clock::now();
  std::chrono::milliseconds backoff = options_.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    Prepare(&context, timeout);
    const grpc::Status status = call(&context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return ToAbsl(status);
    const bool within_window =
        held && !stopping_ &&
        Clock::now() + backoff - start < std::chrono::milliseconds(retry_window_ms_.load());
    if (attempt >= options_.min_attempts && !within_window) {
      return absl::UnavailableError(absl::StrFormat("coordinator %s unreachable (%d tries): %s",
                                                    options_.address, attempt,
                                                    status.error_message()));
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](std::atomic<bool>* stopping) { return stopping->load(); }, &stopping_),
          absl::FromChrono(backoff));
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::StatusOr<v1::RegisterWorkerResponse> RemoteBroker::Register(const std::string& device,
                                                                  const std::string& host,
                                                                  const std::string& version) {
  v1::RegisterWorkerRequest request;
  request.set_worker(options_.worker);
  request.set_device(device);
  request.set_host(utf8::MarkIllFormedBytes(host, 128));
  request.set_version(version);
  v1::RegisterWorkerResponse response;
  FCA_RETURN_IF_ERROR(
      WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
        return stub_->RegisterWorker(context, request, &response);
      }));
  if (response.lease_ms() <= 0 || response.heartbeat_ms() <= 0) {
    return absl::InternalError("the coordinator sent no lease terms");
  }
  retry_window_ms_ = response.lease_ms();
  return response;
}

absl::StatusOr<std::optional<runtime::TaskAssignment>> RemoteBroker::Claim(
    const std::string& worker, int64_t task_id) {
  if (worker != options_.worker) {
    return absl::InvalidArgumentError("a RemoteBroker claims for its own worker only");
  }
  v1::ClaimTaskRequest request;
  request.set_worker(worker);
  request.set_task_id(task_id);
  AddLoadedModels(request.mutable_loaded_models());
  v1::ClaimTaskResponse response;
  // Not retried for long: the worker polls again anyway.
  FCA_RETURN_IF_ERROR(WithRetries(
      options_.call_timeout, /*held=*/false,
      [&](grpc::ClientContext* context) { return stub_->ClaimTask(context, request, &response); }));
  if (!response.has_assignment()) return std::optional<runtime::TaskAssignment>();
  const v1::TaskAssignment& a = response.assignment();
  if (a.lease_ms() <= 0 || a.lease().task_id() <= 0) {
    return absl::InternalError("the coordinator sent a claim without a lease");
  }
  return std::optional<runtime::TaskAssignment>(runtime::FromProto(a));
}

void RemoteBroker::AddLoadedModels(google::protobuf::RepeatedPtrField<std::string>* out) const {
  if (!options_.loaded_models) return;
  const std::vector<std::string> names = options_.loaded_models();
  const size_t sent = std::min(names.size(), static_cast<size_t>(runtime::kMaxLoadedModels));
  out->Add(names.begin(), names.begin() + sent);
}

absl::StatusOr<bool> RemoteBroker::Renew(const runtime::Lease& lease) {
  v1::RenewLeaseRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  AddLoadedModels(request.mutable_loaded_models());
  v1::RenewLeaseResponse response;
  FCA_RETURN_IF_ERROR(
      WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
        return stub_->RenewLease(context, request, &response);
      }));
  return response.stop();
}

absl::Status RemoteBroker::ReportProgress(const runtime::Lease& lease,
                                          const engine::AuditProgress& p) {
  v1::ReportProgressRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  v1::Progress* out = request.mutable_progress();
  out->set_phase(utf8::MarkIllFormedBytes(p.phase, 128));
  out->set_model(utf8::MarkIllFormedBytes(p.model, 128));
  out->set_model_index(p.model_index);
  out->set_model_count(p.model_count);
  out->set_windows_done(p.windows_done);
  out->set_windows_total(p.windows_total);
  out->set_fraction(std::clamp(p.fraction, 0.0, 1.0));
  // From a worker, eta_seconds is the phase's own estimate (see
  // WorkerService.ReportProgress).
  if (std::isfinite(p.phase_seconds_left) && p.phase_seconds_left > 0) {
    out->set_eta_seconds(p.phase_seconds_left);
  }
  v1::ReportProgressResponse response;
  // Progress is best effort: one try (a later report supersedes it).
  grpc::ClientContext context;
  Prepare(&context, options_.call_timeout);
  return ToAbsl(stub_->ReportProgress(&context, request, &response));
}

absl::Status RemoteBroker::ReportNote(const runtime::Lease& lease, const std::string& text) {
  v1::ReportNoteRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  request.set_text(utf8::MarkIllFormedBytes(text, kMaxNoteBytes));
  v1::ReportNoteResponse response;
  return WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
    return stub_->ReportNote(context, request, &response);
  });
}

absl::Status RemoteBroker::ReportRows(const runtime::Lease& lease, const std::string& model,
                                      const std::string& weights_sha256,
                                      const std::vector<engine::ResultRow>& rows) {
  v1::ReportRowsRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  request.set_model(model);
  request.set_weights_sha256(weights_sha256);
  for (const engine::ResultRow& r : rows) {
    v1::Result* out = request.add_rows();
    *out = runtime::RowToProto(r);
    if (r.model == model) out->clear_model();
  }
  v1::ReportRowsResponse response;
  // Rows are stored once, so a retry after a lost reply is harmless.
  return WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
    return stub_->ReportRows(context, request, &response);
  });
}

absl::Status RemoteBroker::Finish(const runtime::Lease& lease, const absl::Status& outcome,
                                  const v1::TaskProvenance& provenance) {
  v1::FinishTaskRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  SetOutcome(outcome, request.mutable_outcome());
  *request.mutable_provenance() = provenance;
  v1::FinishTaskResponse response;
  return WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
    return stub_->FinishTask(context, request, &response);
  });
}

absl::Status RemoteBroker::Release(const runtime::Lease& lease, const absl::Status& reason,
                                   bool refund) {
  return SendRelease(lease, reason, refund, /*refused=*/false);
}

absl::Status RemoteBroker::Refuse(const runtime::Lease& lease, const absl::Status& reason) {
  return SendRelease(lease, reason, /*refund=*/false, /*refused=*/true);
}

absl::Status RemoteBroker::SendRelease(const runtime::Lease& lease, const absl::Status& reason,
                                       bool refund, bool refused) {
  v1::ReleaseTaskRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  SetOutcome(reason.ok() ? absl::UnknownError("released") : reason, request.mutable_reason());
  request.set_refund(refund);
  request.set_refused(refused);
  v1::ReleaseTaskResponse response;
  return WithRetries(options_.call_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
    return stub_->ReleaseTask(context, request, &response);
  });
}

absl::StatusOr<runtime::DatasetBytes> RemoteBroker::ReadDataset(const runtime::Lease& lease,
                                                                bool calibration) {
  v1::ReadDatasetRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  request.set_calibration(calibration);
  runtime::DatasetBytes data;
  FCA_RETURN_IF_ERROR(
      WithRetries(options_.stream_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
        data = runtime::DatasetBytes();
        bool header = false;
        int64_t size = 0;
        std::unique_ptr<grpc::ClientReader<v1::ReadDatasetResponse>> reader =
            stub_->ReadDataset(context, request);
        v1::ReadDatasetResponse part;
        grpc::Status broken;
        while (broken.ok() && reader->Read(&part)) {
          if (part.has_header()) {
            size = part.header().size_bytes();
            if (header || size < 0 || size > kMaxDatasetBytes) {
              broken = ProtocolError(context, "a second header, or a bad size");
              break;
            }
            header = true;
            data.name = part.header().name();
            data.kind = part.header().kind();
            data.sha256 = part.header().sha256();
            data.bytes.reserve(static_cast<size_t>(std::min<int64_t>(size, int64_t{256} << 20)));
          } else if (!header ||
                     static_cast<int64_t>(data.bytes.size() + part.chunk().size()) > size) {
            broken = ProtocolError(context, "chunks before the header or past its size");
          } else {
            data.bytes += part.chunk();
          }
        }
        const grpc::Status finished = reader->Finish();
        if (!broken.ok()) return broken;
        if (!finished.ok()) return finished;
        if (!header || static_cast<int64_t>(data.bytes.size()) != size) {
          return grpc::Status(grpc::StatusCode::DATA_LOSS,
                              "the coordinator's dataset stream ended early");
        }
        return grpc::Status::OK;
      }));
  return data;
}

void RemoteBroker::LogCacheError(const char* what, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  // A broken cache fails every window the same way: a few lines suffice.
  if (++cache_errors_logged_ > 3) return;
  LOG(WARNING) << "worker " << options_.worker << ": " << what << ": " << status
               << (cache_errors_logged_ == 3 ? " (further cache errors are not logged)" : "");
}

std::optional<std::string> RemoteBroker::GetCoefficients(const runtime::Lease& lease,
                                                         const engine::CoefficientCacheKey& key) {
  v1::GetCoefficientsRequest request;
  request.set_worker(options_.worker);
  *request.mutable_lease() = runtime::ToProto(lease);
  *request.mutable_key() = ToProto(key);
  std::optional<std::string> blob;
  const absl::Status status =
      WithRetries(options_.stream_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
        blob.reset();
        bool header = false;
        int64_t size = 0;
        std::unique_ptr<grpc::ClientReader<v1::GetCoefficientsResponse>> reader =
            stub_->GetCoefficients(context, request);
        v1::GetCoefficientsResponse part;
        grpc::Status broken;
        while (broken.ok() && reader->Read(&part)) {
          if (part.has_header()) {
            size = part.header().size_bytes();
            if (header || size < 0 || size > kMaxCoefficientBytes) {
              broken = ProtocolError(context, "a second header, or a bad size");
              break;
            }
            header = true;
            if (part.header().found()) blob.emplace().reserve(static_cast<size_t>(size));
          } else if (!blob || static_cast<int64_t>(blob->size() + part.chunk().size()) > size) {
            broken = ProtocolError(context, "chunks without an entry or past its size");
          } else {
            *blob += part.chunk();
          }
        }
        const grpc::Status finished = reader->Finish();
        if (!broken.ok()) return broken;
        if (!finished.ok()) return finished;
        if (!header || (blob && static_cast<int64_t>(blob->size()) != size)) {
          return grpc::Status(grpc::StatusCode::DATA_LOSS,
                              "the coordinator's cache stream ended early");
        }
        return grpc::Status::OK;
      });
  if (!status.ok()) {
    LogCacheError("cannot read the coefficient cache", status);
    return std::nullopt;
  }
  return blob;
}

void RemoteBroker::PutCoefficients(const runtime::Lease& lease,
                                   const engine::CoefficientCacheKey& key,
                                   const std::string& bytes) {
  if (static_cast<int64_t>(bytes.size()) > kMaxCoefficientBytes) return;  // the service's limit
  v1::PutCoefficientsRequest header;
  v1::PutCoefficientsHeader* h = header.mutable_header();
  h->set_worker(options_.worker);
  *h->mutable_lease() = runtime::ToProto(lease);
  *h->mutable_key() = ToProto(key);
  h->set_size_bytes(static_cast<int64_t>(bytes.size()));
  const absl::Status status =
      WithRetries(options_.stream_timeout, /*held=*/true, [&](grpc::ClientContext* context) {
        v1::PutCoefficientsResponse response;
        std::unique_ptr<grpc::ClientWriter<v1::PutCoefficientsRequest>> writer =
            stub_->PutCoefficients(context, &response);
        // A false Write: the coordinator ended the call; Finish says why.
        bool open = writer->Write(header);
        v1::PutCoefficientsRequest part;
        for (size_t at = 0; open && at < bytes.size(); at += kChunkBytes) {
          part.set_chunk(bytes.substr(at, kChunkBytes));
          open = writer->Write(part);
        }
        if (open) writer->WritesDone();
        return writer->Finish();
      });
  // A failed put only costs a later miss.
  if (!status.ok()) LogCacheError("cannot write the coefficient cache", status);
}

}  // namespace fca::grpc_server
