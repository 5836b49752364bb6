#include "server/grpc/worker_service_impl.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/audit/auditor.h"
#include "server/grpc/audit_service_impl.h"
#include "server/jobs/mapping.h"
#include "server/runtime/task_messages.h"

namespace fca::grpc_server {
namespace {

constexpr size_t kMaxNameBytes = 128;

// Worker names travel into job events and the log: a short, plain token.
absl::Status CheckWorkerName(const std::string& name) {
  const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
  if (name.empty() || name.size() > kMaxNameBytes || !plain) {
    return absl::InvalidArgumentError(
        "worker must be 1-128 chars of [A-Za-z0-9._:-] (e.g. host:pid)");
  }
  return absl::OkStatus();
}

// Free text the log shows (device, host, version): printable ASCII only,
// so no escape sequence reaches an operator's terminal.
absl::Status CheckLabel(const std::string& text, const char* field) {
  const bool printable =
      std::all_of(text.begin(), text.end(), [](char c) { return c >= ' ' && c <= '~'; });
  if (text.size() > kMaxNameBytes || !printable) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be at most 128 printable ASCII characters", field));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyField(const std::string& value, const char* field) {
  if (value.empty() || value.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("key.%s must be 1-128 bytes", field));
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::CoefficientCacheKey> FromProto(const v1::CoefficientKey& key) {
  FCA_RETURN_IF_ERROR(CheckKeyField(key.weights_sha256(), "weights_sha256"));
  FCA_RETURN_IF_ERROR(CheckKeyField(key.window_hash(), "window_hash"));
  FCA_RETURN_IF_ERROR(CheckKeyField(key.dtype(), "dtype"));
  FCA_RETURN_IF_ERROR(CheckKeyField(key.device(), "device"));
  return engine::CoefficientCacheKey{key.weights_sha256(), key.window_hash(), key.dtype(),
                                     key.device()};
}

// An Outcome as a status in `out`; INVALID_ARGUMENT for a code outside the
// canonical ones or an oversized message. (Not a StatusOr<Status>: its
// error and its value would be the same type.)
absl::Status FromProto(const v1::Outcome& outcome, size_t max_bytes, absl::Status* out) {
  if (outcome.code() < 0 || outcome.code() > 16) {
    return absl::InvalidArgumentError("outcome.code must be a canonical code, 0..16");
  }
  if (outcome.message().size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("outcome.message must be at most %d bytes", max_bytes));
  }
  *out = absl::Status(static_cast<absl::StatusCode>(outcome.code()), outcome.message());
  return absl::OkStatus();
}

// ClaimTask's and RenewLease's loaded_models, for the coordinator (which
// drops names it does not hold); a longer list than any worker sends is
// refused, so a client cannot make the server copy an unbounded one.
absl::StatusOr<std::vector<std::string>> LoadedModels(
    const google::protobuf::RepeatedPtrField<std::string>& names) {
  if (names.size() > runtime::kMaxLoadedModels) {
    return absl::InvalidArgumentError(absl::StrFormat("loaded_models lists %d names; at most %d",
                                                      names.size(), runtime::kMaxLoadedModels));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

// A unary call: the body's status, converted once.
template <typename Fn>
grpc::Status Call(Fn&& fn) {
  return ToGrpc(fn());
}

}  // namespace

absl::StatusOr<std::string> WorkerServiceImpl::Holder(const grpc::ServerContext& ctx,
                                                      const std::string& worker) {
  FCA_ASSIGN_OR_RETURN(const core::Caller caller, Authenticate(auth_, ctx));
  FCA_RETURN_IF_ERROR(auth::MayCallWorkerService(caller));
  FCA_RETURN_IF_ERROR(CheckWorkerName(worker));
  // The key's user names the holder too: one key's workers cannot act for
  // another key's tasks (a name holds no '@', so no two (name, user) pairs
  // make one holder), and no remote holder starts with the server's own
  // kLocalWorkerPrefix (a name holds no '/').
  return absl::StrCat(worker, "@", caller.user);
}

absl::StatusOr<storage::TaskClaim> WorkerServiceImpl::HeldLease(const std::string& holder,
                                                                const v1::TaskLease& lease) {
  if (lease.task_id() <= 0 || lease.lease_seq() <= 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no lease on task %d (seq %d): ids start at 1", lease.task_id(), lease.lease_seq()));
  }
  absl::StatusOr<storage::TaskClaim> claim = coordinator_->CheckLease(runtime::FromProto(lease));
  if (absl::IsNotFound(claim.status())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("no lease on task %d: there is no such task", lease.task_id()));
  }
  if (!claim.ok()) return claim.status();
  if (claim->task.worker != holder) {
    return absl::FailedPreconditionError(
        absl::StrFormat("task %d is not held by worker %s", lease.task_id(), holder));
  }
  return *std::move(claim);
}

absl::StatusOr<storage::TaskClaim> WorkerServiceImpl::Check(const grpc::ServerContext& ctx,
                                                            const std::string& worker,
                                                            const v1::TaskLease& lease) {
  FCA_ASSIGN_OR_RETURN(const std::string holder, Holder(ctx, worker));
  return HeldLease(holder, lease);
}

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx,
                                               const v1::RegisterWorkerRequest* req,
                                               v1::RegisterWorkerResponse* resp) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const std::string holder, Holder(*ctx, req->worker()));
    FCA_RETURN_IF_ERROR(CheckLabel(req->device(), "device"));
    FCA_RETURN_IF_ERROR(CheckLabel(req->host(), "host"));
    FCA_RETURN_IF_ERROR(CheckLabel(req->version(), "version"));
    const std::chrono::milliseconds lease = coordinator_->options().lease;
    LOG(INFO) << "worker " << holder << " registered (device " << req->device() << ", host "
              << req->host() << ", version " << req->version() << ")";
    coordinator_->WorkerSeen(holder);
    resp->set_holder(holder);
    resp->set_lease_ms(lease.count());
    // A cancel reaches a remote task within about one beat.
    resp->set_heartbeat_ms(std::max<int64_t>(1, std::min<int64_t>(lease.count() / 4, 2000)));
    resp->set_coordinator_version(engine::EngineVersion());
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::ClaimTask(grpc::ServerContext* ctx, const v1::ClaimTaskRequest* req,
                                          v1::ClaimTaskResponse* resp) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const std::string holder, Holder(*ctx, req->worker()));
    if (req->task_id() < 0) return absl::InvalidArgumentError("task_id must be >= 0");
    FCA_ASSIGN_OR_RETURN(const std::vector<std::string> loaded, LoadedModels(req->loaded_models()));
    coordinator_->WorkerLoaded(holder, loaded);
    FCA_RETURN_IF_ERROR(coordinator_->ReleaseLost(holder));
    FCA_ASSIGN_OR_RETURN(std::optional<runtime::TaskAssignment> task,
                         coordinator_->ClaimChecked(holder, req->task_id(),
                                                    /*verify_weights=*/true));
    if (!task) return absl::OkStatus();
    *resp->mutable_assignment() = runtime::ToProto(*task);
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::RenewLease(grpc::ServerContext* ctx,
                                           const v1::RenewLeaseRequest* req,
                                           v1::RenewLeaseResponse* resp) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const std::string holder, Holder(*ctx, req->worker()));
    FCA_ASSIGN_OR_RETURN(const std::vector<std::string> loaded, LoadedModels(req->loaded_models()));
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, HeldLease(holder, req->lease()));
    coordinator_->WorkerLoaded(holder, loaded);
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    FCA_ASSIGN_OR_RETURN(const bool stop, coordinator_->Renew(lease));
    resp->set_stop(stop);
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::ReportProgress(grpc::ServerContext* ctx,
                                               const v1::ReportProgressRequest* req,
                                               v1::ReportProgressResponse*) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    const v1::Progress& p = req->progress();
    // The job's progress is the mean of its tasks' fractions.
    if (!std::isfinite(p.fraction()) || p.fraction() < 0 || p.fraction() > 1) {
      return absl::InvalidArgumentError("progress.fraction must be in [0, 1]");
    }
    if (!std::isfinite(p.eta_seconds()) || p.eta_seconds() < 0) {
      return absl::InvalidArgumentError("progress.eta_seconds must be finite and at least 0");
    }
    if (p.phase().size() > kMaxNameBytes || p.model().size() > kMaxNameBytes) {
      return absl::InvalidArgumentError("progress.phase and .model must be at most 128 bytes");
    }
    engine::AuditProgress progress;
    progress.phase = p.phase();
    progress.model = p.model();
    progress.model_index = p.model_index();
    progress.model_count = p.model_count();
    progress.windows_done = p.windows_done();
    progress.windows_total = p.windows_total();
    progress.fraction = p.fraction();
    progress.phase_seconds_left = p.eta_seconds();
    return coordinator_->ReportProgress(lease, progress);
  });
}

