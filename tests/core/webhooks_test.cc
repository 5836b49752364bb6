// Webhooks (issue 23): registration and its refusals, who may manage a
// project's webhooks, what a job's end enqueues (through the coordinator's
// end observer and a queued job's cancel), and the sender against a real
// HTTP receiver on 127.0.0.1: the signature checked with an HMAC computed
// here from SHA-256 alone, the body's fields, retries after 500s on the
// backoff schedule (an injected clock: nothing here waits), a redirect not
// followed, no answer, and the allowlist checked again at delivery.
#include "server/core/webhooks.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/jobs/webhook_sender.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;

// RFC 2104 HMAC over fca::Sha256, independent of the OpenSSL HMAC the
// server signs with.
std::string HmacSha256Hex(const std::string& key, const std::string& message) {
  std::string k = key;
  if (k.size() > 64) {
    Sha256 h;
    h.Update(k);
    const auto digest = h.Finish();
    k.assign(digest.begin(), digest.end());
  }
  k.resize(64, '\0');
  std::string ipad(64, '\0'), opad(64, '\0');
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(ipad);
  inner.Update(message);
  const auto inner_digest = inner.Finish();
  Sha256 outer;
  outer.Update(opad);
  outer.Update(inner_digest.data(), inner_digest.size());
  return outer.FinishHex();
}

