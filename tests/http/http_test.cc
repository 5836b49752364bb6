// The JSON-over-HTTP gateway and /metrics end to end: a real fca-server
// (tiny models, API keys, one worker of its own) on 127.0.0.1, called over
// HTTP (cpp-httplib's client) and over gRPC side by side.
//
//   - every read endpoint answers what the same gRPC call answers (the
//     JSON parsed back into the response message, compared field by field);
//   - auth: no key 401, a worker key 403, another user's job 404, as gRPC;
//   - malformed JSON, unknown fields (named), wrong types: 400; an
//     oversized body 413; the server keeps serving;
//   - the event stream: the format, Last-Event-ID resumption misses and
//     repeats nothing, and it carries what WatchJob carries;
//   - /metrics passes a strict text-format parser (prom_text.h) and its
//     counters move when jobs run (jobs, RPCs, HTTP requests, the
//     coefficient cache, forwards).
#include <arpa/inet.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "tests/e2e/process.h"
#include "tests/http/prom_text.h"

namespace fca {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using e2e::CommandResult;
using e2e::ServerProcess;

constexpr char kAlice[] = "alice-key-0123456789abcdef";
constexpr char kBob[] = "bob-key-0123456789abcdefgh";
constexpr char kWorker[] = "pool-worker-key-0123456789";

using e2e::WriteFile;

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out, o).ok());
  return out;
}

// The JSON text parsed into `m` (unknown fields refused: the server prints
// nothing the proto does not have).
bool FromJson(const std::string& json, google::protobuf::Message* m) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(json, m, o);
  EXPECT_TRUE(st.ok()) << st.ToString() << ": " << json.substr(0, 300);
  return st.ok();
}

std::string Describe(const grpc::Status& s) {
  return std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
}

// The HTTP status the gateway maps a gRPC code to (gateway.h).
int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

const char* CodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : "?";
}

