// Conformance suite, webhooks (issue 23): a project's webhooks, one delivery
// per webhook and job end, attempts and their bounded history, persistence
// across a reopen, and the fault injection of every webhook write. Runs on
// ":memory:" and a file.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreWebhooksTest : public StoreFixture {
 protected:
  WebhookRecord Hook(const std::string& project, const std::string& url) {
    WebhookRecord w;
    w.project = project;
    w.url = url;
    w.secret = "s-" + url;
    w.created_by = project;
    return w;
  }
  // A failed attempt, due again at `next_us`.
  static WebhookAttempt Failed(int64_t at_us, int http_status, int64_t next_us) {
    WebhookAttempt a;
    a.at_us = at_us;
    a.http_status = http_status;
    a.error = "HTTP " + std::to_string(http_status);
    a.next_attempt_us = next_us;
    return a;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreWebhooksTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

TEST_P(StoreWebhooksTest, WebhooksArePerProjectAndRemovedWithTheirDeliveries) {
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  ASSERT_OK_AND_ASSIGN(const WebhookRecord b, store_->AddWebhook(Hook("ann", "http://h/b")));
  ASSERT_OK_AND_ASSIGN(const WebhookRecord c, store_->AddWebhook(Hook("bob", "http://h/c")));
  EXPECT_GT(a.id, 0);
  EXPECT_EQ(a.created_at_us, 1'000'000);
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> ann, store_->ListWebhooks("ann"));
  ASSERT_EQ(ann.size(), 2u);
  EXPECT_EQ(ann[0].id, a.id);
  EXPECT_EQ(ann[1].url, "http://h/b");
  EXPECT_EQ(ann[1].secret, "s-http://h/b");
  ASSERT_OK_AND_ASSIGN(const WebhookRecord got, store_->GetWebhook(c.id));
  EXPECT_EQ(got.project, "bob");
  EXPECT_CODE(store_->AddWebhook(Hook("", "http://h/x")), StatusCode::kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(const int64_t added,
                       store_->EnqueueWebhookDeliveries("ann", 7, "SUCCEEDED", "{}", 0));
  EXPECT_EQ(added, 2);
  ASSERT_OK(store_->RemoveWebhook(b.id));
  EXPECT_CODE(store_->RemoveWebhook(b.id), StatusCode::kNotFound);
  EXPECT_CODE(store_->GetWebhook(b.id), StatusCode::kNotFound);
  ExpectRows("webhook_deliveries", 1);
  ASSERT_OK_AND_ASSIGN(const auto due, store_->DueWebhookDeliveries(0, 10));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].webhook_id, a.id);
}

TEST_P(StoreWebhooksTest, AJobEndIsEnqueuedOncePerWebhook) {
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  ASSERT_OK(store_->AddWebhook(Hook("bob", "http://h/b")).status());
  ASSERT_OK_AND_ASSIGN(int64_t added,
                       store_->EnqueueWebhookDeliveries("ann", 3, "FAILED", R"({"job_id":3})", 5));
  EXPECT_EQ(added, 1);
  // The same end again (a retried transaction) adds nothing.
  ASSERT_OK_AND_ASSIGN(added, store_->EnqueueWebhookDeliveries("ann", 3, "FAILED", "{}", 5));
  EXPECT_EQ(added, 0);
  ASSERT_OK_AND_ASSIGN(added, store_->EnqueueWebhookDeliveries("nobody", 4, "FAILED", "{}", 5));
  EXPECT_EQ(added, 0);
  ASSERT_OK_AND_ASSIGN(auto due, store_->DueWebhookDeliveries(4, 10));
  EXPECT_TRUE(due.empty());
  ASSERT_OK_AND_ASSIGN(due, store_->DueWebhookDeliveries(5, 10));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].webhook_id, a.id);
  EXPECT_EQ(due[0].job_id, 3);
  EXPECT_EQ(due[0].job_state, "FAILED");
  EXPECT_EQ(due[0].payload, R"({"job_id":3})");
  EXPECT_EQ(due[0].url, "http://h/a");
  EXPECT_EQ(due[0].secret, "s-http://h/a");
  EXPECT_EQ(due[0].state, DeliveryState::kPending);
}

