#include "server/grpc/auth.h"

#include <optional>

#include "absl/strings/string_view.h"

namespace fca::grpc_server {

absl::StatusOr<core::Caller> Authenticate(const auth::Authenticator& auth,
                                          const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  std::optional<absl::string_view> value;
  if (it != metadata.end()) value = absl::string_view(it->second.data(), it->second.size());
  return auth.Authenticate(value, context.peer());
}

}  // namespace fca::grpc_server
