// API keys: creation, lookup, use, listing, revocation and rotation.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"

namespace fca::storage {
namespace {

constexpr char kSelectKey[] =
    "SELECT id, prefix, user, role, created_by, created_at_us, expires_at_us, revoked_at_us, "
    "last_used_at_us, last_peer, replaced_by FROM api_keys";

ApiKeyState StateAt(int64_t expires_at_us, int64_t revoked_at_us, int64_t now_us) {
  if (revoked_at_us != 0) return ApiKeyState::kRevoked;
  if (expires_at_us != 0 && expires_at_us <= now_us) return ApiKeyState::kExpired;
  return ApiKeyState::kActive;
}

ApiKeyRecord ReadKey(const Statement& stmt, int64_t now_us) {
  ApiKeyRecord key;
  key.id = stmt.ColumnInt(0);
  key.prefix = stmt.ColumnText(1);
  key.user = stmt.ColumnText(2);
  key.role = stmt.ColumnText(3);
  key.created_by = stmt.ColumnText(4);
  key.created_at_us = stmt.ColumnInt(5);
  key.expires_at_us = stmt.ColumnInt(6);
  key.revoked_at_us = stmt.ColumnInt(7);
  key.last_used_at_us = stmt.ColumnInt(8);
  key.last_peer = stmt.ColumnText(9);
  key.replaced_by = stmt.ColumnInt(10);
  key.state = StateAt(key.expires_at_us, key.revoked_at_us, now_us);
  return key;
}

absl::Status CheckNewKey(const NewApiKey& key) {
  if (key.user.empty()) return absl::InvalidArgumentError("user is empty");
  if (key.role != "user" && key.role != "admin" && key.role != "worker") {
    return absl::InvalidArgumentError("role must be 'user', 'admin' or 'worker'");
  }
  if (key.plaintext.size() < Store::kMinApiKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("API key must be at least %d characters", Store::kMinApiKeyBytes));
  }
  if (key.expires_in_us < 0) {
    return absl::InvalidArgumentError("the key's expiry must lie in the future");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Store::AddApiKey(const std::string& user, const std::string& role,
                              const std::string& plaintext) {
  return CreateApiKey(NewApiKey{user, role, plaintext, 0, ""}).status();
}

absl::StatusOr<ApiKeyRecord> Store::CreateApiKey(const NewApiKey& key) {
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("add_api_key"));
  // A user's personal project is named after the user, so a user named like
  // a shared project would have none (CreateProject refuses the other
  // direction). Under mu_, so no CreateProject runs in between. Rotation
  // (CreateApiKeyLocked) keeps an existing user's keys working.
  FCA_ASSIGN_OR_RETURN(
      Statement shared,
      db_->Prepare("SELECT 1 FROM projects WHERE name = ?1 AND personal = 0", "add API key"));
  shared.BindText(1, key.user);
  FCA_ASSIGN_OR_RETURN(const bool collides, shared.Step());
  if (collides) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "a shared project is named '%s'; a user of that name would have no personal project",
        key.user));
  }
  return CreateApiKeyLocked(key);
}

absl::StatusOr<ApiKeyRecord> Store::CreateApiKeyLocked(const NewApiKey& key) {
  FCA_RETURN_IF_ERROR(CheckNewKey(key));
  FCA_ASSIGN_OR_RETURN(
      Statement insert,
      db_->Prepare("INSERT INTO api_keys (key_sha256, prefix, user, role, created_by, "
                   "created_at_us, expires_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   "add API key"));
  insert.BindText(1, Sha256Hex(key.plaintext));
  insert.BindText(2, key.plaintext.substr(0, kApiKeyPrefixChars));
  insert.BindText(3, key.user);
  insert.BindText(4, key.role);
  insert.BindText(5, key.created_by);
  insert.BindInt(6, Now());
  insert.BindInt(7, key.expires_in_us == 0 ? 0 : Now() + key.expires_in_us);
  FCA_RETURN_IF_ERROR(insert.Run());
  return GetApiKeyLocked(db_->last_insert_rowid());
}

absl::StatusOr<int64_t> Store::CountApiKeys() {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(const std::string count,
                       db_->QueryText("SELECT COUNT(*) FROM api_keys", "count API keys"));
  return std::strtoll(count.c_str(), nullptr, 10);
}

absl::StatusOr<std::optional<ApiKeyInfo>> Store::LookupApiKey(const std::string& plaintext) {
  // Looked up by hash, so timing reveals nothing useful about stored keys.
  const std::string hash = Sha256Hex(plaintext);
  return Read([&](Database& db) -> absl::StatusOr<std::optional<ApiKeyInfo>> {
    FCA_RETURN_IF_ERROR(Inject("lookup_api_key"));
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare("SELECT user, role, id, expires_at_us, revoked_at_us, "
                                    "last_used_at_us FROM api_keys WHERE key_sha256 = ?1",
                                    "look up API key"));
    stmt.BindText(1, hash);
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return std::optional<ApiKeyInfo>();
    const int64_t now = Now();
    ApiKeyInfo info;
    info.user = stmt.ColumnText(0);
    info.role = stmt.ColumnText(1);
    info.id = stmt.ColumnInt(2);
    info.state = StateAt(stmt.ColumnInt(3), stmt.ColumnInt(4), now);
    const int64_t last_used = stmt.ColumnInt(5);
    info.use_due = last_used == 0 || now - last_used >= kApiKeyUseIntervalUs || now < last_used;
    return std::optional<ApiKeyInfo>(std::move(info));
  });
}

absl::Status Store::NoteApiKeyUse(int64_t id, const std::string& peer) {
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("note_api_key_use"));
  FCA_ASSIGN_OR_RETURN(
      Statement update,
      db_->Prepare("UPDATE api_keys SET last_used_at_us = ?1, last_peer = ?2 WHERE id = ?3",
                   "record API key use"));
  update.BindInt(1, Now());
  update.BindText(2, peer.substr(0, kMaxAuditTextBytes));
  update.BindInt(3, id);
  return update.Run();
}

