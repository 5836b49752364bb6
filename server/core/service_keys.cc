// AuditServiceCore's API key RPCs, its audit log query, and the recording
// of every state-changing call in the audit log (server/core/audit_log.h).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/core/service.h"
#include "server/runtime/messages.h"
#include "server/runtime/model_repository.h"

namespace fca::core {
namespace {

// Longest expiry a new key may be given (overflow guard, and a key meant to
// live for ever needs no expiry).
constexpr int64_t kMaxExpirySeconds = int64_t{100} * 365 * 24 * 3600;

const char* StateName(storage::ApiKeyState state) {
  switch (state) {
    case storage::ApiKeyState::kActive:
      return "active";
    case storage::ApiKeyState::kRevoked:
      return "revoked";
    case storage::ApiKeyState::kExpired:
      return "expired";
  }
  return "active";
}

v1::ApiKey ToProto(const storage::ApiKeyRecord& key) {
  v1::ApiKey out;
  out.set_id(key.id);
  out.set_prefix(key.prefix);
  out.set_user(key.user);
  out.set_role(key.role);
  out.set_created_by(key.created_by);
  runtime::ToTimestamp(key.created_at_us, out.mutable_created_at());
  if (key.expires_at_us != 0) runtime::ToTimestamp(key.expires_at_us, out.mutable_expires_at());
  if (key.revoked_at_us != 0) runtime::ToTimestamp(key.revoked_at_us, out.mutable_revoked_at());
  if (key.last_used_at_us != 0)
    runtime::ToTimestamp(key.last_used_at_us, out.mutable_last_used_at());
  out.set_last_peer(key.last_peer);
  out.set_replaced_by(key.replaced_by);
  out.set_state(StateName(key.state));
  return out;
}

v1::AuditLogEntry ToProto(const storage::AuditLogRow& row) {
  v1::AuditLogEntry out;
  out.set_id(row.id);
  runtime::ToTimestamp(row.at_us, out.mutable_time());
  out.set_user(row.user);
  out.set_key_id(row.key_id);
  out.set_peer(row.peer);
  out.set_action(row.action);
  out.set_object_kind(row.object_kind);
  out.set_object_id(row.object_id);
  out.set_outcome(row.outcome);
  out.set_detail(row.detail);
  return out;
}

// A time filter, when set; protobuf keeps nanos in [0, 1e9).
absl::StatusOr<int64_t> TimeFilter(bool set, const google::protobuf::Timestamp& t,
                                   const char* field) {
  if (!set) return 0;
  if (t.nanos() < 0 || t.nanos() >= 1000000000 || runtime::FromTimestamp(t) <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is not a valid time", field));
  }
  return runtime::FromTimestamp(t);
}

absl::Status CheckRole(const std::string& role) {
  if (role == "user" || role == "admin" || role == "worker") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("role '%s' is none of user, admin, worker", role.substr(0, 64)));
}

std::string KeyId(int64_t id) { return id > 0 ? absl::StrCat(id) : ""; }

// `result`'s status, for the audit log.
template <typename T>
absl::Status OutcomeOf(const absl::StatusOr<T>& result) {
  return result.status();
}

}  // namespace

void AuditServiceCore::Record(const Caller& caller, absl::string_view action,
                              const AuditObject& object, const absl::Status& outcome,
                              absl::string_view detail) {
  if (audit_log_ != nullptr) audit_log_->Record(caller, action, object, outcome, detail);
}

// ---- the state-changing calls, recorded

absl::StatusOr<v1::UploadDatasetResponse> AuditServiceCore::UploadDataset(
    const Caller& caller, const std::function<bool(v1::UploadDatasetRequest*)>& read) {
  DatasetUpload upload(caller, store_, limits_, &uploads_in_flight_);
  std::string name;
  const auto receive = [&]() -> absl::StatusOr<v1::UploadDatasetResponse> {
    v1::UploadDatasetRequest part;
    while (read(&part)) {
      if (part.has_header() && name.empty()) name = part.header().name();
      FCA_RETURN_IF_ERROR(part.has_header() ? upload.Start(part.header())
                                            : upload.Append(part.chunk()));
    }
    return upload.Finish();
  };
  absl::StatusOr<v1::UploadDatasetResponse> result = receive();
  Record(caller, audit_action::kDatasetUpload,
         {"dataset", result.ok() ? result->dataset().name() : name}, OutcomeOf(result),
         result.ok() ? absl::StrFormat("%d bytes, sha256 %s", result->dataset().size_bytes(),
                                       result->dataset().sha256())
                     : "");
  return result;
}

