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
#include <tuple>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
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

// QueryResults' filter by flat parameters: each a field of the request, else
// of its one message field (filter); page_size stays the request's own.
TEST(QueryToJsonTest, FlatParametersFillTheOneNestedMessage) {
  auto json = QueryToJson(*v1::QueryResultsRequest::descriptor(),
                          {{"job_id", "7"},
                           {"metric", "penalty"},
                           {"interventions", "correct"},
                           {"interventions", "neutral"},
                           {"page_size", "5"},
                           {"created_after", "2026-01-01T00:00:00Z"}});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"({"page_size":"5","filter":{"created_after":"2026-01-01T00:00:00Z",)"
                   R"("interventions":["correct","neutral"],"job_id":"7","metric":"penalty"}})");
  const absl::Status twice =
      QueryToJson(*v1::QueryResultsRequest::descriptor(), {{"metric", "a"}, {"metric", "b"}})
          .status();
  EXPECT_THAT(twice.message(), HasSubstr("'metric' is given more than once"));
  const absl::Status unknown =
      QueryToJson(*v1::QueryResultsRequest::descriptor(), {{"layer", "1"}}).status();
  EXPECT_EQ(unknown.message(),
            "unknown query parameter 'layer': QueryResultsRequest has no such field");
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

// Enum values print by their short names (no JOB_STATE_ anywhere) and are
// taken in either spelling, any case, in a body or (as the gateway turns a
// query into JSON) a query.
TEST_F(ApiHandlersTest, EnumsPrintShortAndAreTakenInEitherSpelling) {
  ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
  auto job =
      env_.Submit(Alice(), core::testing::SmallSpec({core::testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  const ApiReply got = Call("GetJob", "POST", absl::StrCat(R"({"job_id": ")", job->id(), "\"}"));
  ASSERT_EQ(got.status, 200) << got.json;
  EXPECT_EQ(Body(got).Find("job")->Find("state")->as_string(), "QUEUED") << got.json;
  EXPECT_THAT(got.json, ::testing::Not(HasSubstr("JOB_STATE_")));

  const ApiReply full = Call("ListJobs", "POST", R"({"state": "JOB_STATE_QUEUED"})");
  ASSERT_EQ(full.status, 200) << full.json;
  ASSERT_EQ(Body(full).Find("jobs")->as_array().size(), 1u) << full.json;
  for (const char* state : {"QUEUED", "queued", "job_state_queued"}) {
    EXPECT_EQ(Call("ListJobs", "POST", absl::StrCat(R"({"state": ")", state, "\"}")).json,
              full.json)
        << state;
    auto query = QueryToJson(*v1::ListJobsRequest::descriptor(), {{"state", state}});
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(Call("ListJobs", "GET", *query).json, full.json) << state;
  }
  const ApiReply none = Call("ListJobs", "GET", R"({"state": "SUCCEEDED"})");
  ASSERT_EQ(none.status, 200) << none.json;
  EXPECT_EQ(Body(none).Find("jobs")->as_array().size(), 0u) << none.json;
  EXPECT_EQ(Call("ListJobs", "POST", R"({"state": "DONE"})").status, 400);
}

// QueryResults by GET with flat parameters answers as the POSTed filter; an
// unknown metric is 400 listing the known ones (common/vocabulary.h).
TEST_F(ApiHandlersTest, QueryResultsByGetWithFlatParametersAndUnknownMetrics) {
  ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
  auto job =
      env_.Submit(Alice(), core::testing::SmallSpec({core::testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<storage::ResultRow> rows;
  for (const auto& [intervention, metric, value] :
       std::vector<std::tuple<std::string, std::string, double>>{
           {"correct", "nll", 2.0}, {"neutral", "nll", 2.5}, {"neutral", "penalty", 0.5}}) {
    storage::ResultRow row;
    row.model = core::testing::kGateA;
    row.weights_sha256 = "w";
    row.dataset_sha256 = "d";
    row.intervention = intervention;
    row.metric = metric;
    row.value = value;
    row.n = 6;
    rows.push_back(row);
  }
  ASSERT_TRUE(env_.store()->InsertResults(job->id(), rows).ok());
  const std::string id = absl::StrCat(job->id());

  const ApiReply posted = Call(
      "QueryResults", "POST",
      absl::StrCat(R"({"filter": {"job_id": ")", id, R"(", "metric": "nll"}, "page_size": 10})"));
  ASSERT_EQ(posted.status, 200) << posted.json;
  ASSERT_EQ(Body(posted).Find("results")->as_array().size(), 2u) << posted.json;
  auto query = QueryToJson(*v1::QueryResultsRequest::descriptor(),
                           {{"job_id", id}, {"metric", "nll"}, {"page_size", "10"}});
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(Call("QueryResults", "GET", *query).json, posted.json);
  query = QueryToJson(*v1::QueryResultsRequest::descriptor(),
                      {{"job_id", id}, {"intervention", "neutral"}, {"metric", "penalty"}});
  ASSERT_TRUE(query.ok()) << query.status();
  const ApiReply penalty = Call("QueryResults", "GET", *query);
  ASSERT_EQ(penalty.status, 200) << penalty.json;
  const json::Value penalty_body = Body(penalty);
  const json::Array& one = penalty_body.Find("results")->as_array();
  ASSERT_EQ(one.size(), 1u) << penalty.json;
  EXPECT_EQ(one[0].Find("value")->as_double(), 0.5);
  // The key's scope by its short name.
  EXPECT_EQ(one[0].Find("key")->Find("scope")->as_string(), "MODEL") << penalty.json;

  query =
      QueryToJson(*v1::QueryResultsRequest::descriptor(), {{"job_id", id}, {"metric", "nosuch"}});
  ASSERT_TRUE(query.ok()) << query.status();
  const ApiReply typo = Call("QueryResults", "GET", *query);
  EXPECT_EQ(typo.status, 400) << typo.json;
  EXPECT_EQ(Body(typo).Find("code")->as_string(), "INVALID_ARGUMENT");
  EXPECT_THAT(Body(typo).Find("message")->as_string(), HasSubstr("unknown metric 'nosuch'"));
  EXPECT_THAT(Body(typo).Find("message")->as_string(), HasSubstr("layer_penalty.<layer>"));
}

// Tokenize's text as a plain string; the bytes in base64 as text_base64;
// not both. The same ids either way, and as the core gives them.
TEST_F(ApiHandlersTest, TokenizeTakesTextAsAStringOrItsBytesInBase64) {
  const std::string text = "Hello, world \xc3\xa9\n";
  v1::TokenizeRequest request;
  request.set_model(core::testing::kGateA);
  request.set_text(text);
  auto direct = env_.core()->Tokenize(Alice(), request);
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_GT(direct->ids_size(), 0);

  json::Value body = json::Value::MakeObject();
  body.Set("model", json::Value::String(core::testing::kGateA));
  body.Set("text", json::Value::String(text));
  const ApiReply plain = Call("Tokenize", "POST", json::Write(body));
  ASSERT_EQ(plain.status, 200) << plain.json;
  const json::Value plain_body = Body(plain);
  const json::Array& ids = plain_body.Find("ids")->as_array();
  ASSERT_EQ(ids.size(), static_cast<size_t>(direct->ids_size())) << plain.json;
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i].as_int(), direct->ids(i)) << i;

  const std::string base64 =
      absl::StrCat(R"({"model": ")", core::testing::kGateA, R"(", "text_base64": ")",
                   absl::Base64Escape(text), "\"}");
  EXPECT_EQ(Call("Tokenize", "POST", base64).json, plain.json);
  // A query's text is a string too.
  auto query = QueryToJson(*v1::TokenizeRequest::descriptor(),
                           {{"model", core::testing::kGateA}, {"text", text}});
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(Call("Tokenize", "GET", *query).json, plain.json);

  const ApiReply both =
      Call("Tokenize", "POST", R"({"model": "fg_a", "text": "a", "text_base64": "YQ=="})");
  EXPECT_EQ(both.status, 400) << both.json;
  EXPECT_THAT(Body(both).Find("message")->as_string(), HasSubstr("not both"));
  EXPECT_EQ(Call("Tokenize", "POST", R"({"model": "fg_a", "text_base64": "not base64!"})").status,
            400);
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
