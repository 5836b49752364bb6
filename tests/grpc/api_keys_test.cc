// The API key lifecycle through a real server on 127.0.0.1: keys created
// over the API work at once; a revoked or expired key is refused at its
// next call (no restart) on fca.v1.AuditService and fca.v1.WorkerService
// alike; a rotated key keeps working for its grace period only; users
// manage their own keys only; key uses and refusals reach the store.
// Time is the store's clock, moved by the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "proto/fca/v1/worker_service.grpc.pb.h"
#include "tests/grpc/grpc_env.h"
#include "tests/testing/test_util.h"

namespace fca::grpc_server {
namespace {

using ::fca::test_util::kSecond;

using testing::GrpcEnv;
using ::testing::HasSubstr;
using testing::kRootKey;
using testing::ServerConfig;

std::atomic<int64_t> g_now_us{1'700'000'000 * kSecond};

ServerConfig KeysConfig() {
  ServerConfig config;
  config.auth = true;
  config.key_file = testing::WriteTempFile(std::string(kRootKey) + " root admin\n");
  EXPECT_EQ(chmod(config.key_file.c_str(), 0600), 0);
  config.store.now_us = [] { return g_now_us.load(); };
  return config;
}

class ApiKeysTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.started()); }

  v1::CreateApiKeyResponse Create(const std::string& as, const std::string& user,
                                  const std::string& role = "", int64_t expires_in = 0) {
    v1::CreateApiKeyRequest request;
    request.set_user(user);
    request.set_role(role);
    request.set_expires_in_seconds(expires_in);
    v1::CreateApiKeyResponse response;
    auto ctx = GrpcEnv::Context(as);
    const grpc::Status st = env_.stub()->CreateApiKey(ctx.get(), request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response;
  }
  grpc::Status Call(const std::string& key) { return env_.ListModels(key); }
  grpc::Status Revoke(const std::string& as, int64_t id) {
    v1::RevokeApiKeyRequest request;
    request.set_id(id);
    v1::RevokeApiKeyResponse response;
    auto ctx = GrpcEnv::Context(as);
    return env_.stub()->RevokeApiKey(ctx.get(), request, &response);
  }
  v1::ListApiKeysResponse List(const std::string& as, const std::string& user = "") {
    v1::ListApiKeysRequest request;
    request.set_user(user);
    v1::ListApiKeysResponse response;
    auto ctx = GrpcEnv::Context(as);
    EXPECT_TRUE(env_.stub()->ListApiKeys(ctx.get(), request, &response).ok());
    return response;
  }
  // The first key once its last use is no longer at `seconds`, or as it is
  // after 10 s: a use is written off the request's path
  // (Store::RecordApiKeyUse), so a listing right after the call may predate it.
  v1::ApiKey FirstKeyOnceUsedAfter(int64_t seconds) {
    for (int i = 0; i < 1000; ++i) {
      const v1::ApiKey key = List(kRootKey).keys(0);
      if (key.last_used_at().seconds() != seconds) return key;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return List(kRootKey).keys(0);
  }

  GrpcEnv env_{KeysConfig()};
};

TEST_F(ApiKeysTest, ARevokedKeysVeryNextCallIsUnauthenticated) {
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob");
  ASSERT_EQ(bob.secret().size(), 64u);
  EXPECT_EQ(bob.key().prefix(), bob.secret().substr(0, 8));
  EXPECT_EQ(bob.key().created_by(), "root");
  ASSERT_TRUE(Call(bob.secret()).ok());
  ASSERT_TRUE(Revoke(kRootKey, bob.key().id()).ok());
  const grpc::Status refused = Call(bob.secret());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("revoked"));
  // The listing shows the key revoked, never the key.
  const v1::ListApiKeysResponse keys = List(kRootKey);
  ASSERT_EQ(keys.keys_size(), 1);
  EXPECT_EQ(keys.keys(0).state(), "revoked");
  EXPECT_EQ(keys.keys(0).DebugString().find(bob.secret()), std::string::npos);
}

TEST_F(ApiKeysTest, AnExpiredKeyIsRefusedWithoutARestart) {
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob", "user", 3600);
  ASSERT_TRUE(Call(bob.secret()).ok());
  g_now_us += 3599 * kSecond;
  ASSERT_TRUE(Call(bob.secret()).ok());
  g_now_us += kSecond;
  const grpc::Status refused = Call(bob.secret());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("expired"));
}

