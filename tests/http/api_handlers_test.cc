// The HTTP API's methods without a socket (server/http/api_handlers.h): the
// served methods derived from the service descriptor and its bindings, and
// HandleUnary over a real core (temporary store, tiny models).
#include "server/http/api_handlers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "server/http/query_params.h"
#include "tests/core/core_env.h"

namespace fca::http {
namespace {

namespace v1 = ::fca::v1;
using core::testing::Alice;
using core::testing::CoreEnv;
using ::testing::HasSubstr;

// Every unary method of fca.v1.AuditService and whether it changes state.
const std::map<std::string, bool>& ExpectedReadOnly() {
  static const auto* const methods =
      new std::map<std::string, bool>{{"ListModels", true},
                                      {"ListDatasets", true},
                                      {"SubmitAudit", false},
                                      {"GetJob", true},
                                      {"ListJobs", true},
                                      {"CancelJob", false},
                                      {"DeleteJob", false},
                                      {"DeleteDataset", false},
                                      {"QueryResults", true},
                                      {"Tokenize", true},
                                      {"GetReport", true},
                                      {"CompareJobs", true},
                                      {"PoolJobs", true},
                                      {"GetServerInfo", true},
                                      {"ListJobWindows", true},
                                      {"BackupDatabase", false},
                                      {"CreateApiKey", false},
                                      {"ListApiKeys", true},
                                      {"RevokeApiKey", false},
                                      {"RotateApiKey", false},
                                      {"QueryAuditLog", true},
                                      {"AddWebhook", false},
                                      {"ListWebhooks", true},
                                      {"RemoveWebhook", false},
                                      {"ListWebhookDeliveries", true},
                                      {"CreateProject", false},
                                      {"ListProjects", true},
                                      {"GetProject", true},
                                      {"AddProjectMember", false},
                                      {"RemoveProjectMember", false},
                                      {"DeleteProject", false},
                                      {"GetQueue", true},
                                      {"GetRetention", true},
                                      {"SetRetention", false}};
  return *methods;
}

// A GET's query as the request's proto3 JSON: strings for every scalar but
// a bool, arrays for repeated fields, Timestamps as their RFC 3339 text.
TEST(QueryToJsonTest, GivesTheFieldsAndRefusesWhatIsNoField) {
  auto json =
      QueryToJson(*v1::CompareJobsRequest::descriptor(), {{"job_ids", "1"}, {"job_ids", "2"}});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"({"job_ids":["1","2"]})");
  json = QueryToJson(*v1::ListJobsRequest::descriptor(),
                     {{"state", "JOB_STATE_QUEUED"}, {"created_after", "2026-01-01T00:00:00Z"}});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"({"created_after":"2026-01-01T00:00:00Z","state":"JOB_STATE_QUEUED"})");
  EXPECT_EQ(QueryToJson(*v1::GetJobRequest::descriptor(), {}).value(), "{}");
  const absl::Status unknown =
      QueryToJson(*v1::GetJobRequest::descriptor(), {{"id", "1"}}).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(), "unknown query parameter 'id': GetJobRequest has no such field");
}

TEST(CheckBindingsTest, TheTableBindsEveryUnaryMethodAndNothingElse) {
  EXPECT_TRUE(CheckBindings(AuditServiceDescriptor(), CoreBindings()).ok());

  std::map<std::string, CoreBinding> missing = CoreBindings();
  missing.erase("GetJob");
  const absl::Status no_handler = CheckBindings(AuditServiceDescriptor(), missing);
  EXPECT_EQ(no_handler.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(no_handler.message(), HasSubstr("fca.v1.AuditService.GetJob has no HTTP binding"));

  for (const char* extra : {"Bogus", "WatchJob", "UploadDataset", "ExportCoefficients"}) {
    std::map<std::string, CoreBinding> more = CoreBindings();
    more[extra] = CoreBindings().at("ListModels");
    const absl::Status no_method = CheckBindings(AuditServiceDescriptor(), more);
    EXPECT_EQ(no_method.code(), absl::StatusCode::kInternal) << extra;
    EXPECT_THAT(no_method.message(),
                HasSubstr(absl::StrCat("the HTTP binding ", extra, " names no unary method")));
  }

  std::map<std::string, CoreBinding> swapped = CoreBindings();
  swapped["GetJob"] = CoreBindings().at("ListJobs");
  const absl::Status wrong_types = CheckBindings(AuditServiceDescriptor(), swapped);
  EXPECT_THAT(wrong_types.message(), HasSubstr("GetJob takes or gives other messages"));
}

class ApiHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ApiHandlers> api = ApiHandlers::Create(env_.core());
    ASSERT_TRUE(api.ok()) << api.status();
    api_.emplace(std::move(*api));
  }

  // A call admitted as Alice; counts the admissions.
  ApiReply Call(const std::string& name, const std::string& http_method, const std::string& body) {
    return api_->HandleUnary(name, http_method, body,
                             [this](const ApiMethod&) -> std::variant<core::Caller, ApiReply> {
                               ++admitted_;
                               return Alice();
                             });
  }

  // The reply's JSON, parsed.
  static json::Value Body(const ApiReply& reply) {
    absl::StatusOr<json::Value> v = json::Parse(reply.json);
    EXPECT_TRUE(v.ok()) << v.status() << ": " << reply.json;
    return v.ok() ? *v : json::Value();
  }

  CoreEnv env_;
  std::optional<ApiHandlers> api_;
  int admitted_ = 0;
};

