// The fixture of the gateway's end-to-end suites (http_test.cc,
// http_serving_test.cc): one real fca-server (tiny models, API keys, one
// worker of its own) on 127.0.0.1 with alice's finished job, called over
// HTTP (cpp-httplib's client) and over gRPC side by side.
#ifndef FCA_TESTS_HTTP_HTTP_FIXTURE_H_
#define FCA_TESTS_HTTP_HTTP_FIXTURE_H_

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

#include "common/proto_json.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "tests/e2e/process.h"
#include "tests/e2e/upload.h"
#include "tests/http/prom_text.h"

namespace fca::http_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using e2e::CommandResult;
using e2e::ServerProcess;

inline constexpr char kAlice[] = "alice-key-0123456789abcdef";
inline constexpr char kBob[] = "bob-key-0123456789abcdefgh";
inline constexpr char kWorker[] = "pool-worker-key-0123456789";

using e2e::WriteFile;

inline std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out, o).ok());
  return out;
}

// The JSON text parsed into `m` (unknown fields refused: the server prints
// nothing the proto does not have), by fca's parser: enum values come by
// their short names (common/proto_json.h), which protobuf's does not know.
inline bool FromJson(const std::string& json, google::protobuf::Message* m) {
  const absl::Status st = ParseProtoJson(json, m, UnknownFields::kRefuse);
  EXPECT_TRUE(st.ok()) << st.ToString() << ": " << json.substr(0, 300);
  return st.ok();
}

inline std::string Describe(const grpc::Status& s) {
  return std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
}

// The HTTP status the gateway maps a gRPC code to (gateway.h).
inline int HttpStatusOf(grpc::StatusCode code) {
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

inline const char* CodeName(grpc::StatusCode code) {
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

inline Reply ToReply(const httplib::Result& result) {
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
    const grpc::Status status = testing::UploadText(*stub_, context.get(), name, bytes);
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

  static inline std::string* root_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
  static inline std::shared_ptr<grpc::Channel>* channel_ = nullptr;
  static inline v1::AuditService::Stub* stub_ = nullptr;
  static inline int64_t job_ = 0;  // alice's finished job
};

}  // namespace fca::http_test

#endif  // FCA_TESTS_HTTP_HTTP_FIXTURE_H_
