#include "server/grpc/auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "common/sha256.h"

namespace fca::grpc_server {

absl::StatusOr<Authenticator> Authenticator::Create(bool enabled, const std::string& key_file,
                                                    storage::Store* store) {
  Authenticator auth;
  auth.enabled_ = enabled;
  auth.store_ = store;
  if (key_file.empty()) return auth;
  std::ifstream in(key_file);
  if (!in) return absl::NotFoundError("cannot read the API key file " + key_file);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, user, role;
    fields >> key >> user >> role;
    if (key.size() < 16 || user.empty() || (role != "user" && role != "admin")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "API key file line %d: expected '<key of 16+ chars> <user> <user|admin>'", number));
    }
    auth.file_keys_[Sha256Hex(key)] = core::Caller{user, role == "admin"};
  }
  return auth;
}

absl::StatusOr<core::Caller> Authenticator::Authenticate(
    const grpc::ServerContext& context) const {
  if (!enabled_) return core::Caller{"local", true};
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const std::string prefix = "Bearer ";
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <key>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  if (value.rfind(prefix, 0) != 0) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <key>'");
  }
  const std::string key = value.substr(prefix.size());
  auto file = file_keys_.find(Sha256Hex(key));
  if (file != file_keys_.end()) return file->second;
  if (store_ != nullptr) {
    auto info = store_->LookupApiKey(key);
    if (info.ok() && info->has_value()) {
      return core::Caller{(*info)->user, (*info)->role == "admin"};
    }
  }
  return absl::UnauthenticatedError("unknown API key");
}

}  // namespace fca::grpc_server