TEST(HmacTest, TheTestsHmacMatchesRfc4231) {
  // RFC 4231 test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// A real HTTP server on 127.0.0.1 that records every request and answers
// each path with the statuses scripted for it, in turn (the last repeats;
// 200 when none).
class Receiver {
 public:
  struct Request {
    std::string path, body;
    httplib::Headers headers;
  };

  Receiver() {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back({req.path, req.body, req.headers});
      std::vector<int>& script = statuses_[req.path];
      res.status = script.empty() ? 200 : script.front();
      if (script.size() > 1) script.erase(script.begin());
      if (res.status >= 300 && res.status < 400) {
        res.set_header("Location", absl::StrCat("http://127.0.0.1:", port_, "/target"));
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    server_.wait_until_ready();
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  void Script(const std::string& path, std::vector<int> statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    statuses_[path] = std::move(statuses);
  }
  std::vector<Request> Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Request> requests_;
  std::map<std::string, std::vector<int>> statuses_;
};

WebhookAllowlist Allow(const std::vector<std::string>& entries) {
  absl::StatusOr<WebhookAllowlist> list = WebhookAllowlist::Parse(entries);
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : WebhookAllowlist();
}

class WebhooksTest : public ::testing::Test {
 protected:
  WebhooksTest() {
    WebhookOptions options;
    options.allow = Allow({absl::StrCat("127.0.0.1:", receiver_.port())});
    options.dashboard_url = "https://fca.example.org/";
    webhooks_ = std::make_unique<Webhooks>(env_.store(), options);
    env_.coordinator()->SetEndObserver(
        [this](const storage::JobRecord& job) { return webhooks_->JobEnded(job); });
  }

  // A sender on the same allowlist whose clock is now_us_.
  std::unique_ptr<WebhookSender> Sender(int max_attempts = 6) {
    WebhookSender::Options options;
    options.allow = Allow({absl::StrCat("127.0.0.1:", receiver_.port())});
    options.max_attempts = max_attempts;
    options.first_retry = absl::Seconds(10);
    options.max_retry = absl::Seconds(60);
    options.now_us = [this] { return now_us_.load(); };
    return std::make_unique<WebhookSender>(env_.store(), std::move(options));
  }

  absl::StatusOr<v1::AddWebhookResponse> Add(const Caller& caller, const std::string& url,
                                             const std::string& project = "") {
    v1::AddWebhookRequest request;
    request.set_url(url);
    request.set_project(project);
    return webhooks_->Add(caller, request);
  }

  absl::StatusOr<v1::ListWebhookDeliveriesResponse> Deliveries(const Caller& caller,
                                                               int64_t webhook_id) {
    v1::ListWebhookDeliveriesRequest request;
    request.set_webhook_id(webhook_id);
    return webhooks_->ListDeliveries(caller, request);
  }

  // A job of alice that ended `state` (its deliveries enqueued as the
  // coordinator would).
  int64_t EndedJob(storage::JobState state) {
    absl::StatusOr<storage::JobRecord> job = env_.store()->CreateJob("alice", "{}");
    EXPECT_TRUE(job.ok()) << job.status();
    job->state = state;
    EXPECT_TRUE(webhooks_->JobEnded(*job).ok());
    return job->id;
  }

  Receiver receiver_;
  CoreEnv env_;
  std::unique_ptr<Webhooks> webhooks_;
  std::atomic<int64_t> now_us_{int64_t{1'700'000'000} * 1'000'000};
};

TEST_F(WebhooksTest, AnEndedJobIsPostedOnceSignedWithItsFields) {
  auto added = Add(Alice(), receiver_.Url("/hook?x=1"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->webhook().project(), "alice");
  EXPECT_EQ(added->secret().size(), 64u);
  ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
  auto submitted = env_.Submit(Alice(), testing::SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto job = env_.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);

  auto sender = Sender();
  EXPECT_EQ(sender->DeliverDue(), 1);
  EXPECT_EQ(sender->DeliverDue(), 0);  // delivered: never sent again
  const std::vector<Receiver::Request> got = receiver_.Requests();
  ASSERT_EQ(got.size(), 1u);
  const Receiver::Request& post = got[0];
  EXPECT_EQ(post.path, "/hook");
  auto header = [&](const char* name) {
    auto it = post.headers.find(name);
    return it == post.headers.end() ? std::string("<none>") : it->second;
  };
  EXPECT_EQ(header("X-Fca-Signature-256"), "sha256=" + HmacSha256Hex(added->secret(), post.body));
  EXPECT_NE(header("X-Fca-Signature-256"), "sha256=" + HmacSha256Hex("other", post.body));
  EXPECT_EQ(header("X-Fca-Timestamp"), "1700000000");
  EXPECT_EQ(header("X-Fca-Event"), "job.ended");
  EXPECT_EQ(header("Content-Type"), "application/json");

  absl::StatusOr<json::Value> body = json::Parse(post.body);
  ASSERT_TRUE(body.ok()) << body.status() << post.body;
  EXPECT_EQ(body->Find("job_id")->as_int(), job->id());
  EXPECT_EQ(body->Find("state")->as_string(), "SUCCEEDED");
  EXPECT_EQ(body->Find("project")->as_string(), "alice");
  EXPECT_EQ(body->Find("event")->as_string(), "job.ended");
  ASSERT_EQ(body->Find("models")->as_array().size(), 1u);
  EXPECT_EQ(body->Find("models")->as_array()[0].as_string(), testing::kGateA);
  EXPECT_EQ(body->Find("url")->as_string(),
            absl::StrCat("https://fca.example.org/#/job/", job->id()));

  auto deliveries = Deliveries(Alice(), added->webhook().id());
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  ASSERT_EQ(deliveries->deliveries_size(), 1);
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(header("X-Fca-Delivery"), absl::StrCat(d.id()));
  EXPECT_EQ(d.job_id(), job->id());
  EXPECT_EQ(d.job_state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_DELIVERED);
  ASSERT_EQ(d.attempts_size(), 1);
  EXPECT_EQ(d.attempts(0).http_status(), 200);
  EXPECT_EQ(d.attempts(0).error(), "");
  EXPECT_FALSE(d.attempts(0).has_next_attempt_at());
}

TEST_F(WebhooksTest, FailuresAreRetriedWithExponentialBackoff) {
  auto added = Add(Alice(), receiver_.Url("/flaky"));
  ASSERT_TRUE(added.ok()) << added.status();
  receiver_.Script("/flaky", {500, 503, 200});
  EndedJob(storage::JobState::kFailed);
  auto sender = Sender();
  const int64_t t0 = now_us_;
  EXPECT_EQ(sender->DeliverDue(), 1);  // 500
  now_us_ = t0 + 10'000'000 - 1;       // not yet due
  EXPECT_EQ(sender->DeliverDue(), 0);
  now_us_ = t0 + 10'000'000;                   // first retry: 10 s
  EXPECT_EQ(sender->DeliverDue(), 1);          // 503
  now_us_ = t0 + 10'000'000 + 20'000'000 - 1;  // the delay doubled
  EXPECT_EQ(sender->DeliverDue(), 0);
  now_us_ = t0 + 30'000'000;
  EXPECT_EQ(sender->DeliverDue(), 1);  // 200
  now_us_ = t0 + 1'000'000'000;
  EXPECT_EQ(sender->DeliverDue(), 0);

  const std::vector<Receiver::Request> got = receiver_.Requests();
  ASSERT_EQ(got.size(), 3u);
  for (const Receiver::Request& r : got) {
    EXPECT_EQ(r.body, got[0].body);  // the same body, the same delivery id
    EXPECT_EQ(r.headers.find("X-Fca-Delivery")->second,
              got[0].headers.find("X-Fca-Delivery")->second);
  }
  auto deliveries = Deliveries(Alice(), added->webhook().id());
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  ASSERT_EQ(deliveries->deliveries_size(), 1);
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(d.job_state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_DELIVERED);
  ASSERT_EQ(d.attempts_size(), 3);
  EXPECT_EQ(d.attempts(0).http_status(), 500);
  EXPECT_EQ(d.attempts(0).error(), "HTTP 500");
  EXPECT_EQ(d.attempts(0).next_attempt_at().seconds(), t0 / 1'000'000 + 10);
  EXPECT_EQ(d.attempts(1).http_status(), 503);
  EXPECT_EQ(d.attempts(1).next_attempt_at().seconds(), t0 / 1'000'000 + 30);
  EXPECT_EQ(d.attempts(2).http_status(), 200);
  EXPECT_EQ(d.attempts(2).time().seconds(), t0 / 1'000'000 + 30);
}

TEST_F(WebhooksTest, AttemptsRunOutAndTheBackoffIsCapped) {
  auto added = Add(Alice(), receiver_.Url("/down"));
  ASSERT_TRUE(added.ok()) << added.status();
  receiver_.Script("/down", {500});
  EndedJob(storage::JobState::kSucceeded);
  auto sender = Sender(/*max_attempts=*/5);
  EXPECT_EQ(sender->RetryDelay(1), absl::Seconds(10));
  EXPECT_EQ(sender->RetryDelay(3), absl::Seconds(40));
  EXPECT_EQ(sender->RetryDelay(4), absl::Seconds(60));  // max_retry
  EXPECT_EQ(sender->RetryDelay(30), absl::Seconds(60));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sender->DeliverDue(), 1) << i;
    now_us_ += 3'600'000'000;
  }
  EXPECT_EQ(sender->DeliverDue(), 0);
  EXPECT_EQ(receiver_.Requests().size(), 5u);
  auto deliveries = Deliveries(Alice(), added->webhook().id());
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_FAILED);
  ASSERT_EQ(d.attempts_size(), 5);
  EXPECT_TRUE(d.attempts(3).has_next_attempt_at());
  EXPECT_FALSE(d.attempts(4).has_next_attempt_at());
}

TEST_F(WebhooksTest, ARedirectIsNotFollowedAndFailsTheDelivery) {
  auto added = Add(Alice(), receiver_.Url("/moved"));
  ASSERT_TRUE(added.ok()) << added.status();
  receiver_.Script("/moved", {302});
  EndedJob(storage::JobState::kCancelled);
  auto sender = Sender();
  EXPECT_EQ(sender->DeliverDue(), 1);
  now_us_ += 3'600'000'000;
  EXPECT_EQ(sender->DeliverDue(), 0);  // not retried
  const std::vector<Receiver::Request> got = receiver_.Requests();
  ASSERT_EQ(got.size(), 1u);  // /target never asked
  EXPECT_EQ(got[0].path, "/moved");
  auto deliveries = Deliveries(Alice(), added->webhook().id());
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_FAILED);
  ASSERT_EQ(d.attempts_size(), 1);
  EXPECT_EQ(d.attempts(0).http_status(), 302);
  EXPECT_THAT(d.attempts(0).error(), HasSubstr("redirect"));
  EXPECT_THAT(d.attempts(0).error(), HasSubstr("not followed"));
}

TEST_F(WebhooksTest, NoAnswerIsRetried) {
  // A port bound but not listening: connections to it are refused.
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t size = sizeof(addr);
  ASSERT_EQ(::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &size), 0);
  const int closed = ntohs(addr.sin_port);
  WebhookOptions options;
  options.allow = Allow({absl::StrCat("127.0.0.1:", closed)});
  Webhooks webhooks(env_.store(), options);
  v1::AddWebhookRequest request;
  request.set_url(absl::StrCat("http://127.0.0.1:", closed, "/"));
  auto added = webhooks.Add(Alice(), request);
  ASSERT_TRUE(added.ok()) << added.status();
  EndedJob(storage::JobState::kSucceeded);
  WebhookSender::Options sender_options;
  sender_options.allow = options.allow;
  sender_options.now_us = [this] { return now_us_.load(); };
  WebhookSender sender(env_.store(), sender_options);
  EXPECT_EQ(sender.DeliverDue(), 1);
  v1::ListWebhookDeliveriesRequest list;
  list.set_webhook_id(added->webhook().id());
  auto deliveries = webhooks.ListDeliveries(Alice(), list);
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_PENDING);
  EXPECT_EQ(d.attempts(0).http_status(), 0);
  EXPECT_THAT(d.attempts(0).error(), HasSubstr("no answer"));
  EXPECT_EQ(d.next_attempt_at().seconds(), now_us_ / 1'000'000 + 10);
  ::close(sock);
}