TEST_F(ApiKeysTest, ARotatedKeyWorksForItsGraceThenTheNewOneAlone) {
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob");
  v1::RotateApiKeyRequest request;
  request.set_id(bob.key().id());
  request.set_grace_seconds(600);
  v1::RotateApiKeyResponse rotated;
  auto ctx = GrpcEnv::Context(bob.secret());  // bob rotates his own key
  ASSERT_TRUE(env_.stub()->RotateApiKey(ctx.get(), request, &rotated).ok());
  EXPECT_EQ(rotated.key().user(), "bob");
  EXPECT_EQ(rotated.replaced().replaced_by(), rotated.key().id());
  EXPECT_TRUE(Call(bob.secret()).ok());
  EXPECT_TRUE(Call(rotated.secret()).ok());
  g_now_us += 600 * kSecond;
  EXPECT_EQ(Call(bob.secret()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Call(rotated.secret()).ok());
  // A grace beyond 30 days is refused.
  request.set_id(rotated.key().id());
  request.set_grace_seconds(31 * 24 * 3600);
  auto again = GrpcEnv::Context(rotated.secret());
  EXPECT_EQ(env_.stub()->RotateApiKey(again.get(), request, &rotated).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ApiKeysTest, UsersManageTheirOwnKeysOnly) {
  const v1::CreateApiKeyResponse alice = Create(kRootKey, "alice");
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob");
  // bob's own second key: role user only.
  const v1::CreateApiKeyResponse bob2 = Create(bob.secret(), "");
  EXPECT_EQ(bob2.key().user(), "bob");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"alice", "user"}, {"bob", "admin"}, {"bob", "worker"}};
  for (const auto& [user, role] : refused) {
    v1::CreateApiKeyRequest request;
    request.set_user(user);
    request.set_role(role);
    v1::CreateApiKeyResponse response;
    auto ctx = GrpcEnv::Context(bob.secret());
    EXPECT_EQ(env_.stub()->CreateApiKey(ctx.get(), request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << user << " " << role;
  }
  EXPECT_EQ(List(bob.secret()).keys_size(), 2);
  EXPECT_EQ(List(kRootKey).keys_size(), 3);
  EXPECT_EQ(List(kRootKey, "alice").keys_size(), 1);
  // alice's key id is not disclosed to bob.
  EXPECT_EQ(Revoke(bob.secret(), alice.key().id()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Call(alice.secret()).ok());
  v1::ListApiKeysRequest others;
  others.set_user("alice");
  v1::ListApiKeysResponse response;
  auto ctx = GrpcEnv::Context(bob.secret());
  EXPECT_EQ(env_.stub()->ListApiKeys(ctx.get(), others, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // bad input
  v1::CreateApiKeyRequest bad;
  bad.set_user("../x");
  auto bad_ctx = GrpcEnv::Context(kRootKey);
  v1::CreateApiKeyResponse unused;
  EXPECT_EQ(env_.stub()->CreateApiKey(bad_ctx.get(), bad, &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_user("carol");
  bad.set_role("root");
  auto role_ctx = GrpcEnv::Context(kRootKey);
  EXPECT_EQ(env_.stub()->CreateApiKey(role_ctx.get(), bad, &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_role("user");
  bad.set_expires_in_seconds(-1);
  auto expiry_ctx = GrpcEnv::Context(kRootKey);
  EXPECT_EQ(env_.stub()->CreateApiKey(expiry_ctx.get(), bad, &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ApiKeysTest, ARevokedWorkerKeyIsRefusedByTheWorkerProtocol) {
  const v1::CreateApiKeyResponse worker = Create(kRootKey, "gpu-node", "worker");
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(env_.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::WorkerService::NewStub(channel);
  v1::RegisterWorkerRequest request;
  request.set_worker("w1");
  request.set_device("cpu");
  v1::RegisterWorkerResponse response;
  auto before = GrpcEnv::Context(worker.secret());
  const grpc::Status registered = stub->RegisterWorker(before.get(), request, &response);
  EXPECT_NE(registered.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << registered.error_message();
  ASSERT_TRUE(Revoke(kRootKey, worker.key().id()).ok());
  auto after = GrpcEnv::Context(worker.secret());
  EXPECT_EQ(stub->RegisterWorker(after.get(), request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ApiKeysTest, AUseIsRecordedOncePerMinuteWithTheClientAddress) {
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob");
  EXPECT_FALSE(List(kRootKey).keys(0).has_last_used_at());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(bob.secret()).ok());
  v1::ApiKey key = FirstKeyOnceUsedAfter(0);
  EXPECT_EQ(key.last_used_at().seconds() * kSecond, g_now_us.load() / kSecond * kSecond);
  EXPECT_THAT(key.last_peer(), HasSubstr("127.0.0.1"));
  const int64_t first_use = key.last_used_at().seconds();
  g_now_us += 59 * kSecond;
  ASSERT_TRUE(Call(bob.secret()).ok());
  EXPECT_EQ(List(kRootKey).keys(0).last_used_at().seconds(), first_use);
  g_now_us += kSecond;
  ASSERT_TRUE(Call(bob.secret()).ok());
  EXPECT_EQ(FirstKeyOnceUsedAfter(first_use).last_used_at().seconds(), first_use + 60);
}

TEST_F(ApiKeysTest, KeyChangesAndRefusalsAreInTheAuditLog) {
  const v1::CreateApiKeyResponse bob = Create(kRootKey, "bob");
  ASSERT_TRUE(Revoke(kRootKey, bob.key().id()).ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(Call(bob.secret()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::QueryAuditLogRequest request;
  v1::QueryAuditLogResponse log;
  auto ctx = GrpcEnv::Context(kRootKey);
  ASSERT_TRUE(env_.stub()->QueryAuditLog(ctx.get(), request, &log).ok());
  int creates = 0, revokes = 0, refusals = 0;
  for (const v1::AuditLogEntry& e : log.entries()) {
    if (e.action() == "key.create") ++creates;
    if (e.action() == "key.revoke") ++revokes;
    if (e.action() == "auth.refused") ++refusals;
    EXPECT_EQ(e.DebugString().find(bob.secret()), std::string::npos);
  }
  EXPECT_EQ(creates, 1);
  EXPECT_EQ(revokes, 1);
  // 50 refusals from one address within a minute: one row (the rest are
  // counted and written once the minute has passed).
  EXPECT_EQ(refusals, 1);
  // Users do not read the audit log.
  const v1::CreateApiKeyResponse carol = Create(kRootKey, "carol");
  auto user_ctx = GrpcEnv::Context(carol.secret());
  EXPECT_EQ(env_.stub()->QueryAuditLog(user_ctx.get(), request, &log).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace fca::grpc_server
