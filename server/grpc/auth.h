// Bearer-token authentication of RPCs.
//
// Off: every caller is "local", an admin (a single user on a workstation).
// On: each call must carry `authorization: Bearer <key>` metadata naming an
// API key from the key file or the store; otherwise UNAUTHENTICATED.
#ifndef FCA_SERVER_GRPC_AUTH_H_
#define FCA_SERVER_GRPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/service.h"
#include "storage/store.h"

namespace fca::grpc_server {

class Authenticator {
 public:
  // `enabled` false: everyone is the admin "local".
  // `key_file`: optional lines "<key> <user> <role>" (role user|admin;
  // '#' starts a comment); keys are also looked up in the store.
  static absl::StatusOr<Authenticator> Create(bool enabled, const std::string& key_file,
                                              storage::Store* store);

  absl::StatusOr<core::Caller> Authenticate(const grpc::ServerContext& context) const;

 private:
  bool enabled_ = false;
  std::map<std::string, core::Caller> file_keys_;  // sha256(key) -> caller
  storage::Store* store_ = nullptr;
};

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_AUTH_H_
