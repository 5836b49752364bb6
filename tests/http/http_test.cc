// The JSON-over-HTTP gateway end to end, on http_fixture.h's server, called
// over HTTP (cpp-httplib's client) and over gRPC side by side:
//
//   - every read endpoint answers what the same gRPC call answers (the
//     JSON parsed back into the response message, compared field by field);
//   - auth: no key 401, a worker key 403, another user's job 404, as gRPC;
//   - malformed JSON, unknown fields (named), wrong types: 400; an
//     oversized body 413; the server keeps serving;
//   - the event stream: the format, Last-Event-ID resumption misses and
//     repeats nothing, and it carries what WatchJob carries;
//   - the dashboard and the health endpoints.
// The server's own HTTP side (/metrics, HTTPS, its listening address,
// cross-site requests) is http_serving_test.cc's.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/http/http_fixture.h"

namespace fca::http_test {
namespace {

TEST_F(HttpTest, EveryReadEndpointAnswersAsOverGrpc) {
  using S = v1::AuditService::Stub;
  ExpectSame("ListModels", v1::ListModelsRequest(), kAlice, &S::ListModels);
  ExpectSame("ListDatasets", v1::ListDatasetsRequest(), kAlice, &S::ListDatasets);
  ExpectSame("ListDatasets", v1::ListDatasetsRequest(), kBob, &S::ListDatasets);
  v1::GetJobRequest get;
  get.set_job_id(job_);
  ExpectSame("GetJob", get, kAlice, &S::GetJob);
  ExpectSame("GetJob", get, kBob, &S::GetJob);  // NOT_FOUND both ways
  v1::ListJobsRequest list;
  ExpectSame("ListJobs", list, kAlice, &S::ListJobs);
  ExpectSame("ListJobs", list, kBob, &S::ListJobs);
  list.set_state(v1::JOB_STATE_SUCCEEDED);
  list.set_page_size(1);
  ExpectSame("ListJobs", list, kAlice, &S::ListJobs);
  list.set_page_token("not-a-token");
  ExpectSame("ListJobs", list, kAlice, &S::ListJobs);  // INVALID_ARGUMENT both ways
  v1::QueryResultsRequest query;
  query.mutable_filter()->set_job_id(job_);
  ExpectSame("QueryResults", query, kAlice, &S::QueryResults);
  ExpectSame("QueryResults", query, kBob, &S::QueryResults);
  // Paged: every page the same, rows included.
  query.set_page_size(7);
  for (int page = 0; page < 100; ++page) {
    ExpectSame("QueryResults", query, kAlice, &S::QueryResults);
    v1::QueryResultsResponse next;
    ASSERT_TRUE(stub_->QueryResults(Ctx(kAlice).get(), query, &next).ok());
    if (page == 0) {
      EXPECT_EQ(next.results_size(), 7);
    }
    if (next.next_page_token().empty()) break;
    query.set_page_token(next.next_page_token());
  }
  query.Clear();
  query.mutable_filter()->set_metric("nll");
  query.mutable_filter()->set_model("fg-a");
  ExpectSame("QueryResults", query, kAlice, &S::QueryResults);
  // Tokenize's JSON takes the text as a string (protobuf's mapping of the
  // bytes field, base64, is text_base64): the ids gRPC gives.
  v1::TokenizeRequest tokenize;
  tokenize.set_model("fg-a");
  tokenize.set_text("Hello, world \xc3\xa9\n");
  v1::TokenizeResponse tokenized;
  ASSERT_TRUE(stub_->Tokenize(Ctx(kAlice).get(), tokenize, &tokenized).ok());
  const Reply as_text =
      Post("/api/v1/Tokenize", R"({"model": "fg-a", "text": "Hello, world \u00e9\n"})", kAlice);
  ASSERT_EQ(as_text.status, 200) << as_text.body;
  v1::TokenizeResponse over_http;
  ASSERT_TRUE(FromJson(as_text.body, &over_http)) << as_text.body;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(tokenized, over_http))
      << tokenized.ShortDebugString() << "\n"
      << over_http.ShortDebugString();
  EXPECT_EQ(Post("/api/v1/Tokenize",
                 R"({"model": "fg-a", "text_base64": "SGVsbG8sIHdvcmxkIMOpCg=="})", kAlice)
                .body,
            as_text.body);
  EXPECT_EQ(Post("/api/v1/Tokenize", R"({"model": "no-such-model", "text": "a"})", kAlice).status,
            404);
  // Issue 11's report RPCs: the same reports both ways.
  v1::GetReportRequest report;
  report.set_job_id(job_);
  ExpectSame("GetReport", report, kAlice, &S::GetReport);
  v1::CompareJobsRequest compare;
  compare.add_job_ids(job_);
  ExpectSame("CompareJobs", compare, kAlice, &S::CompareJobs);
  v1::PoolJobsRequest pool;  // one job twice: refused alike both ways
  pool.add_job_ids(job_);
  pool.add_job_ids(job_);
  ExpectSame("PoolJobs", pool, kAlice, &S::PoolJobs);
  ExpectSame("GetServerInfo", v1::GetServerInfoRequest(), kAlice, &S::GetServerInfo);
  ExpectSame("GetQueue", v1::GetQueueRequest(), kAlice, &S::GetQueue);
  v1::ListJobWindowsRequest windows;
  windows.set_job_id(job_);
  windows.set_model("fg-a");
  ExpectSame("ListJobWindows", windows, kAlice, &S::ListJobWindows);

