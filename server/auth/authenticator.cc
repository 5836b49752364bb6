#include "server/auth/authenticator.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "absl/strings/str_format.h"
#include "common/sha256.h"

namespace fca::auth {
namespace {

// Closes a file descriptor on every return path.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The key file's text. Its mode is checked on the open descriptor, so the
// file checked is the file read: a key file anyone else may read (or write)
// leaks every key in it, which is worse than not starting.
[[nodiscard]] absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(
        absl::StrFormat("cannot read the API key file %s: %s", path, std::strerror(errno)));
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the API key file %s is not a regular file", path));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the API key file %s has mode %04o, open to group or others; run: chmod 600 %s", path,
        info.st_mode & 07777, path));
  }
  std::string text;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = read(fd.get(), buffer, sizeof(buffer))) != 0) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot read the API key file %s: %s", path, std::strerror(errno)));
    }
    text.append(buffer, static_cast<size_t>(got));
  }
  return text;
}

core::Caller CallerOf(const std::string& user, const std::string& role) {
  return core::Caller{user, role == "admin", role == "worker"};
}

[[nodiscard]] absl::StatusOr<std::map<std::string, core::Caller>> ParseKeyFile(
    const std::string& text) {
  std::map<std::string, core::Caller> keys;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, user, role;
    fields >> key >> user >> role;
    if (key.size() < 16 || user.empty() ||
        (role != "user" && role != "admin" && role != "worker")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "API key file line %d: expected '<key of 16+ chars> <user> <user|admin|worker>'",
          number));
    }
    keys[Sha256Hex(key)] = CallerOf(user, role);
  }
  return keys;
}

// Keys in the store: looked up at every call (on the store's read
// connection), so a revocation or an expiry takes effect at the next call. A
// use is recorded when the key's last recorded use is older than
// Store::kApiKeyUseIntervalUs: one write per key and minute, however many
// calls it makes.
Authenticator::KeyLookup StoreLookup(storage::Store* store) {
  if (store == nullptr) return nullptr;
  return [store](const std::string& key,
                 absl::string_view peer) -> absl::StatusOr<std::optional<core::Caller>> {
    auto info = store->LookupApiKey(key);
    if (!info.ok()) return info.status();
    if (!info->has_value()) return std::nullopt;
    const storage::ApiKeyInfo& found = **info;
    if (found.state == storage::ApiKeyState::kRevoked) {
      return absl::UnauthenticatedError(absl::StrFormat("API key %d was revoked", found.id));
    }
    if (found.state == storage::ApiKeyState::kExpired) {
      return absl::UnauthenticatedError(absl::StrFormat("API key %d has expired", found.id));
    }
    // Written by the store's own thread: the call never waits for the
    // write lock, and a busy database does not refuse a valid key.
    if (found.use_due) store->RecordApiKeyUse(found.id, std::string(peer));
    core::Caller caller = CallerOf(found.user, found.role);
    caller.key_id = found.id;
    return caller;
  };
}

}  // namespace

// One line per refused call (or per recorded one, with a sink), for the
// operator: who knocked and why. The key is never logged, not even in
// part. The caller gets the same reason: it tells a forgotten --token from
// a wrong or revoked one and reveals nothing the caller did not send.
absl::Status Authenticator::Refuse(absl::string_view peer, absl::string_view reason) const {
  if (!refusal_sink_ || refusal_sink_(peer, reason)) {
    LOG(WARNING) << "authentication failed: peer " << peer << ": " << reason;
  }
  return absl::UnauthenticatedError(reason);
}

absl::StatusOr<Authenticator> Authenticator::Create(bool enabled, const std::string& key_file,
                                                    storage::Store* store) {
  return Create(enabled, key_file, StoreLookup(store));
}

absl::StatusOr<Authenticator> Authenticator::Create(bool enabled, const std::string& key_file,
                                                    KeyLookup lookup) {
  Authenticator auth;
  auth.enabled_ = enabled;
  auth.lookup_ = std::move(lookup);
  if (key_file.empty()) return auth;
  if (!enabled) {
    return absl::InvalidArgumentError("an API key file is only used with authentication on");
  }
  auto text = ReadKeyFile(key_file);
  if (!text.ok()) return text.status();
  auto keys = ParseKeyFile(*text);
  if (!keys.ok()) return keys.status();
  auth.file_keys_ = std::move(*keys);
  return auth;
}

std::set<std::string> Authenticator::file_key_users() const {
  std::set<std::string> users;
  for (const auto& [hash, caller] : file_keys_) users.insert(caller.user);
  return users;
}

absl::StatusOr<core::Caller> Authenticator::Authenticate(
    std::optional<absl::string_view> authorization, absl::string_view peer) const {
  if (!enabled_) return core::Caller{"local", true, false, 0, std::string(peer)};
  if (!authorization.has_value()) {
    return Refuse(peer, "missing 'authorization: Bearer <key>' metadata");
  }
  constexpr absl::string_view kPrefix = "Bearer ";
  if (authorization->substr(0, kPrefix.size()) != kPrefix ||
      authorization->size() == kPrefix.size()) {
    return Refuse(peer, "malformed authorization metadata: expected 'Bearer <key>'");
  }
  const std::string key(authorization->substr(kPrefix.size()));
  auto file = file_keys_.find(Sha256Hex(key));
  if (file != file_keys_.end()) {
    core::Caller caller = file->second;
    caller.peer = std::string(peer);
    return caller;
  }
  if (lookup_) {
    auto found = lookup_(key, peer);
    if (absl::IsUnauthenticated(found.status())) return Refuse(peer, found.status().message());
    if (!found.ok()) {
      // Not the caller's fault: refusing it as unauthenticated would make a
      // script drop a valid key. The details stay in the server's log.
      LOG(ERROR) << "API key lookup failed (peer " << peer << "): " << found.status();
      return absl::UnavailableError("cannot check the API key right now; retry");
    }
    if (found->has_value()) {
      core::Caller caller = **found;
      caller.peer = std::string(peer);
      return caller;
    }
  }
  return Refuse(peer, "unknown API key");
}

absl::Status MayCallAuditService(const core::Caller& caller) {
  if (caller.worker) {
    return absl::PermissionDeniedError(
        "a worker key may call fca.v1.WorkerService only; use a user key");
  }
  return absl::OkStatus();
}

absl::Status MayCallWorkerService(const core::Caller& caller) {
  if (!caller.worker && !caller.admin) {
    return absl::PermissionDeniedError(
        "only worker keys (role 'worker') and admins may call fca.v1.WorkerService");
  }
  return absl::OkStatus();
}

}  // namespace fca::auth
