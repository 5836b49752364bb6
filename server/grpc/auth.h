// The gRPC side of authentication (server/auth/authenticator.h): the key
// comes from the call's `authorization` metadata.
#ifndef FCA_SERVER_GRPC_AUTH_H_
#define FCA_SERVER_GRPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/auth/authenticator.h"
#include "server/core/caller.h"

namespace fca::grpc_server {

// The caller of an RPC, from its `authorization` metadata
// (auth::Authenticator::Authenticate; the peer is gRPC's).
[[nodiscard]] absl::StatusOr<core::Caller> Authenticate(const auth::Authenticator& auth,
                                                        const grpc::ServerContext& context);

// The call's `authorization` metadata; nullopt when it sent none.
std::optional<std::string> Authorization(const grpc::ServerContext& context);

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_AUTH_H_