  // GET with no body is the empty request, for the read-only methods.
  const Reply get_models = Get("/api/v1/ListModels", kAlice);
  const Reply post_models = Post("/api/v1/ListModels", "", kAlice);
  EXPECT_EQ(get_models.status, 200);
  EXPECT_EQ(get_models.body, post_models.body);
  EXPECT_EQ(Get("/api/v1/ListJobs", kAlice).body, Post("/api/v1/ListJobs", "{}", kAlice).body);
  // Query parameters are the request's fields (query_params.h).
  const std::string id = std::to_string(job_);
  const Reply get_job = Get("/api/v1/GetJob?job_id=" + id, kAlice);
  EXPECT_EQ(get_job.status, 200) << get_job.body;
  EXPECT_EQ(get_job.body, Post("/api/v1/GetJob", "{\"job_id\": " + id + "}", kAlice).body);
  const Reply get_compare = Get("/api/v1/CompareJobs?job_ids=" + id, kAlice);  // repeated
  EXPECT_EQ(get_compare.status, 200) << get_compare.body;
  EXPECT_EQ(get_compare.body,
            Post("/api/v1/CompareJobs", "{\"job_ids\": [" + id + "]}", kAlice).body);
  // QueryResults' filter by flat parameters.
  const Reply flat = Get("/api/v1/QueryResults?job_id=" + id + "&metric=nll&page_size=3", kAlice);
  EXPECT_EQ(flat.status, 200) << flat.body;
  EXPECT_NE(flat.body.find("\"metric\":\"nll\""), std::string::npos) << flat.body;
  EXPECT_EQ(
      flat.body,
      Post("/api/v1/QueryResults",
           "{\"filter\": {\"job_id\": " + id + ", \"metric\": \"nll\"}, \"page_size\": 3}", kAlice)
          .body);
  const Reply typo = Get("/api/v1/QueryResults?job_id=" + id + "&metric=nosuch", kAlice);
  EXPECT_EQ(typo.status, 400) << typo.body;
  EXPECT_NE(typo.body.find("unknown metric 'nosuch'"), std::string::npos) << typo.body;
  // An enum by its full or short name, in any case, in a query or a body.
  const std::string listed =
      Post("/api/v1/ListJobs", "{\"state\": \"JOB_STATE_SUCCEEDED\", \"page_size\": 1}", kAlice)
          .body;
  EXPECT_NE(listed.find("\"state\":\"SUCCEEDED\""), std::string::npos) << listed;
  for (const char* state : {"JOB_STATE_SUCCEEDED", "SUCCEEDED", "succeeded"}) {
    EXPECT_EQ(Get(absl::StrCat("/api/v1/ListJobs?state=", state, "&page_size=1"), kAlice).body,
              listed)
        << state;
    EXPECT_EQ(Post("/api/v1/ListJobs",
                   absl::StrCat("{\"state\": \"", state, "\", \"page_size\": 1}"), kAlice)
                  .body,
              listed)
        << state;
  }
}

TEST_F(HttpTest, JsonFollowsTheProto3MappingWithProtoFieldNames) {
  const Reply r = Post("/api/v1/GetJob", "{\"job_id\": \"" + std::to_string(job_) + "\"}", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find('\n'), std::string::npos);
  // int64 as strings, snake_case names, defaults printed, enums by their
  // short names.
  EXPECT_NE(r.body.find("\"id\":\"" + std::to_string(job_) + "\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"cancel_requested\":false"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"window_length\":\"16\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"state\":\"SUCCEEDED\""), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("JOB_STATE_"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"error\":\"\""), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("cancelRequested"), std::string::npos) << r.body;
  // Both spellings of a field are accepted on input, as the mapping says.
  EXPECT_EQ(Post("/api/v1/GetJob", "{\"jobId\": " + std::to_string(job_) + "}", kAlice).body,
            r.body);
  const Reply list = Post("/api/v1/ListJobs", "{\"page_size\": 1}", kAlice);
  EXPECT_NE(list.body.find("\"next_page_token\":"), std::string::npos) << list.body;
}

TEST_F(HttpTest, AuthIsTheSameAsOnGrpc) {
  const std::string get = "{\"job_id\": " + std::to_string(job_) + "}";
  // No key, a malformed header, an unknown key: 401.
  Reply r = Post("/api/v1/GetJob", get, "");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Header("WWW-Authenticate"), "Bearer");
  EXPECT_NE(r.body.find("\"code\":\"UNAUTHENTICATED\""), std::string::npos) << r.body;
  EXPECT_EQ(Post("/api/v1/GetJob", get, "", {{"Authorization", "Basic YWxpY2U6eA=="}}).status, 401);
  EXPECT_EQ(Post("/api/v1/GetJob", get, "not-a-key-0123456789").status, 401);
  EXPECT_EQ(Get("/api/v1/ListModels", "").status, 401);
  EXPECT_EQ(Get("/api/v1/jobs/" + std::to_string(job_) + "/events", "").status, 401);
  // A worker key reaches nothing of the AuditService: 403, as on gRPC.
  r = Post("/api/v1/ListModels", "", kWorker);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("\"code\":\"PERMISSION_DENIED\""), std::string::npos) << r.body;
  v1::ListModelsResponse unused;
  EXPECT_EQ(stub_->ListModels(Ctx(kWorker).get(), v1::ListModelsRequest(), &unused).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Get("/api/v1/jobs/" + std::to_string(job_) + "/events", kWorker).status, 403);
  // Another user's job does not exist for bob: 404, for every method.
  for (const char* method : {"GetJob", "CancelJob", "DeleteJob", "GetReport"}) {
    r = Post(std::string("/api/v1/") + method, get, kBob);
    EXPECT_EQ(r.status, 404) << method << ": " << r.body;
    EXPECT_NE(r.body.find("\"code\":\"NOT_FOUND\""), std::string::npos) << r.body;
  }
  EXPECT_EQ(Get("/api/v1/jobs/" + std::to_string(job_) + "/events", kBob).status, 404);
  EXPECT_EQ(Get("/api/v1/jobs/999999/events", kAlice).status, 404);
  // alice's job is still there.
  EXPECT_EQ(Post("/api/v1/GetJob", get, kAlice).status, 200);
  // Metrics and health need no key.
  EXPECT_EQ(Get("/metrics", "").status, 200);
  EXPECT_EQ(Get("/healthz", "").status, 200);
  EXPECT_EQ(Get("/readyz", "").status, 200);
}

