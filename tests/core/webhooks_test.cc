// Webhooks (issue 23) in the core: registration and its refusals, who may
// manage a project's webhooks, what a job's end enqueues (through the
// coordinator's end observer and a queued job's cancel), and a real job's
// end POSTed to a receiver on 127.0.0.1, signed, with the body's fields.
// The sender's retries, redirects and allowlist: webhook_sender_test.cc.
#include "server/core/webhooks.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/jobs/webhook_sender.h"
#include "tests/core/core_env.h"
#include "tests/core/webhook_receiver.h"
#include "tests/testing/log_lines.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::HmacSha256Hex;
using testing::Receiver;

jobs::WebhookAllowlist Allow(const std::vector<std::string>& entries) {
  absl::StatusOr<jobs::WebhookAllowlist> list = jobs::WebhookAllowlist::Parse(entries);
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : jobs::WebhookAllowlist();
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
  std::unique_ptr<jobs::WebhookSender> Sender() {
    jobs::WebhookSender::Options options;
    options.allow = Allow({absl::StrCat("127.0.0.1:", receiver_.port())});
    options.now_us = [this] { return now_us_.load(); };
    return std::make_unique<jobs::WebhookSender>(env_.store(), std::move(options));
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
  // Signed: "<timestamp>.<delivery id>.<body>" (webhook_sender_test has the rest).
  const std::string signed_content =
      absl::StrCat(header("X-Fca-Timestamp"), ".", header("X-Fca-Delivery"), ".", post.body);
  EXPECT_EQ(header("X-Fca-Signature-256"),
            "sha256=" + HmacSha256Hex(added->secret(), signed_content));
  EXPECT_NE(header("X-Fca-Signature-256"), "sha256=" + HmacSha256Hex("other", signed_content));
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
// ending: the job ends (marked), the refusal is logged, nothing is half
// written; once the store takes writes again, a sweep enqueues each lost
// delivery, exactly once (a finished job and a cancelled queued one).
TEST(WebhooksFaultTest, ARefusedEnqueueIsDeliveredOnceBySweeps) {
  std::atomic<bool> refuse{true};
  storage::StoreOptions store;
  store.fault_injector = [&](std::string_view op) {
    return refuse && op == "enqueue_webhook" ? absl::UnavailableError("injected fault")
                                             : absl::OkStatus();
  };
  CoreEnv env({}, testing::FastRunOptions(), store);
  WebhookOptions options;
  options.allow = Allow({"127.0.0.1"});
  Webhooks webhooks(env.store(), options);
  env.coordinator()->SetEndObserver(
      [&](const storage::JobRecord& job) { return webhooks.JobEnded(job); });
  v1::AddWebhookRequest request;
  request.set_url("http://127.0.0.1:9/hook");
  auto hook = webhooks.Add(Alice(), request);
  ASSERT_TRUE(hook.ok()) << hook.status();
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  const v1::AuditSpec spec = testing::SmallSpec({testing::kGateA}, "eval", "calib");
  ASSERT_TRUE(env.Submit(Alice(), spec).ok());
  auto job = env.RunNext();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  auto queued = env.Submit(Alice(), spec);
  ASSERT_TRUE(queued.ok()) << queued.status();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(queued->id());
  ASSERT_TRUE(env.core()->CancelJob(Alice(), cancel).ok());
  env.coordinator()->SweepOnce();  // still refused: nothing, nothing lost
  auto due = env.store()->DueWebhookDeliveries(0, 10);
  ASSERT_TRUE(due.ok()) << due.status();
  EXPECT_TRUE(due->empty());
  auto marked = env.store()->UnobservedEnds(10);
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_EQ(*marked, (std::vector<int64_t>{job->id(), queued->id()}));

  refuse = false;
  env.coordinator()->SweepOnce();
  env.coordinator()->SweepOnce();  // a second sweep adds nothing
  v1::ListWebhookDeliveriesRequest list;
  list.set_webhook_id(hook->webhook().id());
  auto deliveries = webhooks.ListDeliveries(Alice(), list);
  ASSERT_TRUE(deliveries.ok()) << deliveries.status();
  ASSERT_EQ(deliveries->deliveries_size(), 2);
  // Newest first: the cancelled job's, then the finished one's.
  EXPECT_EQ(deliveries->deliveries(0).job_id(), queued->id());
  EXPECT_EQ(deliveries->deliveries(0).job_state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(deliveries->deliveries(1).job_id(), job->id());
  EXPECT_EQ(deliveries->deliveries(1).job_state(), v1::JOB_STATE_SUCCEEDED);
  due = env.store()->DueWebhookDeliveries(0, 10);
  ASSERT_TRUE(due.ok()) << due.status();
  ASSERT_EQ(due->size(), 1u);  // one webhook: its oldest due delivery
  EXPECT_THAT((*due)[0].payload, HasSubstr(absl::StrCat("\"job_id\":", job->id())));
  marked = env.store()->UnobservedEnds(10);
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_TRUE(marked->empty());
  auto integrity = env.store()->IntegrityCheck();
  ASSERT_TRUE(integrity.ok()) << integrity.status();
  EXPECT_EQ(*integrity, "ok");
}

// An end whose observer keeps failing (not a refusal the store may lift)
// is retried at every sweep but logged once, and holds back no end after
// it: each sweep starts after the last one the previous sweep tried.
TEST(WebhooksFaultTest, AnEndThatKeepsFailingHoldsBackNoneAfterItAndIsLoggedOnce) {
  testing::RunOptions run = testing::FastRunOptions();
  run.coordinator.unobserved_per_sweep = 1;
  CoreEnv env({}, run);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  const v1::AuditSpec spec = testing::SmallSpec({testing::kGateA}, "eval", "calib");
  std::vector<int64_t> ids;
  for (int i = 0; i < 2; ++i) {
    auto job = env.Submit(Alice(), spec);
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->id());
  }
  // Both ends go unobserved: the observer fails as they are cancelled.
  std::vector<int64_t> observed;
  int64_t failing = 0;  // 0: every job's observer fails
  env.coordinator()->SetEndObserver([&](const storage::JobRecord& job) {
    if (failing == 0 || job.id == failing) return absl::InternalError("the observer is broken");
    observed.push_back(job.id);
    return absl::OkStatus();
  });
  for (int64_t id : ids) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    ASSERT_TRUE(env.core()->CancelJob(Alice(), cancel).ok());
  }
  auto marked = env.store()->UnobservedEnds(10);
  ASSERT_TRUE(marked.ok()) << marked.status();
  ASSERT_EQ(*marked, ids);

  failing = ids[0];  // the older one fails for good, the newer one heals
  fca::testing::LogLines log({"retried at every sweep"});
  env.coordinator()->SweepOnce();  // tries the first: fails
  EXPECT_TRUE(observed.empty());
  env.coordinator()->SweepOnce();  // tries the second, after it
  EXPECT_EQ(observed, std::vector<int64_t>{ids[1]});
  env.coordinator()->SweepOnce();  // none after the second: back to the start
  env.coordinator()->SweepOnce();  // the first fails again
  EXPECT_EQ(observed, std::vector<int64_t>{ids[1]});
  EXPECT_EQ(log.count("retried at every sweep"), 1);
  marked = env.store()->UnobservedEnds(10);
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_EQ(*marked, std::vector<int64_t>{ids[0]});
}

}  // namespace
}  // namespace fca::core
