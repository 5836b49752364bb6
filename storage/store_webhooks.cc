// Store: webhooks and their deliveries.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"

namespace fca::storage {
namespace {

constexpr char kSelectWebhook[] =
    "SELECT id, project, url, secret, created_by, created_at_us FROM webhooks";
constexpr char kSelectDelivery[] =
    "SELECT d.id, d.webhook_id, d.job_id, d.job_state, d.payload, d.state, d.attempts, "
    "d.next_attempt_us, d.created_at_us, w.url, w.secret, w.project "
    "FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id";

WebhookRecord ReadWebhook(const Statement& stmt) {
  WebhookRecord w;
  w.id = stmt.ColumnInt(0);
  w.project = stmt.ColumnText(1);
  w.url = stmt.ColumnText(2);
  w.secret = stmt.ColumnText(3);
  w.created_by = stmt.ColumnText(4);
  w.created_at_us = stmt.ColumnInt(5);
  return w;
}

absl::StatusOr<DeliveryState> ParseDeliveryState(const std::string& name) {
  for (DeliveryState s :
       {DeliveryState::kPending, DeliveryState::kDelivered, DeliveryState::kFailed}) {
    if (name == DeliveryStateName(s)) return s;
  }
  return absl::DataLossError("storage: bad webhook delivery state stored");
}

absl::StatusOr<WebhookDelivery> ReadDelivery(const Statement& stmt) {
  WebhookDelivery d;
  d.id = stmt.ColumnInt(0);
  d.webhook_id = stmt.ColumnInt(1);
  d.job_id = stmt.ColumnInt(2);
  d.job_state = stmt.ColumnText(3);
  d.payload = stmt.ColumnText(4);
  FCA_ASSIGN_OR_RETURN(d.state, ParseDeliveryState(stmt.ColumnText(5)));
  d.attempts = static_cast<int>(stmt.ColumnInt(6));
  d.next_attempt_us = stmt.ColumnInt(7);
  d.created_at_us = stmt.ColumnInt(8);
  d.url = stmt.ColumnText(9);
  d.secret = stmt.ColumnText(10);
  d.project = stmt.ColumnText(11);
  return d;
}

absl::StatusOr<std::vector<WebhookDelivery>> ReadDeliveries(Statement& stmt) {
  std::vector<WebhookDelivery> out;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    FCA_ASSIGN_OR_RETURN(WebhookDelivery d, ReadDelivery(stmt));
    out.push_back(std::move(d));
  }
  return out;
}

absl::Status WebhookNotFound(int64_t id) {
  return absl::NotFoundError(absl::StrFormat("webhook %d not found", id));
}

}  // namespace

const char* DeliveryStateName(DeliveryState state) {
  switch (state) {
    case DeliveryState::kPending:
      return "PENDING";
    case DeliveryState::kDelivered:
      return "DELIVERED";
    case DeliveryState::kFailed:
      return "FAILED";
  }
  return "PENDING";
}

absl::StatusOr<WebhookRecord> Store::AddWebhook(const WebhookRecord& webhook) {
  if (webhook.project.empty() || webhook.url.empty() || webhook.secret.empty() ||
      webhook.created_by.empty()) {
    return absl::InvalidArgumentError("a webhook needs a project, a url, a secret and a creator");
  }
  FCA_RETURN_IF_ERROR(Inject("add_webhook"));
  RecursiveMutexLock lock(&mu_);
  WebhookRecord stored = webhook;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare("INSERT INTO webhooks (project, url, secret, created_by, "
                                      "created_at_us) VALUES (?1, ?2, ?3, ?4, ?5)",
                                      "add webhook"));
    stored.created_at_us = Now();
    insert.BindText(1, webhook.project);
    insert.BindText(2, webhook.url);
    insert.BindText(3, webhook.secret);
    insert.BindText(4, webhook.created_by);
    insert.BindInt(5, stored.created_at_us);
    FCA_RETURN_IF_ERROR(insert.Run());
    stored.id = db_->last_insert_rowid();
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<WebhookRecord> Store::GetWebhook(int64_t id) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare(std::string(kSelectWebhook) + " WHERE id = ?1", "get webhook"));
  stmt.BindInt(1, id);
  FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row) return WebhookNotFound(id);
  return ReadWebhook(stmt);
}

absl::StatusOr<std::vector<WebhookRecord>> Store::ListWebhooks(const std::string& project) {
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db_->Prepare(std::string(kSelectWebhook) + " WHERE project = ?1 ORDER BY id",
                                    "list webhooks"));
  stmt.BindText(1, project);
  std::vector<WebhookRecord> out;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    out.push_back(ReadWebhook(stmt));
  }
  return out;
}

absl::Status Store::RemoveWebhook(int64_t id) {
  FCA_RETURN_IF_ERROR(Inject("remove_webhook"));
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // Deliveries and their attempts go by ON DELETE CASCADE.
    FCA_ASSIGN_OR_RETURN(Statement remove,
                         db_->Prepare("DELETE FROM webhooks WHERE id = ?1", "remove webhook"));
    remove.BindInt(1, id);
    FCA_RETURN_IF_ERROR(remove.Run());
    if (db_->changes() == 0) return WebhookNotFound(id);
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> Store::EnqueueWebhookDeliveries(const std::string& project, int64_t job_id,
                                                        const std::string& job_state,
                                                        const std::string& payload,
                                                        int64_t due_us) {
  FCA_RETURN_IF_ERROR(Inject("enqueue_webhook"));
  RecursiveMutexLock lock(&mu_);
  int64_t added = 0;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(
        Statement insert,
        db_->Prepare("INSERT OR IGNORE INTO webhook_deliveries (webhook_id, job_id, job_state, "
                     "payload, state, next_attempt_us, created_at_us) "
                     "SELECT id, ?2, ?3, ?4, 'PENDING', ?5, ?6 FROM webhooks WHERE project = ?1",
                     "enqueue webhook deliveries"));
    insert.BindText(1, project);
    insert.BindInt(2, job_id);
    insert.BindText(3, job_state);
    insert.BindText(4, payload);
    insert.BindInt(5, due_us);
    insert.BindInt(6, Now());
    FCA_RETURN_IF_ERROR(insert.Run());
    added = db_->changes();
    return absl::OkStatus();
  }));
  return added;
}

