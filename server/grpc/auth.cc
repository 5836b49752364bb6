#include "server/grpc/auth.h"

#include <optional>

#include "absl/strings/string_view.h"

namespace fca::grpc_server {

std::optional<std::string> Authorization(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

absl::StatusOr<core::Caller> Authenticate(const auth::Authenticator& auth,
                                          const grpc::ServerContext& context) {
  const std::optional<std::string> authorization = Authorization(context);
  std::optional<absl::string_view> value;
  if (authorization) value = *authorization;
  return auth.Authenticate(value, context.peer());
}

}  // namespace fca::grpc_server