struct Reply {
  int status = 0;  // 0: no answer
  std::string body;
  httplib::Headers headers;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

Reply ToReply(const httplib::Result& result) {
  Reply r;
  if (result) {
    r.status = result->status;
    r.body = result->body;
    r.headers = result->headers;
  }
  return r;
}

// One event of a stream: its id line, event line and data line.
struct Event {
  int64_t id = 0;
  std::string type, data;
};

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A write to a connection the server closed (a refused body) must fail,
    // not end the test.
    signal(SIGPIPE, SIG_IGN);
    root_ = new std::string(::testing::TempDir() + "fca_http_" + std::to_string(getpid()));
    const std::string& root = *root_;
    fs::create_directories(root + "/models");
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"fg-a", {"--seed=1", "--controller_out_std=1.0"}},
             {"dense", {"--family=dense", "--seed=1"}}}) {
      CommandResult r = e2e::InitTinyModel(FCA_LOCAL_AUDIT_BIN, root + "/models/" + name, flags);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    WriteFile(root + "/keys", std::string(kAlice) + " alice user\n" + kBob + " bob user\n" +
                                  kWorker + " pool worker\n");
    fs::permissions(root + "/keys", fs::perms::owner_read | fs::perms::owner_write);
    server_ = e2e::StartServer(FCA_SERVER_BIN,
                               {"--models=" + root + "/models", "--db=" + root + "/fca.sqlite",
                                "--threads=1", "--workers=1", "--api_keys=" + root + "/keys"})
                  .release();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->http_port(), 0) << "no 'http listening on' line";
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    stub_ = v1::AuditService::NewStub(*channel_).release();
    Upload("eval", e2e::RandomWords(16 * 24, 1));
    Upload("calib", e2e::RandomWords(16 * 16, 2));
    job_ = Submit(Spec("eval", "calib"), kAlice);
    ASSERT_EQ(WaitJob(job_, kAlice), v1::JOB_STATE_SUCCEEDED);
  }

  static void TearDownTestSuite() {
    delete stub_;
    delete channel_;
    if (server_ != nullptr) {
      server_->Signal(SIGTERM);
      EXPECT_EQ(server_->Wait(30), 0) << server_->Stderr();
      delete server_;
    }
    fs::remove_all(*root_);
    delete root_;
  }

  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& key) {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  static void Upload(const std::string& name, const std::string& bytes) {
    auto context = Ctx(kAlice);
    v1::UploadDatasetResponse response;
    auto writer = stub_->UploadDataset(context.get(), &response);
    v1::UploadDatasetRequest part;
    part.mutable_header()->set_name(name);
    part.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
    part.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    ASSERT_TRUE(writer->Write(part));
    part.set_chunk(bytes);
    ASSERT_TRUE(writer->Write(part));
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    ASSERT_TRUE(status.ok()) << Describe(status);
  }

  static v1::AuditSpec Spec(const std::string& eval, const std::string& calib) {
    v1::AuditSpec spec;
    spec.add_models("fg-a");
    spec.set_dense_twin("dense");
    spec.set_eval_dataset(eval);
    spec.set_calib_dataset(calib);
    spec.set_window_length(16);
    spec.set_batch_size(4);
    spec.set_bootstrap_resamples(100);
    spec.set_timing_repeats(2);
    spec.set_seed(5);
    return spec;
  }

  // Submits over HTTP; the job's id.
  static int64_t Submit(const v1::AuditSpec& spec, const std::string& key) {
    v1::SubmitAuditRequest request;
    *request.mutable_spec() = spec;
    Reply r = Post("/api/v1/SubmitAudit", ToJson(request), key);
    EXPECT_EQ(r.status, 200) << r.body;
    v1::SubmitAuditResponse response;
    FromJson(r.body, &response);
    return response.job().id();
  }

  static v1::JobState WaitJob(int64_t id, const std::string& key) {
    const auto deadline = Clock::now() + std::chrono::seconds(90);
    v1::GetJobResponse response;
    while (Clock::now() < deadline) {
      Reply r = Post("/api/v1/GetJob", "{\"job_id\": " + std::to_string(id) + "}", key);
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.status != 200 || !FromJson(r.body, &response)) break;
      const v1::JobState s = response.job().state();
      if (s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
          s == v1::JOB_STATE_CANCELLED) {
        EXPECT_EQ(response.job().error(), "");
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not end";
    return response.job().state();
  }

  static httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(60, 0);
    c.set_connection_timeout(10, 0);
    return c;
  }

  static httplib::Headers Auth(const std::string& key) {
    if (key.empty()) return {};
    return {{"Authorization", "Bearer " + key}};
  }

  static Reply Post(const std::string& path, const std::string& body, const std::string& key,
                    httplib::Headers headers = {}) {
    httplib::Client c = Client();
    for (auto& h : Auth(key)) headers.insert(h);
    auto result = c.Post(path.c_str(), headers, body, "application/json");
    return ToReply(result);
  }

  static Reply Get(const std::string& path, const std::string& key, httplib::Headers headers = {}) {
    httplib::Client c = Client();
    for (auto& h : Auth(key)) headers.insert(h);
    auto result = c.Get(path.c_str(), headers);
    return ToReply(result);
  }

  // The events of a stream, read until it ends or `stop_after` events
  // came (then the connection is dropped). `done` says whether the server
  // ended it.
  static std::vector<Event> ReadEvents(const std::string& path, const std::string& key,
                                       httplib::Headers headers, size_t stop_after, bool* done,
                                       Reply* reply = nullptr) {
    httplib::Client c = Client();
    for (auto& h : Auth(key)) headers.insert(h);
    std::string buffer;
    std::vector<Event> events;
    auto result = c.Get(path.c_str(), headers, [&](const char* data, size_t n) {
      buffer.append(data, n);
      size_t end;
      while ((end = buffer.find("\n\n")) != std::string::npos) {
        const std::string block = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (!block.empty() && block[0] == ':') continue;  // a comment (keep-alive)
        Event e;
        std::istringstream lines(block);
        std::string line;
        int fields = 0;
        while (std::getline(lines, line)) {
          ++fields;
          if (line.rfind("id: ", 0) == 0) {
            e.id = std::stoll(line.substr(4));
          } else if (line.rfind("event: ", 0) == 0) {
            e.type = line.substr(7);
          } else if (line.rfind("data: ", 0) == 0) {
            e.data = line.substr(6);
          } else {
            ADD_FAILURE() << "unexpected line in an event: " << line;
          }
        }
        EXPECT_LE(fields, 3) << block;
        events.push_back(e);
        if (events.size() >= stop_after) return false;
      }
      return true;
    });
    *done = static_cast<bool>(result);
    if (reply != nullptr && result) {
      reply->status = result->status;
      reply->headers = result->headers;
      reply->body = result->body;
    }
    return events;
  }

  // The call over gRPC and over HTTP answer the same: OK with equal
  // messages, or the same error (HTTP status and JSON code).
  template <typename Req, typename Resp>
  static void ExpectSame(const std::string& method, const Req& request, const std::string& key,
                         grpc::Status (v1::AuditService::Stub::*call)(grpc::ClientContext*,
                                                                      const Req&, Resp*)) {
    SCOPED_TRACE(method + " " + ToJson(request));
    Resp over_grpc;
    const grpc::Status status = (stub_->*call)(Ctx(key).get(), request, &over_grpc);
    const Reply r = Post("/api/v1/" + method, ToJson(request), key);
    ASSERT_EQ(r.status, HttpStatusOf(status.error_code())) << Describe(status) << " / " << r.body;
    if (!status.ok()) {
      EXPECT_NE(r.body.find(std::string("\"code\":\"") + CodeName(status.error_code()) + "\""),
                std::string::npos)
          << r.body;
      return;
    }
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    Resp over_http;
    ASSERT_TRUE(FromJson(r.body, &over_http));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(over_grpc, over_http))
        << "gRPC: " << over_grpc.ShortDebugString() << "\nHTTP: " << over_http.ShortDebugString();
  }

  // Sends `bytes` on a new connection and returns the status line and
  // headers that come back ("" when the server closes it first, or after
  // 10 s).
  static std::string RawExchange(const std::string& bytes) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string out;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
      char buffer[4096];
      ssize_t n;
      while (out.find("\r\n\r\n") == std::string::npos &&
             (n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
        out.append(buffer, n);
      }
    }
    close(fd);
    return out;
  }

  static absl::StatusOr<std::map<std::string, prom::Family>> Scrape() {
    Reply r = Get("/metrics", "");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    return prom::Parse(r.body);
  }

  static std::string* root_;
  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  static v1::AuditService::Stub* stub_;
  static int64_t job_;  // alice's finished job
};