grpc::Status WorkerServiceImpl::ReportNote(grpc::ServerContext* ctx,
                                           const v1::ReportNoteRequest* req,
                                           v1::ReportNoteResponse*) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    if (req->text().size() > limits_.max_note_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("text must be at most %d bytes", limits_.max_note_bytes));
    }
    return coordinator_->ReportNote(lease, req->text());
  });
}

grpc::Status WorkerServiceImpl::ReportRows(grpc::ServerContext* ctx,
                                           const v1::ReportRowsRequest* req,
                                           v1::ReportRowsResponse*) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    if (req->rows_size() > limits_.max_rows) {
      return absl::InvalidArgumentError(
          absl::StrFormat("at most %d rows per call", limits_.max_rows));
    }
    if (req->weights_sha256().empty() || req->weights_sha256().size() > kMaxNameBytes) {
      return absl::InvalidArgumentError("weights_sha256 must be 1-128 bytes");
    }
    // Rows name the weights they came from: they must be the coordinator's
    // (the worker checked its own at claim; this keeps a stale or lying
    // worker's numbers out of the store).
    FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const v1::AuditSpec> spec,
                         coordinator_->JobSpec(claim.job));
    const bool own_model = req->model() == claim.task.model ||
                           (!spec->dense_twin().empty() && req->model() == spec->dense_twin());
    // (Any other model is refused by the coordinator below.)
    if (runtime::ModelRepository* models = coordinator_->options().models;
        models != nullptr && own_model) {
      absl::StatusOr<std::string> mine = models->WeightsHash(req->model());
      if (mine.ok() && *mine != req->weights_sha256()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the weights of model '%s' that produced these rows differ from the coordinator's",
            req->model()));
      }
    }
    std::vector<engine::ResultRow> rows;
    rows.reserve(static_cast<size_t>(req->rows_size()));
    for (const v1::Result& r : req->rows()) {
      if (!r.model().empty() && r.model() != req->model()) {
        return absl::InvalidArgumentError("every row's model must be empty or the request's");
      }
      if (r.intervention().empty() || r.intervention().size() > kMaxNameBytes ||
          r.metric().empty() || r.metric().size() > kMaxNameBytes) {
        return absl::InvalidArgumentError("row intervention and metric must be 1-128 bytes");
      }
      engine::ResultRow row = runtime::RowFromProto(r);
      row.model = req->model();
      rows.push_back(std::move(row));
    }
    return coordinator_->ReportRows(lease, req->model(), req->weights_sha256(), rows);
  });
}