absl::StatusOr<std::vector<WebhookDelivery>> Store::DueWebhookDeliveries(int64_t now_us,
                                                                         int limit) {
  if (limit < 1) return absl::InvalidArgumentError("limit must be positive");
  RecursiveMutexLock lock(&mu_);
  // The first due delivery of each webhook only: a webhook's deliveries go
  // one at a time, in order, and a busy one cannot fill the list.
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectDelivery) +
                       " WHERE d.id IN (SELECT MIN(id) FROM webhook_deliveries WHERE state = "
                       "'PENDING' AND next_attempt_us <= ?1 GROUP BY webhook_id) "
                       "ORDER BY d.next_attempt_us, d.id LIMIT ?2",
                   "list due webhook deliveries"));
  stmt.BindInt(1, now_us);
  stmt.BindInt(2, limit);
  return ReadDeliveries(stmt);
}

absl::Status Store::RecordWebhookAttempt(int64_t delivery_id, const WebhookAttempt& attempt,
                                         DeliveryState state) {
  FCA_RETURN_IF_ERROR(Inject("record_webhook_attempt"));
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement get, db_->Prepare("SELECT webhook_id, state, attempts FROM "
                                                     "webhook_deliveries WHERE id = ?1",
                                                     "record webhook attempt"));
    get.BindInt(1, delivery_id);
    FCA_ASSIGN_OR_RETURN(const bool row, get.Step());
    if (!row) {
      return absl::NotFoundError(absl::StrFormat("webhook delivery %d not found", delivery_id));
    }
    const int64_t webhook_id = get.ColumnInt(0);
    if (get.ColumnText(1) != DeliveryStateName(DeliveryState::kPending)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("webhook delivery %d has ended", delivery_id));
    }
    const int64_t number = get.ColumnInt(2) + 1;
    const int64_t next_us = state == DeliveryState::kPending ? attempt.next_attempt_us : 0;
    FCA_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare("INSERT INTO webhook_attempts (delivery_id, attempt, at_us, "
                                      "http_status, error, next_attempt_us) "
                                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                      "record webhook attempt"));
    insert.BindInt(1, delivery_id);
    insert.BindInt(2, number);
    insert.BindInt(3, attempt.at_us);
    insert.BindInt(4, attempt.http_status);
    insert.BindText(5, attempt.error);
    insert.BindInt(6, next_us);
    FCA_RETURN_IF_ERROR(insert.Run());
    FCA_ASSIGN_OR_RETURN(Statement update,
                         db_->Prepare("UPDATE webhook_deliveries SET state = ?1, attempts = ?2, "
                                      "next_attempt_us = ?3 WHERE id = ?4",
                                      "record webhook attempt"));
    update.BindText(1, DeliveryStateName(state));
    update.BindInt(2, number);
    update.BindInt(3, next_us);
    update.BindInt(4, delivery_id);
    FCA_RETURN_IF_ERROR(update.Run());
    if (state == DeliveryState::kPending) return absl::OkStatus();
    // The history stays bounded: the oldest finished deliveries go.
    FCA_ASSIGN_OR_RETURN(
        Statement prune,
        db_->Prepare("DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND state != 'PENDING' "
                     "AND id NOT IN (SELECT id FROM webhook_deliveries WHERE webhook_id = ?1 "
                     "AND state != 'PENDING' ORDER BY id DESC LIMIT ?2)",
                     "record webhook attempt"));
    prune.BindInt(1, webhook_id);
    prune.BindInt(2, kKeptDeliveriesPerWebhook);
    return prune.Run();
  });
}

absl::StatusOr<std::vector<WebhookDelivery>> Store::ListWebhookDeliveries(int64_t webhook_id,
                                                                          int limit) {
  if (limit < 1) return absl::InvalidArgumentError("limit must be positive");
  RecursiveMutexLock lock(&mu_);
  FCA_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->Prepare(std::string(kSelectDelivery) + " WHERE d.webhook_id = ?1 ORDER BY d.id DESC "
                                                  "LIMIT ?2",
                   "list webhook deliveries"));
  stmt.BindInt(1, webhook_id);
  stmt.BindInt(2, limit);
  FCA_ASSIGN_OR_RETURN(std::vector<WebhookDelivery> deliveries, ReadDeliveries(stmt));
  FCA_ASSIGN_OR_RETURN(Statement attempts,
                       db_->Prepare("SELECT attempt, at_us, http_status, error, next_attempt_us "
                                    "FROM webhook_attempts WHERE delivery_id = ?1 ORDER BY attempt",
                                    "list webhook deliveries"));
  for (WebhookDelivery& d : deliveries) {
    attempts.BindInt(1, d.id);
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, attempts.Step());
      if (!row) break;
      WebhookAttempt a;
      a.attempt = static_cast<int>(attempts.ColumnInt(0));
      a.at_us = attempts.ColumnInt(1);
      a.http_status = static_cast<int>(attempts.ColumnInt(2));
      a.error = attempts.ColumnText(3);
      a.next_attempt_us = attempts.ColumnInt(4);
      d.history.push_back(std::move(a));
    }
    FCA_RETURN_IF_ERROR(attempts.Reset());
  }
  return deliveries;
}

}  // namespace fca::storage