std::string* HttpTest::root_ = nullptr;
ServerProcess* HttpTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* HttpTest::channel_ = nullptr;
v1::AuditService::Stub* HttpTest::stub_ = nullptr;
int64_t HttpTest::job_ = 0;

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
  v1::TokenizeRequest tokenize;
  tokenize.set_model("fg-a");
  tokenize.set_text("Hello, world \xc3\xa9\n");
  ExpectSame("Tokenize", tokenize, kAlice, &S::Tokenize);
  tokenize.set_model("no-such-model");
  ExpectSame("Tokenize", tokenize, kAlice, &S::Tokenize);
  // Issue 11's report RPCs: the same reports both ways.
  v1::GetReportRequest report;
  report.set_job_id(job_);
  ExpectSame("GetReport", report, kAlice, &S::GetReport);
  v1::CompareJobsRequest compare;
  compare.add_job_ids(job_);
  ExpectSame("CompareJobs", compare, kAlice, &S::CompareJobs);
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
  EXPECT_EQ(
      Get("/api/v1/ListJobs?state=JOB_STATE_SUCCEEDED&page_size=1", kAlice).body,
      Post("/api/v1/ListJobs", "{\"state\": \"JOB_STATE_SUCCEEDED\", \"page_size\": 1}", kAlice)
          .body);
}