TEST_F(WebhooksTest, TheAllowlistIsCheckedAgainAtDelivery) {
  auto added = Add(Alice(), receiver_.Url("/hook"));
  ASSERT_TRUE(added.ok()) << added.status();
  EndedJob(storage::JobState::kSucceeded);
  // The operator took the host off the list since.
  WebhookSender::Options options;
  options.allow = Allow({"hooks.example.org"});
  options.now_us = [this] { return now_us_.load(); };
  WebhookSender sender(env_.store(), options);
  EXPECT_EQ(sender.DeliverDue(), 1);
  EXPECT_TRUE(receiver_.Requests().empty());
  auto deliveries = Deliveries(Alice(), added->webhook().id());
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  const v1::WebhookDelivery& d = deliveries->deliveries(0);
  EXPECT_EQ(d.state(), v1::WEBHOOK_DELIVERY_STATE_FAILED);
  EXPECT_THAT(d.attempts(0).error(), HasSubstr("--webhook_allow"));
}

TEST_F(WebhooksTest, RegistrationRefusesOtherSchemesAndHosts) {
  const std::string port = absl::StrCat(receiver_.port());
  for (const std::string& url :
       {std::string("ftp://127.0.0.1:") + port + "/x", std::string("file:///etc/passwd"),
        std::string("gopher://127.0.0.1:") + port, std::string("127.0.0.1:") + port + "/x",
        std::string("http://user:pw@127.0.0.1:") + port + "/",
        std::string("http://127.0.0.1:") + port + "/#frag",
        std::string("http://127.0.0.1:") + port + "/a b", std::string(""),
        std::string("http://127.0.0.1:99999/"), std::string("http:///path")}) {
    auto refused = Add(Alice(), url);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("webhook url")) << url;
  }
  for (const std::string& url :
       {std::string("http://127.0.0.2:") + port + "/",
        std::string("http://localhost:") + port + "/", std::string("http://127.0.0.1/"),
        std::string("https://127.0.0.1:1/")}) {
    auto refused = Add(Alice(), url);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << url;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--webhook_allow")) << url;
  }
  // Upper case scheme and host are the same URL.
  EXPECT_TRUE(Add(Alice(), std::string("HTTP://127.0.0.1:") + port + "/ok").ok());
  // Webhooks off: nothing is allowed.
  Webhooks off(env_.store(), WebhookOptions());
  v1::AddWebhookRequest request;
  request.set_url(receiver_.Url("/"));
  auto refused = off.Add(Alice(), request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("webhooks are off"));
  v1::ListWebhooksRequest list;
  auto listed = webhooks_->List(Alice(), list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->webhooks_size(), 1);
}

