// Bearer-token authentication (server/auth/authenticator.h, read from gRPC
// metadata by server/grpc/auth.h) through a real server:
// keys from the key file and from the store, and what each caller sees;
// the key file's permissions; what a refusal logs; a failing key store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/status_macros.h"
#include "server/auth/authenticator.h"
#include "server/auth/stream_key_check.h"
#include "storage/store.h"
#include "tests/grpc/grpc_env.h"

namespace fca::grpc_server {
namespace {

using auth::Authenticator;
using core::testing::SmallSpec;
using testing::GrpcEnv;
using ::testing::HasSubstr;
using testing::kRootKey;
using ::testing::Not;
using testing::ServerConfig;
using testing::WriteTempFile;

constexpr char kAliceKey[] = "alice-key-0000000001";
constexpr char kBobKey[] = "bob-key-000000000002";

// A key file as the server accepts it: readable by its owner only.
std::string PrivateKeyFile(const std::string& text, mode_t mode = 0600) {
  const std::string path = WriteTempFile(text);
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

ServerConfig AuthConfig() {
  ServerConfig config;
  config.auth = true;
  config.key_file = PrivateKeyFile(std::string("# test keys\n\n") + kAliceKey + " alice user\n" +
                                   kBobKey + " bob user\n" + kRootKey + " root admin\n");
  return config;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.started()); }