grpc::Status WorkerServiceImpl::FinishTask(grpc::ServerContext* ctx,
                                           const v1::FinishTaskRequest* req,
                                           v1::FinishTaskResponse*) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    absl::Status outcome;
    FCA_RETURN_IF_ERROR(FromProto(req->outcome(), limits_.max_outcome_bytes, &outcome));
    if (req->provenance().ByteSizeLong() > limits_.max_provenance_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("provenance must be at most %d bytes", limits_.max_provenance_bytes));
    }
    return coordinator_->Finish(lease, outcome, req->provenance());
  });
}

grpc::Status WorkerServiceImpl::ReleaseTask(grpc::ServerContext* ctx,
                                            const v1::ReleaseTaskRequest* req,
                                            v1::ReleaseTaskResponse*) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    absl::Status reason;
    FCA_RETURN_IF_ERROR(FromProto(req->reason(), limits_.max_outcome_bytes, &reason));
    if (reason.ok()) return absl::InvalidArgumentError("a release needs a reason (a code > 0)");
    if (req->refused()) return coordinator_->Refuse(lease, reason);
    return coordinator_->Release(lease, reason, req->refund());
  });
}

grpc::Status WorkerServiceImpl::ReadDataset(grpc::ServerContext* ctx,
                                            const v1::ReadDatasetRequest* req,
                                            grpc::ServerWriter<v1::ReadDatasetResponse>* writer) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    FCA_ASSIGN_OR_RETURN(const runtime::DatasetBytes data,
                         coordinator_->ReadDataset(lease, req->calibration()));
    v1::ReadDatasetResponse part;
    v1::DatasetHeader* header = part.mutable_header();
    header->set_name(data.name);
    header->set_kind(data.kind);
    header->set_sha256(data.sha256);
    header->set_size_bytes(static_cast<int64_t>(data.bytes.size()));
    if (!writer->Write(part)) return absl::CancelledError("the worker went away");
    for (size_t at = 0; at < data.bytes.size(); at += kChunkBytes) {
      part.set_chunk(data.bytes.substr(at, kChunkBytes));
      if (!writer->Write(part)) return absl::CancelledError("the worker went away");
    }
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::GetCoefficients(
    grpc::ServerContext* ctx, const v1::GetCoefficientsRequest* req,
    grpc::ServerWriter<v1::GetCoefficientsResponse>* writer) {
  return Call([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim, Check(*ctx, req->worker(), req->lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    FCA_ASSIGN_OR_RETURN(const engine::CoefficientCacheKey key, FromProto(req->key()));
    const std::optional<std::string> blob = coordinator_->GetCoefficients(lease, key);
    v1::GetCoefficientsResponse part;
    part.mutable_header()->set_found(blob.has_value());
    part.mutable_header()->set_size_bytes(blob ? static_cast<int64_t>(blob->size()) : 0);
    if (!writer->Write(part)) return absl::CancelledError("the worker went away");
    if (!blob) return absl::OkStatus();
    for (size_t at = 0; at < blob->size(); at += kChunkBytes) {
      part.set_chunk(blob->substr(at, kChunkBytes));
      if (!writer->Write(part)) return absl::CancelledError("the worker went away");
    }
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::PutCoefficients(
    grpc::ServerContext* ctx, grpc::ServerReader<v1::PutCoefficientsRequest>* reader,
    v1::PutCoefficientsResponse*) {
  return Call([&]() -> absl::Status {
    v1::PutCoefficientsRequest part;
    if (!reader->Read(&part)) return absl::InvalidArgumentError("an empty stream: no header");
    if (!part.has_header()) {
      return absl::InvalidArgumentError("the first message must be the header");
    }
    const v1::PutCoefficientsHeader header = part.header();
    // The lease first: nothing is buffered for a caller that holds none.
    FCA_ASSIGN_OR_RETURN(const storage::TaskClaim claim,
                         Check(*ctx, header.worker(), header.lease()));
    const runtime::Lease lease = jobs::LeaseOf(claim.task);
    FCA_ASSIGN_OR_RETURN(const engine::CoefficientCacheKey key, FromProto(header.key()));
    if (header.size_bytes() < 0) return absl::InvalidArgumentError("size_bytes must be >= 0");
    if (header.size_bytes() > limits_.max_coefficient_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "a coefficient entry holds at most %d bytes", limits_.max_coefficient_bytes));
    }
    std::string bytes;
    while (reader->Read(&part)) {
      if (!part.has_chunk()) {
        return absl::InvalidArgumentError("only the first message may be a header");
      }
      if (static_cast<int64_t>(part.chunk().size()) > limits_.max_chunk_bytes) {
        return absl::InvalidArgumentError(
            absl::StrFormat("a chunk holds at most %d bytes", limits_.max_chunk_bytes));
      }
      if (static_cast<int64_t>(bytes.size() + part.chunk().size()) > header.size_bytes()) {
        return absl::InvalidArgumentError("the chunks carry more than size_bytes");
      }
      bytes += part.chunk();
    }
    if (ctx->IsCancelled()) return absl::CancelledError("the worker went away");
    if (static_cast<int64_t>(bytes.size()) != header.size_bytes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the chunks carry %d bytes, the header announced %d", bytes.size(), header.size_bytes()));
    }
    coordinator_->PutCoefficients(lease, key, bytes);
    return absl::OkStatus();
  });
}

}  // namespace fca::grpc_server