TEST_F(HttpTest, BadRequestsAreRefusedNamingTheFieldAndTheServerKeepsServing) {
  struct Case {
    std::string method, body, must_name;
  };
  const std::vector<Case> cases = {
      {"GetJob", "{\"job_id\": 1, \"bogus\": 2}", "bogus"},
      {"QueryResults", "{\"filter\": {\"jobid\": 1}}", "jobid"},
      {"SubmitAudit", "{\"spec\": {\"models\": [\"fg-a\"], \"window_len\": 16}}", "window_len"},
      {"GetJob", "{\"job_id\": \"seven\"}", "job_id"},
      {"ListJobs", "{\"state\": \"JOB_STATE_NOPE\"}", "state"},
      {"GetJob", "{", ""},
      {"GetJob", "[1, 2]", ""},
      {"GetJob", "null", ""},
      {"GetJob", "{\"job_id\": 1} trailing", ""},
      {"Tokenize", "{\"model\": \"fg-a\", \"text_base64\": \"not base64!\"}", "text"},
      {"ListModels", "\xff\xfe", ""},
  };
  for (const Case& c : cases) {
    const Reply r = Post("/api/v1/" + c.method, c.body, kAlice);
    EXPECT_EQ(r.status, 400) << c.method << " " << c.body << ": " << r.body;
    EXPECT_NE(r.body.find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << r.body;
    if (!c.must_name.empty()) {
      EXPECT_NE(r.body.find(c.must_name), std::string::npos) << c.body << ": " << r.body;
    }
  }
  // A query parameter is honoured or refused naming it, never ignored.
  const std::vector<std::pair<std::string, std::string>> queries = {
      {"/api/v1/GetJob?jobid=1", "'jobid'"},
      {"/api/v1/ListModels?verbose=1", "'verbose'"},
      {"/api/v1/GetJob?job_id=1&job_id=2", "'job_id' is given more than once"},
      {"/api/v1/QueryResults?filter=x", "'filter' cannot be given in a query"},
      {"/api/v1/GetJob?job_id=seven", "job_id"},
  };
  for (const auto& [path, message] : queries) {
    const Reply r = Get(path, kAlice);
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_NE(r.body.find(message), std::string::npos) << path << ": " << r.body;
  }
  // A stream has no JSON form: 501 saying where it is served.
  for (const char* method : {"UploadDataset", "WatchJob", "ExportCoefficients"}) {
    const Reply r = Post(std::string("/api/v1/") + method, "{}", kAlice);
    EXPECT_EQ(r.status, 501) << method << ": " << r.body;
    EXPECT_NE(r.body.find("use gRPC or the fca CLI"), std::string::npos) << r.body;
  }
  EXPECT_NE(Post("/api/v1/UploadDataset", "{}", kAlice).body.find("fca datasets upload"),
            std::string::npos);
  // Not a method, not a read-only method over GET, a body too large.
  EXPECT_EQ(Post("/api/v1/NoSuchMethod", "{}", kAlice).status, 404);
  EXPECT_EQ(Get("/api/v1/SubmitAudit", kAlice).status, 405);
  EXPECT_EQ(Get("/api/v1/CancelJob", kAlice).status, 405);
  EXPECT_EQ(Get("/no/such/path", kAlice).status, 404);
  const Reply big = Post("/api/v1/Tokenize", std::string(17 << 20, ' '), kAlice);
  EXPECT_EQ(big.status, 413) << big.body.substr(0, 200);
  // Event streams: a bad sequence number.
  const std::string events = "/api/v1/jobs/" + std::to_string(job_) + "/events";
  EXPECT_EQ(Get(events + "?after_seq=-1", kAlice).status, 400);
  EXPECT_EQ(Get(events, kAlice, {{"Last-Event-ID", "x"}}).status, 400);
  // A body sent in chunks (no Content-Length): refused, whatever its size
  // (the gateway reads whole requests first, server/http/reception.h).
  {
    httplib::Client c = Client();
    auto r = c.Post(
        "/api/v1/Tokenize", Auth(kAlice),
        [sent = size_t{0}](size_t, httplib::DataSink& sink) mutable {
          const std::string chunk(1 << 20, ' ');
          if (sent >= (20u << 20)) {
            sink.done();
            return true;
          }
          sent += chunk.size();
          return sink.write(chunk.data(), chunk.size());
        },
        "application/json");
    // Refused with 411, or the connection closed while the client was
    // still sending: either way not served.
    if (r) {
      EXPECT_EQ(r->status, 411);
    }
  }
  // Header names are tokens (RFC 9112 5.1, 5.2): whitespace before the
  // colon, or a folded line, is a 400, not a header to ignore or join.
  for (const char* head : {"Content-Length : 2\r\n", "Content-Length\t: 2\r\n",
                           "Content-Length: 2\r\nX-A: b\r\n folded\r\n", ": 2\r\n"}) {
    const std::string reply =
        RawExchange(std::string("POST /api/v1/ListModels HTTP/1.1\r\nHost: x\r\n") + head +
                    "Authorization: Bearer " + kAlice + "\r\n\r\n{}");
    EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << head << reply.substr(0, 200);
  }
  // Bytes that are not HTTP at all.
  EXPECT_EQ(RawExchange("GARBAGE\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(RawExchange(std::string(10000, 'A') + "\r\n\r\n").rfind("HTTP/1.1 4", 0), 0u);
  // Still serving.
  EXPECT_EQ(Get("/healthz", "").status, 200);
  EXPECT_EQ(Post("/api/v1/ListModels", "", kAlice).status, 200);
}

TEST_F(HttpTest, EventStreamResumesFromLastEventIdWithoutLoss) {
  const int64_t job = Submit(Spec("eval", "calib"), kAlice);
  const std::string path = "/api/v1/jobs/" + std::to_string(job) + "/events";
  // The first events, then the connection drops.
  bool done = false;
  Reply head;
  std::vector<Event> first = ReadEvents(path, kAlice, {}, 2, &done, &head);
  ASSERT_EQ(first.size(), 2u);
  // Resume: Last-Event-ID wins over ?after_seq.
  std::vector<Event> rest =
      ReadEvents(path + "?after_seq=0", kAlice,
                 {{"Last-Event-ID", std::to_string(first.back().id)}}, 1 << 20, &done, &head);
  EXPECT_TRUE(done) << "the stream did not end after the terminal event";
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.Header("Content-Type"), "text/event-stream");
  std::vector<Event> all = first;
  all.insert(all.end(), rest.begin(), rest.end());
  ASSERT_GE(all.size(), 3u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id, static_cast<int64_t>(i) + 1) << "missed or repeated an event";
    EXPECT_EQ(all[i].type, "job");
  }
  v1::WatchJobResponse last;
  ASSERT_TRUE(FromJson(all.back().data, &last));
  EXPECT_EQ(last.event().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(last.job().state(), v1::JOB_STATE_SUCCEEDED);

  // The same events as WatchJob over gRPC.
  v1::WatchJobRequest watch;
  watch.set_job_id(job);
  auto context = Ctx(kAlice);
  auto reader = stub_->WatchJob(context.get(), watch);
  std::vector<v1::JobEvent> over_grpc;
  v1::WatchJobResponse response;
  while (reader->Read(&response)) over_grpc.push_back(response.event());
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(over_grpc.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    v1::WatchJobResponse over_http;
    ASSERT_TRUE(FromJson(all[i].data, &over_http));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(over_grpc[i], over_http.event()))
        << over_grpc[i].ShortDebugString() << "\n"
        << over_http.event().ShortDebugString();
  }
  // From the start again (?after_seq=), and past the end: nothing more.
  std::vector<Event> tail =
      ReadEvents(path + "?after_seq=" + std::to_string(all.size() - 1), kAlice, {}, 100, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].id, static_cast<int64_t>(all.size()));
  tail = ReadEvents(path, kAlice, {{"Last-Event-ID", std::to_string(all.size())}}, 100, &done);
  EXPECT_TRUE(done);
  EXPECT_TRUE(tail.empty());
}

TEST_F(HttpTest, DashboardAndHealth) {
  Reply r = Get("/", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("Content-Type").rfind("text/html", 0), 0u) << r.Header("Content-Type");
  EXPECT_EQ(Get("/ui/", "").body, r.body);
  EXPECT_EQ(Get("/ui/no-such-file.js", "").status, 404);
  EXPECT_EQ(Get("/healthz", "").body, "ok\n");
  EXPECT_EQ(Get("/readyz", "").body, "ready\n");
}

}  // namespace
}  // namespace fca::http_test