  // Uploads datasets and submits one job as the key's owner.
  int64_t SubmitAs(const std::string& key) {
    EXPECT_TRUE(env_.UploadEvalAndCalib(key).ok());
    v1::Job job;
    const grpc::Status st = env_.Submit(key, SmallSpec({"fg_a"}, "eval", "calib"), &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job.id();
  }

  std::vector<std::string> JobOwners(const std::string& key) {
    v1::ListJobsResponse jobs;
    const grpc::Status st = env_.ListJobs(key, &jobs);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> owners;
    for (const v1::Job& j : jobs.jobs()) owners.push_back(j.owner());
    return owners;
  }

  GrpcEnv env_{AuthConfig()};
};

TEST_F(AuthTest, NoMetadataIsUnauthenticated) {
  EXPECT_EQ(env_.ListModels("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  std::vector<v1::WatchJobResponse> events;
  EXPECT_EQ(env_.Watch("", 1, 0, &events).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(env_.Upload("", "d", "bytes").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(env_.ListModels(kAliceKey).ok());
}

TEST_F(AuthTest, WrongKeyOrSchemeIsUnauthenticated) {
  EXPECT_EQ(env_.ListModels("not-a-key-000000000000").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(env_.ListModels("ALICE-KEY-0000000001").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  for (const std::string& value : {std::string("Basic ") + kAliceKey, std::string(kAliceKey),
                                   std::string("Bearer "), std::string("Bearer")}) {
    auto ctx = GrpcEnv::Context();
    ctx->AddMetadata("authorization", value);
    v1::ListModelsResponse models;
    EXPECT_EQ(env_.stub()->ListModels(ctx.get(), {}, &models).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << value;
  }
  EXPECT_TRUE(env_.ListModels(kAliceKey).ok());
}

TEST_F(AuthTest, BearerKeyFromTheFileWorks) {
  v1::ListModelsResponse models;
  const grpc::Status st = env_.ListModels(kBobKey, &models);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(models.models_size(), 3);
}

TEST_F(AuthTest, UsersSeeOwnJobsAndAdminSeesAll) {
  const int64_t alice_job = SubmitAs(kAliceKey);
  const int64_t bob_job = SubmitAs(kBobKey);
  EXPECT_THAT(JobOwners(kAliceKey), ::testing::ElementsAre("alice"));
  EXPECT_THAT(JobOwners(kBobKey), ::testing::ElementsAre("bob"));
  EXPECT_THAT(JobOwners(kRootKey), ::testing::ElementsAre("bob", "alice"));
  auto ctx = GrpcEnv::Context(kAliceKey);
  v1::GetJobRequest get;
  get.set_job_id(bob_job);
  v1::GetJobResponse got;
  EXPECT_EQ(env_.stub()->GetJob(ctx.get(), get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  auto admin = GrpcEnv::Context(kRootKey);
  ASSERT_TRUE(env_.stub()->GetJob(admin.get(), get, &got).ok());
  EXPECT_EQ(got.job().owner(), "bob");
  auto datasets_ctx = GrpcEnv::Context(kAliceKey);
  v1::ListDatasetsResponse datasets;
  ASSERT_TRUE(env_.stub()->ListDatasets(datasets_ctx.get(), {}, &datasets).ok());
  ASSERT_EQ(datasets.datasets_size(), 2);
  for (const v1::Dataset& d : datasets.datasets()) EXPECT_EQ(d.owner(), "alice");
  (void)alice_job;
}

TEST_F(AuthTest, ReportsAndFiltersKeepUsersApart) {
  const int64_t bob_job = SubmitAs(kBobKey);
  v1::GetReportRequest get;
  get.set_job_id(bob_job);
  v1::GetReportResponse report;
  auto alice = GrpcEnv::Context(kAliceKey);
  EXPECT_EQ(env_.stub()->GetReport(alice.get(), get, &report).error_code(),
            grpc::StatusCode::NOT_FOUND);
  auto root = GrpcEnv::Context(kRootKey);
  EXPECT_TRUE(env_.stub()->GetReport(root.get(), get, &report).ok());
  v1::ListJobsRequest bobs;
  bobs.set_owner("bob");
  v1::ListJobsResponse jobs;
  auto alice_list = GrpcEnv::Context(kAliceKey);
  EXPECT_EQ(env_.stub()->ListJobs(alice_list.get(), bobs, &jobs).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  auto root_list = GrpcEnv::Context(kRootKey);
  ASSERT_TRUE(env_.stub()->ListJobs(root_list.get(), bobs, &jobs).ok());
  EXPECT_EQ(jobs.total_count(), 1);
  v1::GetServerInfoResponse info;
  auto anonymous = GrpcEnv::Context();
  EXPECT_EQ(env_.stub()->GetServerInfo(anonymous.get(), {}, &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto with_key = GrpcEnv::Context(kAliceKey);
  ASSERT_TRUE(env_.stub()->GetServerInfo(with_key.get(), {}, &info).ok());
  EXPECT_TRUE(info.auth());
}

TEST_F(AuthTest, KeysFromTheStoreWork) {
  const std::string carol = "carol-store-key-0000000004";
  const std::string dave = "dave-store-key-00000000005";
  ASSERT_TRUE(env_.core_env()->store()->AddApiKey("carol", "user", carol).ok());
  ASSERT_TRUE(env_.core_env()->store()->AddApiKey("dave", "admin", dave).ok());
  SubmitAs(kAliceKey);
  const int64_t carol_job = SubmitAs(carol);
  EXPECT_THAT(JobOwners(carol), ::testing::ElementsAre("carol"));
  EXPECT_THAT(JobOwners(dave), ::testing::ElementsAre("carol", "alice"));
  auto ctx = GrpcEnv::Context(carol);
  v1::GetJobRequest get;
  get.set_job_id(carol_job);
  v1::GetJobResponse got;
  ASSERT_TRUE(env_.stub()->GetJob(ctx.get(), get, &got).ok());
  EXPECT_EQ(got.job().owner(), "carol");
}

TEST(AuthFileTest, MalformedLineIsInvalidArgumentWithoutTheKey) {
  for (const std::string& bad :
       {std::string("short alice user\n"), std::string("long-enough-key-0001 alice\n"),
        std::string("long-enough-key-0001 alice superuser\n"),
        std::string("long-enough-key-0001\n")}) {
    const std::string text = std::string(kAliceKey) + " alice user\n" + bad;
    auto auth = Authenticator::Create(true, PrivateKeyFile(text), nullptr);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr("line 2")) << bad;
    EXPECT_THAT(std::string(auth.status().message()), Not(HasSubstr("long-enough-key")));
  }
}

TEST(AuthFileTest, MissingFileIsAnError) {
  EXPECT_FALSE(Authenticator::Create(true, "/nonexistent/fca/keys.txt", nullptr).ok());
}

TEST(AuthFileTest, KeyFileOpenToGroupOrOthersIsRefused) {
  const std::string text = std::string(kAliceKey) + " alice user\n";
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602, 0610, 0601, 0660, 0666}) {
    const std::string path = PrivateKeyFile(text, mode);
    auto auth = Authenticator::Create(true, path, nullptr);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kFailedPrecondition) << std::oct << mode;
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr("chmod 600 " + path));
    EXPECT_THAT(std::string(auth.status().message()), Not(HasSubstr(kAliceKey)));
  }
  for (mode_t mode : {0600, 0400}) {
    EXPECT_TRUE(Authenticator::Create(true, PrivateKeyFile(text, mode), nullptr).ok())
        << std::oct << mode;
  }
}

TEST(AuthFileTest, KeyFileNeedsAuthentication) {
  // --api_keys implies --auth in fca-server; an Authenticator that would
  // ignore its keys is refused rather than letting everyone in as admin.
  auto auth = Authenticator::Create(false, PrivateKeyFile(std::string(kAliceKey) + " alice user\n"),
                                    nullptr);
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------ Authenticate, no gRPC

// What Authenticate logs on stderr while it runs.
struct Outcome {
  absl::StatusOr<core::Caller> caller;
  std::string log;
};

Outcome AuthenticateCapturing(const Authenticator& auth, std::optional<std::string> header) {
  ::testing::internal::CaptureStderr();
  std::optional<absl::string_view> value;
  if (header) value = *header;
  Outcome outcome{auth.Authenticate(value, "ipv4:192.0.2.7:40000"), ""};
  outcome.log = ::testing::internal::GetCapturedStderr();
  return outcome;
}

Authenticator WithLookup(Authenticator::KeyLookup lookup) {
  auto auth = Authenticator::Create(true, "", std::move(lookup));
  EXPECT_TRUE(auth.ok()) << auth.status();
  return std::move(*auth);
}

TEST(AuthenticateTest, EachRefusalIsLoggedWithThePeerAndReasonButNeverTheKey) {
  const Authenticator auth = WithLookup(
      [](const std::string&, absl::string_view) -> absl::StatusOr<std::optional<core::Caller>> {
        return std::nullopt;
      });
  struct Case {
    std::optional<std::string> header;
    std::string reason;
  } cases[] = {
      {std::nullopt, "missing"},
      {std::string("Basic ") + kAliceKey, "malformed"},
      {std::string("Bearer"), "malformed"},
      {std::string("Bearer ") + kAliceKey, "unknown API key"},
  };
  for (const Case& c : cases) {
    const Outcome outcome = AuthenticateCapturing(auth, c.header);
    EXPECT_EQ(outcome.caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(outcome.log, HasSubstr("authentication failed"));
    EXPECT_THAT(outcome.log, HasSubstr("ipv4:192.0.2.7:40000"));
    EXPECT_THAT(outcome.log, HasSubstr(c.reason));
    EXPECT_THAT(outcome.log, Not(HasSubstr("alice-key"))) << outcome.log;
  }
}

TEST(AuthenticateTest, KeyStoreErrorIsUnavailableNotUnauthenticated) {
  const Authenticator auth = WithLookup(
      [](const std::string&, absl::string_view) -> absl::StatusOr<std::optional<core::Caller>> {
        return absl::UnavailableError("storage: database is locked (SELECT user, role ...)");
      });
  const Outcome outcome = AuthenticateCapturing(auth, std::string("Bearer ") + kAliceKey);
  EXPECT_EQ(outcome.caller.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.caller.status().message()), HasSubstr("retry"));
  // The store's detail goes to the log only, never to the client.
  EXPECT_THAT(std::string(outcome.caller.status().message()), Not(HasSubstr("locked")));
  EXPECT_THAT(outcome.log, HasSubstr("database is locked"));
  EXPECT_THAT(outcome.log, HasSubstr("ipv4:192.0.2.7:40000"));
  EXPECT_THAT(outcome.log, Not(HasSubstr(kAliceKey)));
}

TEST(AuthenticateTest, AnInternalStoreErrorIsUnavailableToo) {
  const Authenticator auth = WithLookup(
      [](const std::string&, absl::string_view) -> absl::StatusOr<std::optional<core::Caller>> {
        return absl::InternalError("storage: disk I/O error");
      });
  const Outcome outcome = AuthenticateCapturing(auth, std::string("Bearer ") + kAliceKey);
  EXPECT_EQ(outcome.caller.status().code(), absl::StatusCode::kUnavailable);
}

// A stream's key check (server/auth/stream_key_check.h): at every event,
// and while idle once per interval (a fake clock); a removed key ends the
// stream, a store that cannot answer does not.
TEST(StreamKeyCheckTest, ChecksAtEventsAndOncePerIntervalAndEndsOnARemovedKey) {
  std::atomic<int> lookups{0};
  std::atomic<bool> removed{false}, busy{false};
  const Authenticator auth = WithLookup(
      [&](const std::string&, absl::string_view) -> absl::StatusOr<std::optional<core::Caller>> {
        ++lookups;
        if (busy) return absl::UnavailableError("database is locked");
        if (removed) return std::optional<core::Caller>();
        return std::optional<core::Caller>(core::Caller{"alice"});
      });
  auth::StreamKeyCheck::Clock::time_point now{};
  auth::StreamKeyCheck check(&auth, std::string("Bearer ") + kAliceKey, "ipv4:192.0.2.7:1",
                             std::chrono::milliseconds(5000), [&] { return now; });
  EXPECT_TRUE(check.Check(false).ok());
  EXPECT_EQ(lookups, 0) << "idle checks wait for the interval";
  EXPECT_TRUE(check.Check(true).ok());
  EXPECT_EQ(lookups, 1) << "an event is checked at once";
  now += std::chrono::milliseconds(4999);
  EXPECT_TRUE(check.Check(false).ok());
  EXPECT_EQ(lookups, 1);
  now += std::chrono::milliseconds(1);
  busy = true;
  EXPECT_TRUE(check.Check(false).ok()) << "a store that cannot answer ends nothing";
  EXPECT_EQ(lookups, 2);
  busy = false;
  removed = true;
  ::testing::internal::CaptureStderr();
  const absl::Status ended = check.Check(true);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(ended.message()), HasSubstr("no longer valid"));
}

TEST(StreamKeyCheckTest, WithoutAuthNothingIsChecked) {
  auto auth = Authenticator::Create(false, "", Authenticator::KeyLookup());
  ASSERT_TRUE(auth.ok());
  auth::StreamKeyCheck check(&*auth, std::nullopt, "peer");
  EXPECT_TRUE(check.Check(true).ok());
}

// What a SQLite store answers when another connection holds its write lock
// past the busy timeout: two stores on one file, one waiting for nothing.
absl::Status RealBusyStatus() {
  const std::string path = WriteTempFile("") + ".sqlite";
  storage::StoreOptions options;
  options.path = path;
  options.busy_timeout_ms = 0;
  auto holder = storage::Store::Open(options);
  auto other = storage::Store::Open(options);
  if (!holder.ok() || !other.ok()) return absl::InternalError("cannot open the test stores");
  absl::Status busy;
  const absl::Status held = (*holder)->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR((*holder)->CreateJob("ann", "{}").status());
    busy = (*other)->AddApiKey("bob", "user", "bob-key-000000000009");
    return absl::OkStatus();
  });
  return held.ok() ? busy : held;
}

// A busy key store is the server's moment, not the caller's fault: through
// the real store, Authenticator and gRPC it is UNAVAILABLE ("retry"), never
// UNAUTHENTICATED or INTERNAL, and the same key works once the store answers.
TEST(BusyKeyStoreTest, IsUnavailableOverGrpcAndTheKeyWorksAfterwards) {
  const absl::Status busy_status = RealBusyStatus();
  ASSERT_EQ(busy_status.code(), absl::StatusCode::kUnavailable) << busy_status;
  std::atomic<bool> busy{false};
  ServerConfig config;
  config.auth = true;
  config.store.fault_injector = [&](std::string_view op) {
    return busy && op == "lookup_api_key" ? busy_status : absl::OkStatus();
  };
  GrpcEnv env(config);
  ASSERT_TRUE(env.started());
  constexpr char kCarolKey[] = "carol-key-0000000004";
  ASSERT_TRUE(env.core_env()->store()->AddApiKey("carol", "user", kCarolKey).ok());
  EXPECT_TRUE(env.ListModels(kCarolKey).ok());
  busy = true;
  ::testing::internal::CaptureStderr();
  const grpc::Status refused = env.ListModels(kCarolKey);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("retry"));
  EXPECT_THAT(log, HasSubstr("database is busy"));
  EXPECT_THAT(log, Not(HasSubstr("authentication failed")));
  busy = false;
  const grpc::Status again = env.ListModels(kCarolKey);
  EXPECT_TRUE(again.ok()) << again.error_message();
}

TEST(AuthenticateTest, FileKeysDoNotNeedTheStore) {
  auto auth = Authenticator::Create(
      true, PrivateKeyFile(std::string(kRootKey) + " root admin\n"),
      [](const std::string&, absl::string_view) -> absl::StatusOr<std::optional<core::Caller>> {
        return absl::UnavailableError("database is locked");
      });
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto caller = auth->Authenticate(std::string("Bearer ") + kRootKey, "peer");
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->user, "root");
  EXPECT_TRUE(caller->admin);
}

TEST_F(AuthTest, RefusedCallIsLoggedWithTheClientAddress) {
  ::testing::internal::CaptureStderr();
  const grpc::Status st = env_.ListModels("wrong-key-0000000000");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(log, HasSubstr("authentication failed: peer ipv4:127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("unknown API key"));
  EXPECT_THAT(log, Not(HasSubstr("wrong-key")));
}

TEST(AuthOffTest, EveryoneIsTheLocalAdmin) {
  GrpcEnv env;
  ASSERT_TRUE(env.started());
  ASSERT_TRUE(env.UploadEvalAndCalib("").ok());
  v1::Job job;
  ASSERT_TRUE(env.Submit("", SmallSpec({"fg_a"}, "eval", "calib"), &job).ok());
  EXPECT_EQ(job.owner(), "local");
  // Any key is ignored rather than refused.
  EXPECT_TRUE(env.ListModels("whatever-key-0000000").ok());
}

}  // namespace
}  // namespace fca::grpc_server
