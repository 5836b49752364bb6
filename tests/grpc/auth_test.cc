// Bearer-token authentication (server/grpc/auth.h) through a real server:
// keys from the key file and from the store, and what each caller sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/grpc/grpc_env.h"

namespace fca::grpc_server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using core::testing::SmallSpec;
using testing::GrpcEnv;
using testing::ServerConfig;
using testing::WriteTempFile;

constexpr char kAliceKey[] = "alice-key-0000000001";
constexpr char kBobKey[] = "bob-key-000000000002";
constexpr char kRootKey[] = "root-key-00000000003";

ServerConfig AuthConfig() {
  ServerConfig config;
  config.auth = true;
  config.key_file = WriteTempFile(
      std::string("# test keys\n\n") + kAliceKey + " alice user\n" + kBobKey + " bob user\n" +
      kRootKey + " root admin\n");
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
    auto auth = Authenticator::Create(true, WriteTempFile(text), nullptr);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr("line 2")) << bad;
    EXPECT_THAT(std::string(auth.status().message()), Not(HasSubstr("long-enough-key")));
  }
}

TEST(AuthFileTest, MissingFileIsAnError) {
  EXPECT_FALSE(Authenticator::Create(true, "/nonexistent/fca/keys.txt", nullptr).ok());
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