TEST(WebhookAllowlistTest, EntriesAreHostsOrHostPorts) {
  for (const std::string& bad : {"a/b", "h:0", "h:x", "h:70000", "[::1", ":80"}) {
    EXPECT_EQ(WebhookAllowlist::Parse({bad}).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  auto list = WebhookAllowlist::Parse({"Hooks.Example.org", "10.0.0.1:8443", "[::1]:9000", " "});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->Check("https://hooks.example.org/x").ok());
  EXPECT_TRUE(list->Check("http://HOOKS.example.org:1234/x").ok());  // any port
  EXPECT_TRUE(list->Check("https://10.0.0.1:8443/").ok());
  EXPECT_EQ(list->Check("https://10.0.0.1/").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(list->Check("http://[::1]:9000/h").ok());
  EXPECT_EQ(list->Check("http://evil.example.org/").status().code(),
            absl::StatusCode::kPermissionDenied);
  auto url = ParseWebhookUrl("https://[::1]:9000?q=1");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->target, "/?q=1");
  EXPECT_EQ(url->Origin(), "https://[::1]:9000");
  EXPECT_EQ(ParseWebhookUrl("http://h").value().port, 80);
  EXPECT_EQ(ParseWebhookUrl("https://h").value().port, 443);
}

TEST_F(WebhooksTest, OnlyTheProjectsManagersSeeItsWebhooks) {
  auto added = Add(Alice(), receiver_.Url("/hook"));
  ASSERT_TRUE(added.ok()) << added.status();
  const int64_t id = added->webhook().id();
  // bob is no member of alice's project: it does not exist for him.
  EXPECT_EQ(Add(Bob(), receiver_.Url("/b"), "alice").status().code(), absl::StatusCode::kNotFound);
  v1::ListWebhooksRequest list;
  list.set_project("alice");
  EXPECT_EQ(webhooks_->List(Bob(), list).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Deliveries(Bob(), id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Deliveries(Bob(), id + 1000).status().code(), absl::StatusCode::kNotFound);
  v1::RemoveWebhookRequest remove;
  remove.set_webhook_id(id);
  EXPECT_EQ(webhooks_->Remove(Bob(), remove).status().code(), absl::StatusCode::kNotFound);
  // bob's own project is empty; an admin manages any project.
  v1::ListWebhooksRequest own;
  auto bobs = webhooks_->List(Bob(), own);
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_EQ(bobs->webhooks_size(), 0);
  auto seen = webhooks_->List(Admin(), list);
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_EQ(seen->webhooks_size(), 1);
  EXPECT_EQ(seen->webhooks(0).url(), receiver_.Url("/hook"));
  EXPECT_EQ(Add(Admin(), receiver_.Url("/x"), "bad/name").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(webhooks_->Remove(Alice(), remove).ok());
  EXPECT_EQ(webhooks_->Remove(Alice(), remove).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WebhooksTest, ACancelledQueuedJobIsNotified) {
  auto added = Add(Alice(), receiver_.Url("/hook"));
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_TRUE(env_.UploadEvalAndCalib(Alice()).ok());
  auto job = env_.Submit(Alice(), testing::SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  ASSERT_TRUE(env_.core()->CancelJob(Alice(), cancel).ok());
  auto due = env_.store()->DueWebhookDeliveries(now_us_, 10);
  ASSERT_TRUE(due.ok()) << due.status();
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].job_id, job->id());
  EXPECT_EQ((*due)[0].job_state, "CANCELLED");
  EXPECT_THAT((*due)[0].payload, HasSubstr("\"state\":\"CANCELLED\""));
}

// A store that refuses to enqueue deliveries does not keep jobs from
// ending: the job ends, the refusal is logged, nothing is half written.
TEST(WebhooksFaultTest, ARefusedEnqueueDoesNotStopTheJobsEnd) {
  storage::StoreOptions store;
  store.fault_injector = [](std::string_view op) {
    return op == "enqueue_webhook" ? absl::UnavailableError("injected fault") : absl::OkStatus();
  };
  CoreEnv env({}, testing::FastRunOptions(), store);
  WebhookOptions options;
  options.allow = Allow({"127.0.0.1"});
  Webhooks webhooks(env.store(), options);
  env.coordinator()->SetEndObserver(
      [&](const storage::JobRecord& job) { return webhooks.JobEnded(job); });
  v1::AddWebhookRequest request;
  request.set_url("http://127.0.0.1:9/hook");
  ASSERT_TRUE(webhooks.Add(Alice(), request).ok());
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Submit(Alice(), testing::SmallSpec({testing::kGateA}, "eval", "calib")).ok());
  auto job = env.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  auto due = env.store()->DueWebhookDeliveries(0, 10);
  ASSERT_TRUE(due.ok()) << due.status();
  EXPECT_TRUE(due->empty());
  auto integrity = env.store()->IntegrityCheck();
  ASSERT_TRUE(integrity.ok()) << integrity.status();
  EXPECT_EQ(*integrity, "ok");
}

}  // namespace
}  // namespace fca::core