absl::StatusOr<v1::SubmitAuditResponse> AuditServiceCore::SubmitAudit(
    const Caller& caller, const v1::SubmitAuditRequest& request) {
  absl::StatusOr<v1::SubmitAuditResponse> result = SubmitAuditUnrecorded(caller, request);
  Record(caller, audit_action::kJobSubmit, {"job", result.ok() ? KeyId(result->job().id()) : ""},
         OutcomeOf(result));
  return result;
}

absl::StatusOr<v1::CancelJobResponse> AuditServiceCore::CancelJob(
    const Caller& caller, const v1::CancelJobRequest& request) {
  absl::StatusOr<v1::CancelJobResponse> result = CancelJobUnrecorded(caller, request);
  Record(caller, audit_action::kJobCancel, {"job", absl::StrCat(request.job_id())},
         OutcomeOf(result));
  return result;
}

absl::StatusOr<v1::DeleteJobResponse> AuditServiceCore::DeleteJob(
    const Caller& caller, const v1::DeleteJobRequest& request) {
  absl::StatusOr<v1::DeleteJobResponse> result = DeleteJobUnrecorded(caller, request);
  Record(caller, audit_action::kJobDelete, {"job", absl::StrCat(request.job_id())},
         OutcomeOf(result));
  return result;
}

absl::StatusOr<v1::DeleteDatasetResponse> AuditServiceCore::DeleteDataset(
    const Caller& caller, const v1::DeleteDatasetRequest& request) {
  absl::StatusOr<v1::DeleteDatasetResponse> result = DeleteDatasetUnrecorded(caller, request);
  const std::string project = request.project().empty() ? caller.user : request.project();
  Record(caller, audit_action::kDatasetDelete, {"dataset", request.name()}, OutcomeOf(result),
         absl::StrCat("project ", project));
  return result;
}

absl::StatusOr<v1::BackupDatabaseResponse> AuditServiceCore::BackupDatabase(
    const Caller& caller, const v1::BackupDatabaseRequest& request) {
  absl::StatusOr<v1::BackupDatabaseResponse> result = BackupDatabaseUnrecorded(caller, request);
  Record(caller, audit_action::kBackup, {"backup", request.name()}, OutcomeOf(result),
         result.ok() ? absl::StrFormat("%d bytes", result->bytes()) : "");
  return result;
}

// ---- API keys

absl::StatusOr<storage::ApiKeyRecord> AuditServiceCore::VisibleKey(const Caller& caller,
                                                                   int64_t id) {
  absl::StatusOr<storage::ApiKeyRecord> key = store_->GetApiKey(id);
  // Another user's key id is not disclosed: the same answer as no key.
  if (absl::IsNotFound(key.status()) || (key.ok() && !caller.admin && key->user != caller.user)) {
    return absl::NotFoundError(absl::StrFormat("no API key %d of yours", id));
  }
  return key;
}

absl::StatusOr<v1::CreateApiKeyResponse> AuditServiceCore::CreateApiKey(
    const Caller& caller, const v1::CreateApiKeyRequest& request) {
  const std::string user = request.user().empty() ? caller.user : request.user();
  const std::string role = request.role().empty() ? "user" : request.role();
  const auto create = [&]() -> absl::StatusOr<v1::CreateApiKeyResponse> {
    FCA_RETURN_IF_ERROR(ValidateUserName(user));
    FCA_RETURN_IF_ERROR(CheckRole(role));
    if (!caller.admin && (user != caller.user || role != "user")) {
      return absl::PermissionDeniedError(
          "only admins create keys for other users or with role admin or worker");
    }
    if (request.expires_in_seconds() < 0 || request.expires_in_seconds() > kMaxExpirySeconds) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expires_in_seconds must be in [0, %d] (0: never)", kMaxExpirySeconds));
    }
    FCA_ASSIGN_OR_RETURN(std::string secret, storage::Store::GenerateApiKey());
    FCA_ASSIGN_OR_RETURN(
        const storage::ApiKeyRecord key,
        store_->CreateApiKey(storage::NewApiKey{
            user, role, secret, request.expires_in_seconds() * 1000000, caller.user}));
    v1::CreateApiKeyResponse response;
    *response.mutable_key() = ToProto(key);
    response.set_secret(std::move(secret));
    return response;
  };
  absl::StatusOr<v1::CreateApiKeyResponse> result = create();
  Record(caller, audit_action::kKeyCreate,
         {"api_key", result.ok() ? KeyId(result->key().id()) : ""}, OutcomeOf(result),
         absl::StrFormat("user %s, role %s, expires in %d s", user.substr(0, 128),
                         role.substr(0, 64), request.expires_in_seconds()));
  return result;
}

