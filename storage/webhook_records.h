// Records of the webhooks a project registers and of their deliveries
// (storage/store_webhooks.cc; the sender: server/jobs/webhook_sender.h).
//
// Times are unix microseconds.
#ifndef FCA_STORAGE_WEBHOOK_RECORDS_H_
#define FCA_STORAGE_WEBHOOK_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace fca::storage {

// A URL that a project's job ends are POSTed to, signed with `secret`.
struct WebhookRecord {
  int64_t id = 0;
  std::string project;
  std::string url;
  std::string secret;      // the HMAC key; shown to its owner once, at creation
  std::string created_by;  // the user who registered it
  int64_t created_at_us = 0;
};

// A delivery is PENDING until a POST is answered 2xx (DELIVERED) or its
// attempts run out (FAILED).
enum class DeliveryState { kPending, kDelivered, kFailed };
const char* DeliveryStateName(DeliveryState state);  // "PENDING", ...

// One POST of a delivery.
struct WebhookAttempt {
  int attempt = 0;  // 1, 2, ...
  int64_t at_us = 0;
  int http_status = 0;          // 0: no HTTP answer (refused, timed out, ...)
  std::string error;            // "" when answered 2xx
  int64_t next_attempt_us = 0;  // when it is tried again; 0: never
};

// The notice of one job's end to one webhook: the body is fixed when the
// job ends, so every attempt sends (and signs) the same bytes.
struct WebhookDelivery {
  int64_t id = 0;
  int64_t webhook_id = 0;
  int64_t job_id = 0;
  std::string job_state;  // "SUCCEEDED", "FAILED", "CANCELLED"
  std::string payload;    // the JSON body
  DeliveryState state = DeliveryState::kPending;
  int attempts = 0;
  int64_t next_attempt_us = 0;  // PENDING: when it is due
  int64_t created_at_us = 0;
  // Where and how it goes, and whose it is (Store::DueWebhookDeliveries
  // fills them).
  std::string url;
  std::string secret;
  std::string project;
  // Oldest first (Store::ListWebhookDeliveries fills them).
  std::vector<WebhookAttempt> history;
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_WEBHOOK_RECORDS_H_