TEST_F(HttpTest, JsonFollowsTheProto3MappingWithProtoFieldNames) {
  const Reply r = Post("/api/v1/GetJob", "{\"job_id\": \"" + std::to_string(job_) + "\"}", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find('\n'), std::string::npos);
  // int64 as strings, snake_case names, defaults printed, enums by name.
  EXPECT_NE(r.body.find("\"id\":\"" + std::to_string(job_) + "\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"cancel_requested\":false"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"window_length\":\"16\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"state\":\"JOB_STATE_SUCCEEDED\""), std::string::npos) << r.body;
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
      {"Tokenize", "{\"model\": \"fg-a\", \"text\": \"not base64!\"}", "text"},
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

TEST_F(HttpTest, MetricsParseStrictlyAndMoveWhenJobsRun) {
  auto before = Scrape();
  ASSERT_TRUE(before.ok()) << before.status();
  for (const char* family :
       {"fca_jobs", "fca_job_queue_wait_seconds", "fca_job_run_seconds", "fca_forward_tokens_total",
        "fca_forward_seconds_total", "fca_forward_tokens_per_second", "fca_coeff_cache_hits_total",
        "fca_coeff_cache_misses_total", "fca_coeff_cache_read_bytes_total",
        "fca_coeff_cache_written_bytes_total", "fca_coeff_cache_bytes", "fca_workers",
        "fca_grpc_requests_total", "fca_grpc_request_duration_seconds", "fca_http_requests_total",
        "fca_http_request_duration_seconds", "fca_http_event_streams"}) {
    EXPECT_TRUE(before->count(family)) << family;
  }
  const std::vector<std::string> lifecycle = {
      "fca_jobs_submitted_total",       "fca_jobs_started_total",
      "fca_jobs_ended_total",           "fca_job_progress",
      "fca_tasks_lost_total",           "fca_store_filesystem_avail_bytes",
      "fca_store_filesystem_size_bytes"};
  for (const std::string& family : lifecycle) EXPECT_TRUE(before->count(family)) << family;
  const std::map<std::string, std::string> succeeded = {{"state", "succeeded"}};
  const std::map<std::string, std::string> get_ok = {{"method", "/fca.v1.AuditService/GetJob"},
                                                     {"code", "OK"}};
  const std::map<std::string, std::string> submit_ok = {{"handler", "SubmitAudit"},
                                                        {"code", "200"}};
  auto value = [](const std::map<std::string, prom::Family>& f, const std::string& name,
                  const std::map<std::string, std::string>& labels = {}) {
    return prom::Value(f, name, labels, 0);
  };

  // A job on data no job has seen: cache misses and writes; the same job
  // again: hits.
  Upload("eval2", e2e::RandomWords(16 * 12, 11));
  Upload("calib2", e2e::RandomWords(16 * 8, 12));
  const int64_t first = Submit(Spec("eval2", "calib2"), kAlice);
  ASSERT_EQ(WaitJob(first, kAlice), v1::JOB_STATE_SUCCEEDED);
  v1::GetJobRequest get;
  get.set_job_id(first);
  v1::GetJobResponse unused;
  ASSERT_TRUE(stub_->GetJob(Ctx(kAlice).get(), get, &unused).ok());
  // A call is counted when the server has finished it, which can be just
  // after the client got its answer: scrape until both calls are counted.
  auto middle = Scrape();
  for (const auto deadline = Clock::now() + std::chrono::seconds(10);
       middle.ok() && Clock::now() < deadline &&
       (value(*middle, "fca_grpc_requests_total", get_ok) <
            value(*before, "fca_grpc_requests_total", get_ok) + 1 ||
        value(*middle, "fca_http_requests_total", submit_ok) <
            value(*before, "fca_http_requests_total", submit_ok) + 1);
       middle = Scrape()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(value(*middle, "fca_jobs", succeeded), value(*before, "fca_jobs", succeeded) + 1);
  EXPECT_EQ(value(*middle, "fca_job_run_seconds_count", succeeded),
            value(*before, "fca_job_run_seconds_count", succeeded) + 1);
  EXPECT_EQ(value(*middle, "fca_job_queue_wait_seconds_count", succeeded),
            value(*before, "fca_job_queue_wait_seconds_count", succeeded) + 1);
  EXPECT_GE(value(*middle, "fca_grpc_requests_total", get_ok),
            value(*before, "fca_grpc_requests_total", get_ok) + 1);
  EXPECT_EQ(value(*middle, "fca_http_requests_total", submit_ok),
            value(*before, "fca_http_requests_total", submit_ok) + 1);
  EXPECT_GT(value(*middle, "fca_coeff_cache_misses_total"),
            value(*before, "fca_coeff_cache_misses_total"));
  EXPECT_GT(value(*middle, "fca_coeff_cache_written_bytes_total"),
            value(*before, "fca_coeff_cache_written_bytes_total"));
  EXPECT_GT(value(*middle, "fca_coeff_cache_bytes"), 0);
  EXPECT_GT(value(*middle, "fca_forward_tokens_total", {{"model", "fg-a"}}),
            value(*before, "fca_forward_tokens_total", {{"model", "fg-a"}}));
  EXPECT_GT(value(*middle, "fca_forward_seconds_total", {{"model", "fg-a"}}), 0);
  EXPECT_EQ(value(*middle, "fca_forward_tokens_per_second_count", {{"model", "fg-a"}}),
            value(*before, "fca_forward_tokens_per_second_count", {{"model", "fg-a"}}) + 1);
  EXPECT_EQ(value(*middle, "fca_workers", {{"state", "busy"}}) +
                value(*middle, "fca_workers", {{"state", "idle"}}),
            1);
  for (const char* counter : {"fca_jobs_submitted_total", "fca_jobs_started_total"}) {
    EXPECT_EQ(value(*middle, counter), value(*before, counter) + 1) << counter;
  }
  EXPECT_EQ(value(*middle, "fca_jobs_ended_total", succeeded),
            value(*before, "fca_jobs_ended_total", succeeded) + 1);
  // The job has ended: no progress series is left for it.
  EXPECT_EQ(prom::Value(*middle, "fca_job_progress", {{"job", std::to_string(first)}}, -1), -1);

  const int64_t second = Submit(Spec("eval2", "calib2"), kAlice);
  ASSERT_EQ(WaitJob(second, kAlice), v1::JOB_STATE_SUCCEEDED);
  auto after = Scrape();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(value(*after, "fca_coeff_cache_hits_total"),
            value(*middle, "fca_coeff_cache_hits_total"));
  EXPECT_GT(value(*after, "fca_coeff_cache_read_bytes_total"),
            value(*middle, "fca_coeff_cache_read_bytes_total"));
  EXPECT_EQ(value(*after, "fca_jobs", succeeded), value(*middle, "fca_jobs", succeeded) + 1);
  // The scrapes themselves are counted.
  EXPECT_GT(value(*after, "fca_http_requests_total", {{"handler", "metrics"}, {"code", "200"}}),
            value(*before, "fca_http_requests_total", {{"handler", "metrics"}, {"code", "200"}}));
}

// With --tls_cert/--tls_key the HTTP port speaks HTTPS with the same files.
TEST_F(HttpTest, HttpsWithTheGrpcCertificate) {
  const std::string cert = *root_ + "/cert.pem", key = *root_ + "/key.pem";
  CommandResult gen =
      e2e::Run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  auto server = e2e::StartServer(
      FCA_SERVER_BIN,
      {"--models=" + *root_ + "/models", "--db=" + *root_ + "/tls.sqlite", "--threads=1",
       "--workers=0", "--api_keys=" + *root_ + "/keys", "--tls_cert=" + cert, "--tls_key=" + key});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->http_port(), 0);
  httplib::SSLClient tls("127.0.0.1", server->http_port());
  tls.set_ca_cert_path(cert.c_str());
  tls.enable_server_certificate_verification(true);
  auto r = tls.Post("/api/v1/ListModels", Auth(kAlice), "", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"fg-a\""), std::string::npos);
  // Plain HTTP gets no answer from it.
  httplib::Client plain("127.0.0.1", server->http_port());
  plain.set_read_timeout(3, 0);
  auto refused = plain.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(30), 0) << server->Stderr();
}

