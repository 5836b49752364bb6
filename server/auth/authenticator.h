// Bearer-token authentication of API calls, for every transport: the gRPC
// services read the key from the `authorization` metadata
// (server/grpc/auth.h), the HTTP gateway from the `Authorization` header.
//
// Off: every caller is "local", an admin (a single user on a workstation).
// On: each call must carry `Bearer <key>` naming an API key from the key
// file or the store; otherwise UNAUTHENTICATED.
//
// Every refused call is logged on stderr with the peer address and the
// reason (missing header, malformed header, unknown, revoked or expired
// key), never with the key itself; with a refusal sink (the audit log,
// server/core/audit_log.h) only the refusals it records are logged, so a
// flood of bad keys floods neither. The client only learns that it is
// unauthenticated, and why.
//
// Keys in the store are looked up at every call (no cache): a key revoked
// or expired is refused from its next call on, on every transport.
#ifndef FCA_SERVER_AUTH_AUTHENTICATOR_H_
#define FCA_SERVER_AUTH_AUTHENTICATOR_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/caller.h"
#include "storage/store.h"

namespace fca::auth {

class Authenticator {
 public:
  // Who owns a presented key, presented from `peer`: nullopt for an unknown
  // key, UNAUTHENTICATED (with the reason) for a revoked or expired one,
  // another error when the lookup itself failed (e.g. the database is busy).
  using KeyLookup = std::function<absl::StatusOr<std::optional<core::Caller>>(
      const std::string& key, absl::string_view peer)>;
  // Told of each refused call; returns whether it recorded it (then the
  // refusal is logged on stderr too).
  using RefusalSink = std::function<bool(absl::string_view peer, absl::string_view reason)>;

  // `enabled` false: everyone is the admin "local"; a `key_file` is then
  // refused (INVALID_ARGUMENT), since keys nobody checks would only give a
  // false sense of protection.
  // `key_file`: optional lines "<key> <user> <role>" (role user|admin|worker;
  // '#' starts a comment). It must be a regular file that grants group and
  // others no permission at all: FAILED_PRECONDITION ("chmod 600 FILE")
  // otherwise. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT for a
  // malformed line (the message names the line, never the key).
  // Keys are also looked up in `store` (may be null) / with `lookup` (may be
  // empty).
  [[nodiscard]] static absl::StatusOr<Authenticator> Create(bool enabled,
                                                            const std::string& key_file,
                                                            storage::Store* store);
  [[nodiscard]] static absl::StatusOr<Authenticator> Create(bool enabled,
                                                            const std::string& key_file,
                                                            KeyLookup lookup);

  // Before the authenticator is copied into the services (server.cc).
  void set_refusal_sink(RefusalSink sink) { refusal_sink_ = std::move(sink); }

  // The caller of a call whose authorization value (the gRPC metadata or
  // the HTTP header) is `authorization` (nullopt: none sent); `peer` names
  // the caller in the log line of a refusal and becomes Caller::peer.
  // UNAUTHENTICATED for a missing or malformed value or an unknown key;
  // UNAVAILABLE ("retry") when the key store could not be asked.
  [[nodiscard]] absl::StatusOr<core::Caller> Authenticate(
      std::optional<absl::string_view> authorization, absl::string_view peer) const;

  bool enabled() const { return enabled_; }
  // Keys read from the key file.
  size_t file_key_count() const { return file_keys_.size(); }
  // The users the key file's keys belong to.
  std::set<std::string> file_key_users() const;

 private:
  bool enabled_ = false;
  // The refusal, logged (and recorded by the sink, if any).
  absl::Status Refuse(absl::string_view peer, absl::string_view reason) const;

  std::map<std::string, core::Caller> file_keys_;  // sha256(key) -> caller
  KeyLookup lookup_;
  RefusalSink refusal_sink_;
};

// Who may call which service. A worker key runs tasks and nothing else: it
// lists, reads and submits nothing of any user's (PERMISSION_DENIED on
// fca.v1.AuditService, over gRPC and HTTP alike); fca.v1.WorkerService takes
// worker keys and admins only.
[[nodiscard]] absl::Status MayCallAuditService(const core::Caller& caller);
[[nodiscard]] absl::Status MayCallWorkerService(const core::Caller& caller);

}  // namespace fca::auth

#endif  // FCA_SERVER_AUTH_AUTHENTICATOR_H_
