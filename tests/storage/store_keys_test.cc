// Conformance suite: the API key lifecycle (expiry on the store's clock,
// revocation, rotation with a grace period, throttled use records) and the
// audit log (append, filtered newest-first paging, purge in batches), with
// their fault injection. Runs on ":memory:" and a file.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreKeysTest : public StoreFixture {
 protected:
  ApiKeyRecord Create(const std::string& user, const std::string& key, int64_t expires_in_us = 0) {
    absl::StatusOr<ApiKeyRecord> record =
        store_->CreateApiKey(NewApiKey{user, "user", key, expires_in_us, "admin"});
    EXPECT_TRUE(record.ok()) << record.status();
    return record.ok() ? *record : ApiKeyRecord();
  }
  // The state LookupApiKey reports for `key`; nullopt when unknown.
  std::optional<ApiKeyState> StateOf(const std::string& key) {
    absl::StatusOr<std::optional<ApiKeyInfo>> info = store_->LookupApiKey(key);
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok() || !info->has_value()) return std::nullopt;
    return (*info)->state;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreKeysTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

constexpr char kAnnKey[] = "ann-key-0123456789abcdef";
constexpr char kAnnNext[] = "ann-next-0123456789abcdef";
constexpr int64_t kMinute = 60'000'000;

TEST_P(StoreKeysTest, AKeyIsListedWithItsPrefixNeverItsText) {
  const ApiKeyRecord ann = Create("ann", kAnnKey);
  Create("bob", "bob-key-0123456789abcdef");
  EXPECT_EQ(ann.prefix, std::string(kAnnKey).substr(0, Store::kApiKeyPrefixChars));
  EXPECT_EQ(ann.created_by, "admin");
  EXPECT_EQ(ann.created_at_us, now_us_.load());
  ASSERT_OK_AND_ASSIGN(const std::vector<ApiKeyRecord> all, store_->ListApiKeys(std::nullopt));
  ASSERT_EQ(all.size(), 2u);
  ASSERT_OK_AND_ASSIGN(const std::vector<ApiKeyRecord> anns, store_->ListApiKeys("ann"));
  ASSERT_EQ(anns.size(), 1u);
  EXPECT_EQ(anns[0].id, ann.id);
  EXPECT_EQ(anns[0].state, ApiKeyState::kActive);
  // The rows hold the hash and the prefix, not the key.
  if (is_file()) {
    auto db = Database::Open(tmp_.path(), 1000);
    ASSERT_TRUE(db.ok());
    auto stmt = (*db)->Prepare(
        "SELECT COUNT(*) FROM api_keys WHERE key_sha256 = ?1 OR "
        "prefix = ?1 OR user = ?1 OR last_peer = ?1",
        "find key");
    ASSERT_TRUE(stmt.ok());
    stmt->BindText(1, kAnnKey);
    ASSERT_OK(stmt->Step().status());
    EXPECT_EQ(stmt->ColumnInt(0), 0);
  }
}

TEST_P(StoreKeysTest, AKeyExpiresOnTheStoresClock) {
  Create("ann", kAnnKey, 10 * kMinute);
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kActive);
  now_us_ += 10 * kMinute - 1;
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kActive);
  now_us_ += 1;
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kExpired);
  EXPECT_EQ(StateOf("no-such-key-0123456789"), std::nullopt);
  EXPECT_CODE(store_->CreateApiKey(NewApiKey{"ann", "user", kAnnNext, -1, ""}),
              StatusCode::kInvalidArgument);
}

TEST_P(StoreKeysTest, ARevokedKeyIsRefusedAndRevokingAgainChangesNothing) {
  const ApiKeyRecord ann = Create("ann", kAnnKey);
  now_us_ += 5;
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord revoked, store_->RevokeApiKey(ann.id));
  EXPECT_EQ(revoked.state, ApiKeyState::kRevoked);
  EXPECT_EQ(revoked.revoked_at_us, now_us_.load());
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kRevoked);
  now_us_ += 5;
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord again, store_->RevokeApiKey(ann.id));
  EXPECT_EQ(again.revoked_at_us, revoked.revoked_at_us);
  EXPECT_CODE(store_->RevokeApiKey(ann.id + 100), StatusCode::kNotFound);
  // Survives a reopen (file).
  if (is_file()) {
    Open();
    EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kRevoked);
  }
}