void Store::RecordApiKeyUse(int64_t id, const std::string& peer) {
  absl::MutexLock lock(&key_use_mu_);
  if (key_use_stop_) return;
  key_uses_[id] = peer;
  if (!key_use_writer_.joinable()) key_use_writer_ = std::thread([this] { WriteKeyUses(); });
  key_use_due_.Signal();
}

void Store::WriteKeyUses() {
  while (true) {
    std::map<int64_t, std::string> uses;
    {
      absl::MutexLock lock(&key_use_mu_);
      while (key_uses_.empty() && !key_use_stop_) key_use_due_.Wait(&key_use_mu_);
      if (key_uses_.empty()) return;  // stopped, and everything written
      uses.swap(key_uses_);
    }
    for (const auto& [id, peer] : uses) {
      // Best effort: a use is a hint for the key's owner, not a record.
      LogIfError(absl::StrFormat("storage: cannot record the use of API key %d", id),
                 NoteApiKeyUse(id, peer));
    }
  }
}

absl::StatusOr<std::vector<ApiKeyRecord>> Store::ListApiKeys(
    const std::optional<std::string>& user) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectKey) + (user ? " WHERE user = ?1" : "") + " ORDER BY id",
                   "list API keys"));
  if (user) stmt.BindText(1, *user);
  const int64_t now = Now();
  std::vector<ApiKeyRecord> keys;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    keys.push_back(ReadKey(stmt, now));
  }
  return keys;
}

absl::StatusOr<ApiKeyRecord> Store::GetApiKey(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  return GetApiKeyLocked(id);
}

absl::StatusOr<ApiKeyRecord> Store::GetApiKeyLocked(int64_t id) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare(std::string(kSelectKey) + " WHERE id = ?1", "get API key"));
  stmt.BindInt(1, id);
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return absl::NotFoundError(absl::StrFormat("no API key %d", id));
  return ReadKey(stmt, Now());
}

absl::StatusOr<ApiKeyRecord> Store::RevokeApiKey(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("revoke_api_key"));
  ApiKeyRecord key;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(key, GetApiKeyLocked(id));
    if (key.revoked_at_us != 0) return absl::OkStatus();
    FCA_ASSIGN_OR_RETURN(
        Statement update,
        db_->Prepare("UPDATE api_keys SET revoked_at_us = ?1 WHERE id = ?2", "revoke API key"));
    update.BindInt(1, Now());
    update.BindInt(2, id);
    FCA_RETURN_IF_ERROR(update.Run());
    FCA_ASSIGN_OR_RETURN(key, GetApiKeyLocked(id));
    return absl::OkStatus();
  }));
  return key;
}

absl::StatusOr<ApiKeyRecord> Store::RotateApiKey(int64_t id, const std::string& plaintext,
                                                 int64_t grace_us, const std::string& created_by) {
  if (grace_us < 0) return absl::InvalidArgumentError("the grace period must not be negative");
  RecursiveMutexLock lock(&mu_);
  FCA_RETURN_IF_ERROR(Inject("rotate_api_key"));
  ApiKeyRecord fresh;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const ApiKeyRecord old, GetApiKeyLocked(id));
    if (old.state != ApiKeyState::kActive) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "API key %d is %s: only an active key is rotated (create a new one instead)", id,
          old.state == ApiKeyState::kRevoked ? "revoked" : "expired"));
    }
    if (old.replaced_by != 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("API key %d was rotated already (into key %d)", id, old.replaced_by));
    }
    const int64_t now = Now();
    const int64_t expires_in = old.expires_at_us == 0 ? 0 : old.expires_at_us - now;
    FCA_ASSIGN_OR_RETURN(fresh, CreateApiKeyLocked(NewApiKey{old.user, old.role, plaintext,
                                                             expires_in, created_by}));
    // Never past its own expiry; a grace of 0 ends it now.
    int64_t ends = now + grace_us;
    if (old.expires_at_us != 0) ends = std::min(ends, old.expires_at_us);
    FCA_ASSIGN_OR_RETURN(Statement update,
                         db_->Prepare("UPDATE api_keys SET expires_at_us = ?1, replaced_by = ?2 "
                                      "WHERE id = ?3",
                                      "rotate API key"));
    update.BindInt(1, ends);
    update.BindInt(2, fresh.id);
    update.BindInt(3, id);
    return update.Run();
  }));
  return fresh;
}

absl::StatusOr<std::string> Store::GenerateApiKey() {
  unsigned char bytes[32];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError("cannot read the random source");
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return absl::InternalError("cannot read the random source");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string key;
  key.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    key.push_back(kHex[b >> 4]);
    key.push_back(kHex[b & 15]);
  }
  return key;
}

}  // namespace fca::storage