// A second server cannot take the HTTP address of the first (no
// SO_REUSEPORT sharing): an explicit --http_listen that is taken stops it.
TEST_F(HttpTest, AnHttpAddressInUseStopsTheServer) {
  const std::string taken = "127.0.0.1:" + std::to_string(server_->http_port());
  CommandResult second = e2e::Run(
      {FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--http_listen=" + taken,
       "--models=" + *root_ + "/models", "--db=" + *root_ + "/second.sqlite", "--workers=0"},
      {}, 60);
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("cannot listen for HTTP on " + taken), std::string::npos) << second.err;
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// The same in a --flagfile (the systemd unit keeps its --http_listen there):
// given is given, wherever it was written.
TEST_F(HttpTest, AnHttpAddressInUseGivenInAFlagFileStopsTheServer) {
  const std::string taken = "127.0.0.1:" + std::to_string(server_->http_port());
  const std::string flags = *root_ + "/taken_http.flags";
  WriteFile(flags, "# as deploy/debian/fca-server.flags\n--http_listen=" + taken + "\n");
  CommandResult second = e2e::Run(
      {FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--flagfile=" + flags,
       "--models=" + *root_ + "/models", "--db=" + *root_ + "/flagfile.sqlite", "--workers=0"},
      {}, 60);
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("cannot listen for HTTP on " + taken), std::string::npos) << second.err;
  EXPECT_EQ(second.out.find("listening on"), std::string::npos) << second.out;
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// The attacks of issue 22 replayed on a server without --auth (how it runs
// when started by hand): a page on another site posting text/plain and
// form bodies, and a page whose name was re-bound to 127.0.0.1 (DNS
// rebinding: a foreign Host). Each is refused with 403 and changes
// nothing; the dashboard's own origin and an allowed one still work.
TEST_F(HttpTest, CrossSiteRequestsAreRefusedWithoutAuth) {
  const std::string allowed = "https://dash.lab.example.org";
  auto server = e2e::StartServer(
      FCA_SERVER_BIN, {"--models=" + *root_ + "/models", "--db=" + *root_ + "/open.sqlite",
                       "--threads=1", "--workers=0", "--http_allowed_origins=" + allowed});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  ASSERT_GT(port, 0);
  const std::string self = "127.0.0.1:" + std::to_string(port);
  const std::string evil = "https://evil.example";
  const std::string rebound = "evil.example:" + std::to_string(port);
  auto call = [port](const std::string& method, const std::string& path, const std::string& body,
                     const std::string& type, httplib::Headers headers) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return ToReply(method == "POST"      ? c.Post(path.c_str(), headers, body, type.c_str())
                   : method == "OPTIONS" ? c.Options(path.c_str(), headers)
                                         : c.Get(path.c_str(), headers));
  };
  // A queued job (no workers): what the attacks try to cancel and delete.
  v1::SubmitAuditRequest submit;
  *submit.mutable_spec() = Spec("eval", "calib");
  v1::UploadDatasetResponse unused;
  auto stub = v1::AuditService::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  for (const char* name : {"eval", "calib"}) {
    grpc::ClientContext context;
    auto writer = stub->UploadDataset(&context, &unused);
    v1::UploadDatasetRequest part;
    part.mutable_header()->set_name(name);
    part.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
    const std::string bytes = e2e::RandomWords(16 * 24, 3);
    part.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    ASSERT_TRUE(writer->Write(part));
    part.set_chunk(bytes);
    ASSERT_TRUE(writer->Write(part));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }
  Reply made = call("POST", "/api/v1/SubmitAudit", ToJson(submit), "application/json", {});
  ASSERT_EQ(made.status, 200) << made.body;
  v1::SubmitAuditResponse job;
  ASSERT_TRUE(FromJson(made.body, &job));
  const std::string id = "{\"job_id\": " + std::to_string(job.job().id()) + "}";

  struct Attack {
    std::string what, method, path, body, type;
    httplib::Headers headers;
  };
  const std::vector<Attack> attacks = {
      {"cancel, text/plain", "POST", "/api/v1/CancelJob", id, "text/plain", {{"Origin", evil}}},
      {"cancel, form",
       "POST",
       "/api/v1/CancelJob",
       id,
       "application/x-www-form-urlencoded",
       {{"Origin", evil}}},
      {"delete, text/plain", "POST", "/api/v1/DeleteJob", id, "text/plain", {{"Origin", evil}}},
      {"submit, text/plain",
       "POST",
       "/api/v1/SubmitAudit",
       ToJson(submit),
       "text/plain",
       {{"Origin", evil}}},
      {"delete, rebound",
       "POST",
       "/api/v1/DeleteJob",
       id,
       "application/json",
       {{"Host", rebound}, {"Origin", "http://" + rebound}}},
      {"cancel, rebound, no Origin",
       "POST",
       "/api/v1/CancelJob",
       id,
       "text/plain",
       {{"Host", rebound}}},
      {"read, rebound", "GET", "/api/v1/ListJobs", "", "", {{"Host", rebound}}},
      {"read, foreign origin", "POST", "/api/v1/GetJob", id, "text/plain", {{"Origin", evil}}},
      {"events, rebound",
       "GET",
       "/api/v1/jobs/" + std::to_string(job.job().id()) + "/events",
       "",
       "",
       {{"Host", rebound}}},
      {"framed origin", "POST", "/api/v1/CancelJob", id, "text/plain", {{"Origin", "null"}}},
      {"preflight",
       "OPTIONS",
       "/api/v1/CancelJob",
       "",
       "",
       {{"Origin", evil}, {"Access-Control-Request-Method", "POST"}}},
  };
  for (const Attack& a : attacks) {
    const Reply r = call(a.method, a.path, a.body, a.type, a.headers);
    EXPECT_EQ(r.status, 403) << a.what << ": " << r.body;
    EXPECT_NE(r.body.find("\"code\":\"PERMISSION_DENIED\""), std::string::npos) << a.what;
    EXPECT_EQ(r.Header("Access-Control-Allow-Origin"), "") << a.what;
  }
  // Without an Origin (an old browser, a plugin), a text body is still no
  // way to change state: 415.
  const Reply untyped = call("POST", "/api/v1/CancelJob", id, "text/plain", {});
  EXPECT_EQ(untyped.status, 415) << untyped.body;
  // Nothing changed: one job, queued, no cancel asked.
  const Reply list = call("POST", "/api/v1/ListJobs", "{}", "application/json", {});
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(FromJson(list.body, &jobs));
  ASSERT_EQ(jobs.jobs_size(), 1) << list.body;
  EXPECT_EQ(jobs.jobs(0).state(), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(jobs.jobs(0).cancel_requested());
  EXPECT_EQ(list.Header("Cache-Control"), "no-store");

  // An allowed origin: CORS preflight and the call itself.
  const Reply preflight = call("OPTIONS", "/api/v1/CancelJob", "", "",
                               {{"Origin", allowed}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(preflight.status, 204) << preflight.body;
  EXPECT_EQ(preflight.Header("Access-Control-Allow-Origin"), allowed);
  EXPECT_NE(preflight.Header("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  const Reply from_allowed =
      call("POST", "/api/v1/GetJob", id, "application/json", {{"Origin", allowed}});
  EXPECT_EQ(from_allowed.status, 200) << from_allowed.body;
  EXPECT_EQ(from_allowed.Header("Access-Control-Allow-Origin"), allowed);
  // The dashboard's own origin cancels, as a user clicking Cancel would.
  const Reply own =
      call("POST", "/api/v1/CancelJob", id, "application/json", {{"Origin", "http://" + self}});
  EXPECT_EQ(own.status, 200) << own.body;
  EXPECT_EQ(own.Header("Access-Control-Allow-Origin"), "");

  // The dashboard cannot be framed or sniffed.
  const Reply page = call("GET", "/", "", "", {});
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.Header("X-Frame-Options"), "DENY");
  EXPECT_EQ(page.Header("X-Content-Type-Options"), "nosniff");
  EXPECT_NE(page.Header("Content-Security-Policy").find("frame-ancestors 'none'"),
            std::string::npos)
      << page.Header("Content-Security-Policy");
  // Probes need no Host check (a load balancer names the server its way).
  EXPECT_EQ(call("GET", "/healthz", "", "", {{"Host", rebound}}).status, 200);
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(30), 0) << server->Stderr();
}

// A malformed --http_allowed_origins stops the server at start, naming it.
TEST_F(HttpTest, AMalformedAllowedOriginStopsTheServer) {
  CommandResult r =
      e2e::Run({FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
                "--http_allowed_origins=evil.example/x", "--models=" + *root_ + "/models",
                "--db=" + *root_ + "/bad_origin.sqlite", "--workers=0"},
               {}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--http_allowed_origins: 'evil.example/x'"), std::string::npos) << r.err;
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
}  // namespace fca