TEST_P(StoreKeysTest, RotationKeepsTheOldKeyForItsGraceThenRefusesIt) {
  const ApiKeyRecord ann = Create("ann", kAnnKey, 60 * kMinute);
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord fresh,
                       store_->RotateApiKey(ann.id, kAnnNext, 5 * kMinute, "ann"));
  EXPECT_EQ(fresh.user, "ann");
  EXPECT_EQ(fresh.role, "user");
  EXPECT_EQ(fresh.expires_at_us, ann.expires_at_us);  // the same expiry
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord old, store_->GetApiKey(ann.id));
  EXPECT_EQ(old.replaced_by, fresh.id);
  EXPECT_EQ(old.expires_at_us, now_us_.load() + 5 * kMinute);
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kActive);
  EXPECT_EQ(StateOf(kAnnNext), ApiKeyState::kActive);
  now_us_ += 5 * kMinute;
  EXPECT_EQ(StateOf(kAnnKey), ApiKeyState::kExpired);
  EXPECT_EQ(StateOf(kAnnNext), ApiKeyState::kActive);
  // Only an active key that was not rotated yet rotates.
  EXPECT_CODE(store_->RotateApiKey(ann.id, "ann-third-0123456789abc", 0, "ann"),
              StatusCode::kFailedPrecondition);
  ASSERT_OK(store_->RevokeApiKey(fresh.id).status());
  EXPECT_CODE(store_->RotateApiKey(fresh.id, "ann-third-0123456789abc", 0, "ann"),
              StatusCode::kFailedPrecondition);
  EXPECT_CODE(store_->RotateApiKey(fresh.id + 100, "ann-third-0123456789abc", 0, "ann"),
              StatusCode::kNotFound);
  EXPECT_CODE(store_->RotateApiKey(fresh.id, "ann-third-0123456789abc", -1, "ann"),
              StatusCode::kInvalidArgument);
}

TEST_P(StoreKeysTest, AGraceNeverOutlivesTheKeysOwnExpiry) {
  const ApiKeyRecord ann = Create("ann", kAnnKey, 2 * kMinute);
  ASSERT_OK(store_->RotateApiKey(ann.id, kAnnNext, 60 * kMinute, "ann").status());
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord old, store_->GetApiKey(ann.id));
  EXPECT_EQ(old.expires_at_us, ann.expires_at_us);
}

TEST_P(StoreKeysTest, AUseIsDueOncePerIntervalPerKey) {
  const ApiKeyRecord ann = Create("ann", kAnnKey);
  // Whether ann's key is due a use write; nullopt when the lookup failed.
  const auto use_due = [&]() -> std::optional<bool> {
    absl::StatusOr<std::optional<ApiKeyInfo>> info = store_->LookupApiKey(kAnnKey);
    if (!info.ok() || !info->has_value()) return std::nullopt;
    return info->value().use_due;
  };
  EXPECT_EQ(use_due(), std::optional<bool>(true));  // never used
  ASSERT_OK(store_->NoteApiKeyUse(ann.id, "ipv4:192.0.2.1:5000"));
  EXPECT_EQ(use_due(), std::optional<bool>(false));
  now_us_ += Store::kApiKeyUseIntervalUs - 1;
  EXPECT_EQ(use_due(), std::optional<bool>(false));
  now_us_ += 1;
  EXPECT_EQ(use_due(), std::optional<bool>(true));
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord used, store_->GetApiKey(ann.id));
  EXPECT_EQ(used.last_peer, "ipv4:192.0.2.1:5000");
  EXPECT_EQ(used.last_used_at_us, now_us_.load() - Store::kApiKeyUseIntervalUs);
}

TEST_P(StoreKeysTest, InjectedFaultsInKeyCallsWriteNothing) {
  std::string failing;
  options_.fault_injector = [&](std::string_view op) {
    return op == failing ? absl::UnavailableError("injected") : absl::OkStatus();
  };
  Open();
  failing = "add_api_key";
  EXPECT_CODE(store_->CreateApiKey(NewApiKey{"ann", "user", kAnnKey, 0, ""}),
              StatusCode::kUnavailable);
  ExpectRows("api_keys", 0);
  failing = "";
  const ApiKeyRecord ann = Create("ann", kAnnKey);
  failing = "revoke_api_key";
  EXPECT_CODE(store_->RevokeApiKey(ann.id), StatusCode::kUnavailable);
  failing = "rotate_api_key";
  EXPECT_CODE(store_->RotateApiKey(ann.id, kAnnNext, 0, "ann"), StatusCode::kUnavailable);
  ExpectRows("api_keys", 1);
  failing = "note_api_key_use";
  EXPECT_CODE(store_->NoteApiKeyUse(ann.id, "peer"), StatusCode::kUnavailable);
  failing = "append_audit_log";
  AuditLogRow row;
  row.user = "ann";
  row.action = "job.submit";
  EXPECT_CODE(store_->AppendAuditLog(row), StatusCode::kUnavailable);
  ExpectRows("audit_log", 0);
  failing = "";
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord still, store_->GetApiKey(ann.id));
  EXPECT_EQ(still.state, ApiKeyState::kActive);
  EXPECT_EQ(still.last_used_at_us, 0);
  EXPECT_EQ(still.replaced_by, 0);
  row.at_us = 1;
  ASSERT_OK(store_->AppendAuditLog(row).status());
  failing = "purge_audit_log";
  EXPECT_CODE(store_->PurgeAuditLog(now_us_.load(), 10), StatusCode::kUnavailable);
  ExpectRows("audit_log", 1);
}

