#include "server/jobs/webhook_sender.h"

#include <glog/logging.h>
#include <httplib.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/build_version.h"

namespace fca::jobs {
namespace {

// Seconds and microseconds of a duration, as httplib's timeouts take them.
void SplitDuration(absl::Duration d, time_t* sec, time_t* usec) {
  const int64_t us = absl::ToInt64Microseconds(d);
  *sec = static_cast<time_t>(us / 1000000);
  *usec = static_cast<time_t>(us % 1000000);
}

bool Retryable(int status) { return status >= 500 || status == 408 || status == 429; }

}  // namespace

WebhookSender::WebhookSender(storage::Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

WebhookSender::~WebhookSender() { Stop(); }

void WebhookSender::Start() {
  for (int i = 0; i < std::max(1, options_.concurrency); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
  thread_ = std::thread([this] { Loop(); });
}

void WebhookSender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

void WebhookSender::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void WebhookSender::Loop() {
  while (!stopping_) {
    {
      absl::MutexLock lock(&mu_);
      attempted_.clear();
    }
    // Read without the lock (store I/O). A worker records its attempt, then
    // frees its webhook and notes the delivery in attempted_ under the lock:
    // whatever ends while this reads is busy or in attempted_ at Dispatch,
    // so a stale "pending" is never sent twice.
    std::vector<storage::WebhookDelivery> due = Due();
    absl::MutexLock lock(&mu_);
    Dispatch(std::move(due));
    // Woken by a new job end or a finished attempt (a thread, a webhook
    // or a project's share is free again), else the poll.
    mu_.AwaitWithTimeout(absl::Condition(this, &WebhookSender::Woken), options_.poll);
    wake_ = false;
  }
}

void WebhookSender::Dispatch(std::vector<storage::WebhookDelivery> due) {
  // Round-robin across projects, each project's in the store's order.
  std::map<std::string, std::deque<storage::WebhookDelivery>> by_project;
  std::vector<std::string> order;
  for (storage::WebhookDelivery& d : due) {
    if (busy_hooks_.count(d.webhook_id) || attempted_.count(d.id)) continue;
    std::deque<storage::WebhookDelivery>& mine = by_project[d.project];
    if (mine.empty()) order.push_back(d.project);
    mine.push_back(std::move(d));
  }
  const size_t busy_limit = static_cast<size_t>(std::max(1, options_.concurrency));
  for (bool any = true; any && busy_hooks_.size() < busy_limit;) {
    any = false;
    for (const std::string& project : order) {
      std::deque<storage::WebhookDelivery>& mine = by_project[project];
      if (mine.empty() || busy_projects_[project] >= std::max(1, options_.per_project)) continue;
      if (busy_hooks_.size() >= busy_limit) break;
      busy_hooks_.insert(mine.front().webhook_id);
      ++busy_projects_[project];
      queue_.push_back(std::move(mine.front()));
      mine.pop_front();
      any = true;
    }
  }
}

void WebhookSender::Work() {
  for (;;) {
    storage::WebhookDelivery delivery;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WebhookSender::HasWork));
      if (stopping_) return;
      delivery = std::move(queue_.front());
      queue_.pop_front();
    }
    Attempt(delivery);
    absl::MutexLock lock(&mu_);
    attempted_.insert(delivery.id);
    busy_hooks_.erase(delivery.webhook_id);
    if (--busy_projects_[delivery.project] <= 0) busy_projects_.erase(delivery.project);
    wake_ = true;
  }
}

int64_t WebhookSender::NowUs() const {
  return options_.now_us ? options_.now_us() : absl::ToUnixMicros(absl::Now());
}

absl::Duration WebhookSender::RetryDelay(int failed) const {
  absl::Duration delay = options_.first_retry;
  for (int i = 1; i < failed && delay < options_.max_retry; ++i) delay *= 2;
  return std::min(delay, options_.max_retry);
}