TEST_F(ApiHandlersTest, ServesTheUnaryMethodsWithGetForTheReadOnlyOnes) {
  for (const auto& [name, read_only] : ExpectedReadOnly()) {
    const ApiMethod* method = api_->Find(name);
    ASSERT_NE(method, nullptr) << name;
    EXPECT_EQ(method->name, name);
    EXPECT_EQ(method->read_only, read_only) << name;
  }
  for (const char* stream : {"WatchJob", "UploadDataset", "ExportCoefficients"}) {
    EXPECT_EQ(api_->Find(stream), nullptr) << stream;
  }
}

TEST_F(ApiHandlersTest, UnknownMethodIs404BeforeAdmission) {
  const ApiReply reply = Call("NoSuchMethod", "POST", "{}");
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(Body(reply).Find("code")->as_string(), "NOT_FOUND");
  EXPECT_THAT(Body(reply).Find("message")->as_string(), HasSubstr("no such method: NoSuchMethod"));
  EXPECT_EQ(admitted_, 0);
}

TEST_F(ApiHandlersTest, GetOnAMethodThatChangesStateIs405BeforeAdmission) {
  const ApiReply reply = Call("SubmitAudit", "GET", "");
  EXPECT_EQ(reply.status, 405);
  EXPECT_EQ(Body(reply).Find("code")->as_string(), "INVALID_ARGUMENT");
  EXPECT_THAT(Body(reply).Find("message")->as_string(),
              HasSubstr("SubmitAudit changes state: use POST"));
  EXPECT_THAT(reply.headers,
              ::testing::Contains(std::make_pair(std::string("Allow"), std::string("POST"))));
  EXPECT_EQ(admitted_, 0);
}

TEST_F(ApiHandlersTest, AnAdmissionRefusalIsTheReply) {
  const ApiReply reply = api_->HandleUnary(
      "ListModels", "GET", "", [](const ApiMethod& method) -> std::variant<core::Caller, ApiReply> {
        EXPECT_TRUE(method.read_only);
        return ErrorReply(absl::UnauthenticatedError("unknown API key"));
      });
  EXPECT_EQ(reply.status, 401);
  EXPECT_EQ(Body(reply).Find("code")->as_string(), "UNAUTHENTICATED");
  EXPECT_THAT(reply.headers, ::testing::Contains(std::make_pair(std::string("WWW-Authenticate"),
                                                                std::string("Bearer"))));
}

TEST_F(ApiHandlersTest, MalformedJsonIs400NamingTheFieldOrTheProblem) {
  const ApiReply unknown = Call("ListJobs", "POST", R"({"bogus": 1})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(Body(unknown).Find("code")->as_string(), "INVALID_ARGUMENT");
  EXPECT_THAT(Body(unknown).Find("message")->as_string(),
              HasSubstr("not a valid fca.v1.ListJobsRequest in JSON: bogus"));
  const ApiReply syntax = Call("GetJob", "POST", "{\"job_id\": ");
  EXPECT_EQ(syntax.status, 400);
  EXPECT_THAT(Body(syntax).Find("message")->as_string(),
              HasSubstr("not a valid fca.v1.GetJobRequest in JSON"));
  // A request without fields still refuses unknown ones.
  EXPECT_EQ(Call("GetServerInfo", "POST", R"({"x": 1})").status, 400);
}

TEST_F(ApiHandlersTest, ListModelsAndGetServerInfoAnswerWithProtoJson) {
  const ApiReply models = Call("ListModels", "GET", "  \r\n");  // blank: the empty message
  ASSERT_EQ(models.status, 200) << models.json;
  const json::Value listed = Body(models);
  ASSERT_NE(listed.Find("models"), nullptr) << models.json;
  std::set<std::string> names;
  for (const json::Value& m : listed.Find("models")->as_array()) {
    names.insert(m.Find("name")->as_string());
  }
  EXPECT_TRUE(names.count(core::testing::kGateA)) << models.json;
  EXPECT_EQ(admitted_, 1);

  const ApiReply info = Call("GetServerInfo", "POST", "{}");
  ASSERT_EQ(info.status, 200) << info.json;
  // Proto field names, every field present, int64 as strings.
  const json::Value described = Body(info);
  const json::Value* max_bytes = described.Find("max_dataset_bytes");
  ASSERT_NE(max_bytes, nullptr) << info.json;
  EXPECT_EQ(max_bytes->as_string(), std::to_string(env_.core()->limits().max_dataset_bytes));
}

TEST_F(ApiHandlersTest, AnUnknownJobIs404) {
  const ApiReply reply = Call("GetJob", "GET", R"({"job_id": "424242"})");
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(Body(reply).Find("code")->as_string(), "NOT_FOUND");
}

TEST(ErrorReplyTest, StatusMappingAndValidJsonForAnyMessage) {
  EXPECT_EQ(ErrorReply(absl::FailedPreconditionError("running")).status, 409);
  EXPECT_EQ(ErrorReply(absl::ResourceExhaustedError("full")).status, 429);
  EXPECT_EQ(ErrorReply(absl::ResourceExhaustedError("too large"), 413).status, 413);
  EXPECT_EQ(ErrorReply(absl::DataLossError("?")).status, 500);
  const ApiReply reply = ErrorReply(absl::NotFoundError("no model \"a\xFF\" \n here"));
  absl::StatusOr<json::Value> body = json::Parse(reply.json);
  ASSERT_TRUE(body.ok()) << body.status() << ": " << reply.json;
  EXPECT_EQ(body->Find("message")->as_string(), "no model \"a?\" \n here");
  EXPECT_TRUE(reply.headers.empty());
}

}  // namespace
}  // namespace fca::http