AuditLogRow Entry(int64_t at_us, const std::string& user, const std::string& action) {
  AuditLogRow row;
  row.at_us = at_us;
  row.user = user;
  row.action = action;
  row.object_kind = "job";
  row.object_id = "1";
  row.outcome = "OK";
  return row;
}

TEST_P(StoreKeysTest, TheAuditLogPagesNewestFirstThroughItsFilters) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_OK(store_
                  ->AppendAuditLog(Entry(1000 + i, i % 2 == 0 ? "ann" : "bob",
                                         i % 5 == 0 ? "job.cancel" : "job.submit"))
                  .status());
  }
  // Every row once, newest first, over pages of 4.
  std::vector<int64_t> times;
  std::string token;
  do {
    ASSERT_OK_AND_ASSIGN(const AuditLogPage page, store_->QueryAuditLog({}, 4, token));
    EXPECT_LE(page.rows.size(), 4u);
    for (const AuditLogRow& row : page.rows) times.push_back(row.at_us);
    token = page.next_page_token;
  } while (!token.empty());
  ASSERT_EQ(times.size(), 25u);
  for (size_t i = 0; i < times.size(); ++i) EXPECT_EQ(times[i], 1024 - static_cast<int64_t>(i));
  AuditLogFilter filter;
  filter.user = "ann";
  filter.action = "job.cancel";
  filter.since_us = 1005;
  filter.until_us = 1020;
  ASSERT_OK_AND_ASSIGN(const AuditLogPage some, store_->QueryAuditLog(filter, 0, ""));
  std::set<int64_t> got;
  for (const AuditLogRow& row : some.rows) got.insert(row.at_us);
  EXPECT_EQ(got, (std::set<int64_t>{1010}));  // ann: even; cancel: multiples of 5
  EXPECT_CODE(store_->QueryAuditLog({}, -1, ""), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->QueryAuditLog({}, 0, "j12"), StatusCode::kInvalidArgument);
}

TEST_P(StoreKeysTest, PurgeDeletesOnlyOlderRowsInBatches) {
  for (int i = 0; i < 10; ++i)
    ASSERT_OK(store_->AppendAuditLog(Entry(100 + i, "ann", "a")).status());
  ASSERT_OK_AND_ASSIGN(int64_t purged, store_->PurgeAuditLog(107, 3));
  EXPECT_EQ(purged, 3);
  ASSERT_OK_AND_ASSIGN(purged, store_->PurgeAuditLog(107, 3));
  EXPECT_EQ(purged, 3);
  ASSERT_OK_AND_ASSIGN(purged, store_->PurgeAuditLog(107, 3));
  EXPECT_EQ(purged, 1);
  ASSERT_OK_AND_ASSIGN(const AuditLogPage left, store_->QueryAuditLog({}, 0, ""));
  ASSERT_EQ(left.rows.size(), 3u);
  EXPECT_EQ(left.rows.back().at_us, 107);
  EXPECT_CODE(store_->PurgeAuditLog(107, 0), StatusCode::kInvalidArgument);
}

TEST_P(StoreKeysTest, LongTextsAreCut) {
  AuditLogRow row = Entry(0, std::string(5000, 'u'), "job.submit");
  row.detail = std::string(5000, 'd');
  ASSERT_OK(store_->AppendAuditLog(row).status());
  ASSERT_OK_AND_ASSIGN(const AuditLogPage page, store_->QueryAuditLog({}, 0, ""));
  ASSERT_EQ(page.rows.size(), 1u);
  EXPECT_EQ(page.rows[0].user.size(), Store::kMaxAuditTextBytes);
  EXPECT_EQ(page.rows[0].detail.size(), Store::kMaxAuditTextBytes);
  EXPECT_EQ(page.rows[0].at_us, now_us_.load());  // 0: now
}

}  // namespace
}  // namespace fca::storage