std::vector<storage::WebhookDelivery> WebhookSender::Due() {
  absl::StatusOr<std::vector<storage::WebhookDelivery>> due =
      store_->DueWebhookDeliveries(NowUs(), kBatch);
  if (!due.ok()) {
    // Busy: the next pass tries again.
    if (!absl::IsUnavailable(due.status())) LOG(ERROR) << "webhooks: " << due.status();
    return {};
  }
  return *std::move(due);
}

void WebhookSender::Attempt(const storage::WebhookDelivery& delivery) {
  const int64_t now = NowUs();
  Record(delivery, Post(delivery, now), now);
}

int WebhookSender::DeliverDue() {
  int attempted = 0;
  for (const storage::WebhookDelivery& delivery : Due()) {
    if (stopping_) break;
    Attempt(delivery);
    ++attempted;
  }
  return attempted;
}

WebhookSender::Outcome WebhookSender::Post(const storage::WebhookDelivery& delivery,
                                           int64_t now_us) const {
  Outcome out;
  // Checked again: the operator may have changed --webhook_allow since.
  absl::StatusOr<WebhookUrl> url = options_.allow.Check(delivery.url);
  if (!url.ok()) {
    out.error = std::string(url.status().message());
    return out;
  }
  httplib::Client client(url->Origin());
  time_t sec = 0, usec = 0;
  SplitDuration(options_.timeout, &sec, &usec);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  client.set_follow_location(false);
  client.set_keep_alive(false);
  const int64_t timestamp = now_us / 1000000;
  const httplib::Headers headers = {
      {kWebhookSignatureHeader,
       SignWebhook(delivery.secret, timestamp, delivery.id, delivery.payload)},
      {kWebhookDeliveryHeader, absl::StrCat(delivery.id)},
      {kWebhookTimestampHeader, absl::StrCat(timestamp)},
      {kWebhookEventHeader, "job.ended"},
      {"User-Agent", absl::StrCat("fca-webhook/", BuildVersion())},
  };
  httplib::Result res = client.Post(url->target, headers, delivery.payload, "application/json");
  if (!res) {
    out.error = absl::StrCat("no answer: ", httplib::to_string(res.error()));
    out.retry = true;
    return out;
  }
  out.http_status = res->status;
  if (res->status >= 200 && res->status < 300) return out;
  if (res->status >= 300 && res->status < 400) {
    const std::string location = res->get_header_value("Location");
    out.error = absl::StrFormat("redirect (HTTP %d%s) not followed", res->status,
                                location.empty() ? "" : " to " + location.substr(0, 200));
    return out;
  }
  out.error = absl::StrFormat("HTTP %d", res->status);
  out.retry = Retryable(res->status);
  return out;
}

void WebhookSender::Record(const storage::WebhookDelivery& delivery, const Outcome& outcome,
                           int64_t now_us) {
  storage::WebhookAttempt attempt;
  attempt.at_us = now_us;
  attempt.http_status = outcome.http_status;
  attempt.error = outcome.error;
  storage::DeliveryState state = storage::DeliveryState::kDelivered;
  if (!outcome.error.empty()) {
    const int made = delivery.attempts + 1;
    if (outcome.retry && made < options_.max_attempts) {
      state = storage::DeliveryState::kPending;
      attempt.next_attempt_us = now_us + absl::ToInt64Microseconds(RetryDelay(made));
    } else {
      state = storage::DeliveryState::kFailed;
    }
  }
  const absl::Status recorded = store_->RecordWebhookAttempt(delivery.id, attempt, state);
  // Not recorded (store busy or full): it stays due and is sent again;
  // receivers drop repeats by the delivery id.
  if (!recorded.ok() && !absl::IsNotFound(recorded)) {
    LOG(WARNING) << "webhooks: delivery " << delivery.id << ": " << recorded;
  }
  if (state == storage::DeliveryState::kFailed) {
    LOG(WARNING) << "webhooks: delivery " << delivery.id << " of job " << delivery.job_id
                 << " failed after " << delivery.attempts + 1 << " attempt(s): " << outcome.error;
  }
}

}  // namespace fca::jobs
