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
  thread_ = std::thread([this] { Loop(); });
}

void WebhookSender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void WebhookSender::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void WebhookSender::Loop() {
  while (!stopping_) {
    // A full batch: more may be due at once.
    if (DeliverDue() == kBatch) continue;
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &WebhookSender::Due), options_.poll);
    wake_ = false;
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

int WebhookSender::DeliverDue() {
  absl::StatusOr<std::vector<storage::WebhookDelivery>> due =
      store_->DueWebhookDeliveries(NowUs(), kBatch);
  if (!due.ok()) {
    // Busy: the next pass tries again.
    if (!absl::IsUnavailable(due.status())) LOG(ERROR) << "webhooks: " << due.status();
    return 0;
  }
  int attempted = 0;
  for (const storage::WebhookDelivery& delivery : *due) {
    if (stopping_) break;
    const int64_t now = NowUs();
    Record(delivery, Post(delivery, now), now);
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