TEST_P(StoreWebhooksTest, AttemptsAreRecordedInOrderAndEndADelivery) {
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  ASSERT_OK(store_->EnqueueWebhookDeliveries("ann", 1, "SUCCEEDED", "{}", 0).status());
  ASSERT_OK_AND_ASSIGN(auto due, store_->DueWebhookDeliveries(0, 10));
  ASSERT_EQ(due.size(), 1u);
  const int64_t id = due[0].id;
  ASSERT_OK(store_->RecordWebhookAttempt(id, Failed(10, 500, 110), DeliveryState::kPending));
  ASSERT_OK_AND_ASSIGN(due, store_->DueWebhookDeliveries(109, 10));
  EXPECT_TRUE(due.empty());
  ASSERT_OK_AND_ASSIGN(due, store_->DueWebhookDeliveries(110, 10));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].attempts, 1);
  WebhookAttempt ok;
  ok.at_us = 120;
  ok.http_status = 204;
  ok.next_attempt_us = 999;  // ignored: the delivery has ended
  ASSERT_OK(store_->RecordWebhookAttempt(id, ok, DeliveryState::kDelivered));
  EXPECT_CODE(store_->RecordWebhookAttempt(id, ok, DeliveryState::kDelivered),
              StatusCode::kFailedPrecondition);
  EXPECT_CODE(store_->RecordWebhookAttempt(id + 100, ok, DeliveryState::kDelivered),
              StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(due, store_->DueWebhookDeliveries(1'000'000'000, 10));
  EXPECT_TRUE(due.empty());
  ASSERT_OK_AND_ASSIGN(const auto listed, store_->ListWebhookDeliveries(a.id, 10));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, DeliveryState::kDelivered);
  EXPECT_EQ(listed[0].attempts, 2);
  ASSERT_EQ(listed[0].history.size(), 2u);
  EXPECT_EQ(listed[0].history[0].attempt, 1);
  EXPECT_EQ(listed[0].history[0].at_us, 10);
  EXPECT_EQ(listed[0].history[0].http_status, 500);
  EXPECT_EQ(listed[0].history[0].error, "HTTP 500");
  EXPECT_EQ(listed[0].history[0].next_attempt_us, 110);
  EXPECT_EQ(listed[0].history[1].attempt, 2);
  EXPECT_EQ(listed[0].history[1].http_status, 204);
  EXPECT_EQ(listed[0].history[1].next_attempt_us, 0);
}

TEST_P(StoreWebhooksTest, FinishedDeliveriesAreKeptUpToTheBound) {
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  const int total = Store::kKeptDeliveriesPerWebhook + 5;
  for (int job = 1; job <= total; ++job) {
    ASSERT_OK(store_->EnqueueWebhookDeliveries("ann", job, "SUCCEEDED", "{}", 0).status());
  }
  // Due: the webhook's oldest only (one at a time per webhook), with its
  // project.
  ASSERT_OK_AND_ASSIGN(const auto due, store_->DueWebhookDeliveries(0, total));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].job_id, 1);
  EXPECT_EQ(due[0].project, "ann");
  // One stays pending: the bound counts finished deliveries only.
  ASSERT_OK_AND_ASSIGN(const auto all, store_->ListWebhookDeliveries(a.id, total));
  ASSERT_EQ(static_cast<int>(all.size()), total);
  for (const WebhookDelivery& d : all) {
    if (d.job_id == 1) continue;
    WebhookAttempt ok;
    ok.http_status = 200;
    ASSERT_OK(store_->RecordWebhookAttempt(d.id, ok, DeliveryState::kDelivered));
  }
  ASSERT_OK_AND_ASSIGN(const auto kept, store_->ListWebhookDeliveries(a.id, 1000));
  ASSERT_EQ(static_cast<int>(kept.size()), Store::kKeptDeliveriesPerWebhook + 1);
  EXPECT_EQ(kept.front().job_id, total);  // newest first
  EXPECT_EQ(kept.back().job_id, 1);       // the pending one stays
  EXPECT_EQ(kept.back().state, DeliveryState::kPending);
}

TEST_P(StoreWebhooksTest, PendingDeliveriesSurviveAReopen) {
  if (!is_file()) GTEST_SKIP() << "a :memory: store starts empty again";
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  ASSERT_OK(store_->EnqueueWebhookDeliveries("ann", 9, "CANCELLED", "body", 0).status());
  ASSERT_OK_AND_ASSIGN(auto due, store_->DueWebhookDeliveries(0, 10));
  ASSERT_EQ(due.size(), 1u);
  ASSERT_OK(store_->RecordWebhookAttempt(due[0].id, Failed(1, 503, 50), DeliveryState::kPending));
  Open();
  ASSERT_OK_AND_ASSIGN(due, store_->DueWebhookDeliveries(50, 10));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].webhook_id, a.id);
  EXPECT_EQ(due[0].payload, "body");
  EXPECT_EQ(due[0].attempts, 1);
  ASSERT_OK_AND_ASSIGN(const auto listed, store_->ListWebhookDeliveries(a.id, 10));
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_EQ(listed[0].history.size(), 1u);
  EXPECT_EQ(listed[0].history[0].http_status, 503);
}

TEST_P(StoreWebhooksTest, InjectedFaultsWriteNothing) {
  std::string failing;
  options_.fault_injector = [&](std::string_view op) {
    return op == failing ? absl::UnavailableError("injected") : absl::OkStatus();
  };
  Open();
  failing = "add_webhook";
  EXPECT_CODE(store_->AddWebhook(Hook("ann", "http://h/a")), StatusCode::kUnavailable);
  ExpectRows("webhooks", 0);
  failing = "";
  ASSERT_OK_AND_ASSIGN(const WebhookRecord a, store_->AddWebhook(Hook("ann", "http://h/a")));
  failing = "enqueue_webhook";
  EXPECT_CODE(store_->EnqueueWebhookDeliveries("ann", 1, "SUCCEEDED", "{}", 0),
              StatusCode::kUnavailable);
  ExpectRows("webhook_deliveries", 0);
  failing = "";
  ASSERT_OK(store_->EnqueueWebhookDeliveries("ann", 1, "SUCCEEDED", "{}", 0).status());
  ASSERT_OK_AND_ASSIGN(const auto due, store_->DueWebhookDeliveries(0, 10));
  ASSERT_EQ(due.size(), 1u);
  failing = "record_webhook_attempt";
  EXPECT_CODE(store_->RecordWebhookAttempt(due[0].id, Failed(1, 500, 2), DeliveryState::kPending),
              StatusCode::kUnavailable);
  ExpectRows("webhook_attempts", 0);
  ASSERT_OK_AND_ASSIGN(const auto still, store_->ListWebhookDeliveries(a.id, 10));
  ASSERT_EQ(still.size(), 1u);
  EXPECT_EQ(still[0].attempts, 0);
  failing = "remove_webhook";
  EXPECT_CODE(store_->RemoveWebhook(a.id), StatusCode::kUnavailable);
  ExpectRows("webhooks", 1);
  ExpectRows("webhook_deliveries", 1);
}

}  // namespace
}  // namespace fca::storage