absl::StatusOr<v1::ListApiKeysResponse> AuditServiceCore::ListApiKeys(
    const Caller& caller, const v1::ListApiKeysRequest& request) {
  std::optional<std::string> user;
  if (!request.user().empty()) user = request.user();
  if (!caller.admin) {
    if (user && *user != caller.user) {
      return absl::PermissionDeniedError("only admins list other users' keys");
    }
    user = caller.user;
  }
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::ApiKeyRecord> keys, store_->ListApiKeys(user));
  v1::ListApiKeysResponse response;
  for (const storage::ApiKeyRecord& key : keys) *response.add_keys() = ToProto(key);
  return response;
}

absl::StatusOr<v1::RevokeApiKeyResponse> AuditServiceCore::RevokeApiKey(
    const Caller& caller, const v1::RevokeApiKeyRequest& request) {
  const auto revoke = [&]() -> absl::StatusOr<v1::RevokeApiKeyResponse> {
    FCA_RETURN_IF_ERROR(VisibleKey(caller, request.id()).status());
    FCA_ASSIGN_OR_RETURN(const storage::ApiKeyRecord key, store_->RevokeApiKey(request.id()));
    v1::RevokeApiKeyResponse response;
    *response.mutable_key() = ToProto(key);
    return response;
  };
  absl::StatusOr<v1::RevokeApiKeyResponse> result = revoke();
  Record(caller, audit_action::kKeyRevoke, {"api_key", absl::StrCat(request.id())},
         OutcomeOf(result), result.ok() ? absl::StrCat("user ", result->key().user()) : "");
  return result;
}

absl::StatusOr<v1::RotateApiKeyResponse> AuditServiceCore::RotateApiKey(
    const Caller& caller, const v1::RotateApiKeyRequest& request) {
  const auto rotate = [&]() -> absl::StatusOr<v1::RotateApiKeyResponse> {
    if (request.grace_seconds() < 0 || request.grace_seconds() > kMaxRotationGraceSeconds) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grace_seconds must be in [0, %d] (30 days)", kMaxRotationGraceSeconds));
    }
    FCA_RETURN_IF_ERROR(VisibleKey(caller, request.id()).status());
    FCA_ASSIGN_OR_RETURN(std::string secret, storage::Store::GenerateApiKey());
    FCA_ASSIGN_OR_RETURN(
        const storage::ApiKeyRecord fresh,
        store_->RotateApiKey(request.id(), secret, request.grace_seconds() * 1000000, caller.user));
    FCA_ASSIGN_OR_RETURN(const storage::ApiKeyRecord old, store_->GetApiKey(request.id()));
    v1::RotateApiKeyResponse response;
    *response.mutable_key() = ToProto(fresh);
    response.set_secret(std::move(secret));
    *response.mutable_replaced() = ToProto(old);
    return response;
  };
  absl::StatusOr<v1::RotateApiKeyResponse> result = rotate();
  Record(caller, audit_action::kKeyRotate, {"api_key", absl::StrCat(request.id())},
         OutcomeOf(result),
         result.ok() ? absl::StrFormat("into key %d, old key valid %d s more", result->key().id(),
                                       request.grace_seconds())
                     : "");
  return result;
}

// ---- the audit log

absl::StatusOr<v1::QueryAuditLogResponse> AuditServiceCore::QueryAuditLog(
    const Caller& caller, const v1::QueryAuditLogRequest& request) {
  if (!caller.admin) return absl::PermissionDeniedError("only admins read the audit log");
  if (audit_log_ == nullptr) {
    return absl::FailedPreconditionError("this server keeps no audit log");
  }
  storage::AuditLogFilter filter;
  FCA_ASSIGN_OR_RETURN(filter.since_us, TimeFilter(request.has_since(), request.since(), "since"));
  FCA_ASSIGN_OR_RETURN(filter.until_us, TimeFilter(request.has_until(), request.until(), "until"));
  if (filter.since_us != 0 && filter.until_us != 0 && filter.since_us > filter.until_us) {
    return absl::InvalidArgumentError("since is later than until");
  }
  if (!request.user().empty()) filter.user = request.user();
  if (!request.action().empty()) {
    const std::vector<std::string>& actions = AuditActions();
    if (std::find(actions.begin(), actions.end(), request.action()) == actions.end()) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown action '%s'; one of: %s",
                                                        request.action().substr(0, 64),
                                                        absl::StrJoin(actions, ", ")));
    }
    filter.action = request.action();
  }
  FCA_ASSIGN_OR_RETURN(const storage::AuditLogPage page,
                       store_->QueryAuditLog(filter, request.page_size(), request.page_token()));
  v1::QueryAuditLogResponse response;
  for (const storage::AuditLogRow& row : page.rows) *response.add_entries() = ToProto(row);
  response.set_next_page_token(page.next_page_token);
  return response;
}

}  // namespace fca::core
