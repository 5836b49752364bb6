#include "server/core/webhooks.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/core/projects.h"
#include "server/jobs/mapping.h"
#include "server/runtime/messages.h"
#include "server/runtime/model_repository.h"

namespace fca::core {
namespace {

v1::Webhook WebhookProto(const storage::WebhookRecord& w) {
  v1::Webhook out;
  out.set_id(w.id);
  out.set_project(w.project);
  out.set_url(w.url);
  out.set_created_by(w.created_by);
  runtime::ToTimestamp(w.created_at_us, out.mutable_created_at());
  return out;
}

v1::WebhookDeliveryState DeliveryStateProto(storage::DeliveryState s) {
  switch (s) {
    case storage::DeliveryState::kPending:
      return v1::WEBHOOK_DELIVERY_STATE_PENDING;
    case storage::DeliveryState::kDelivered:
      return v1::WEBHOOK_DELIVERY_STATE_DELIVERED;
    case storage::DeliveryState::kFailed:
      return v1::WEBHOOK_DELIVERY_STATE_FAILED;
  }
  return v1::WEBHOOK_DELIVERY_STATE_UNSPECIFIED;
}

v1::WebhookDelivery DeliveryProto(const storage::WebhookDelivery& d) {
  v1::WebhookDelivery out;
  out.set_id(d.id);
  out.set_webhook_id(d.webhook_id);
  out.set_job_id(d.job_id);
  absl::StatusOr<storage::JobState> state = storage::ParseJobState(d.job_state);
  out.set_job_state(state.ok() ? jobs::ToProto(*state) : v1::JOB_STATE_UNSPECIFIED);
  out.set_state(DeliveryStateProto(d.state));
  runtime::ToTimestamp(d.created_at_us, out.mutable_created_at());
  if (d.state == storage::DeliveryState::kPending) {
    runtime::ToTimestamp(d.next_attempt_us, out.mutable_next_attempt_at());
  }
  for (const storage::WebhookAttempt& a : d.history) {
    v1::WebhookAttempt* attempt = out.add_attempts();
    attempt->set_attempt(a.attempt);
    runtime::ToTimestamp(a.at_us, attempt->mutable_time());
    attempt->set_http_status(a.http_status);
    attempt->set_error(a.error);
    if (a.next_attempt_us > 0)
      runtime::ToTimestamp(a.next_attempt_us, attempt->mutable_next_attempt_at());
  }
  return out;
}

std::string Rfc3339(int64_t unix_us) {
  return absl::FormatTime(absl::RFC3339_full, absl::FromUnixMicros(unix_us), absl::UTCTimeZone());
}

}  // namespace

absl::Status MayManageWebhooks(storage::Store* store, const Caller& caller,
                               const std::string& project) {
  return RequireRole(store, caller, project, ProjectRole::kOwner).status();
}

absl::StatusOr<std::string> Webhooks::ManagedProject(const Caller& caller,
                                                     const std::string& requested) const {
  FCA_ASSIGN_OR_RETURN(const std::string project, ProjectOrPersonal(caller, requested));
  // A malformed name is the caller's mistake, not a project they cannot see.
  if (project != caller.user) FCA_RETURN_IF_ERROR(runtime::ValidateName(project, "project"));
  FCA_RETURN_IF_ERROR(MayManageWebhooks(store_, caller, project));
  return project;
}

absl::StatusOr<storage::WebhookRecord> Webhooks::ManagedWebhook(const Caller& caller,
                                                                int64_t id) const {
  absl::StatusOr<storage::WebhookRecord> webhook = store_->GetWebhook(id);
  if (webhook.ok()) {
    const absl::Status may = MayManageWebhooks(store_, caller, webhook->project);
    if (absl::IsNotFound(may))
      webhook = may;  // a non-member learns nothing of it
    else if (!may.ok())
      return may;
  }
  if (absl::IsNotFound(webhook.status())) {
    return absl::NotFoundError(absl::StrFormat("webhook %d does not exist", id));
  }
  return webhook;
}

absl::StatusOr<v1::AddWebhookResponse> Webhooks::Add(const Caller& caller,
                                                     const v1::AddWebhookRequest& request) {
  FCA_ASSIGN_OR_RETURN(const std::string project, ManagedProject(caller, request.project()));
  FCA_RETURN_IF_ERROR(options_.allow.Check(request.url()).status());
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::WebhookRecord> existing,
                       store_->ListWebhooks(project));
  if (static_cast<int>(existing.size()) >= options_.max_per_project) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("project '%s' has %d webhooks, the most allowed; remove one first", project,
                        existing.size()));
  }
  storage::WebhookRecord webhook;
  webhook.project = project;
  webhook.url = request.url();
  FCA_ASSIGN_OR_RETURN(webhook.secret, storage::Store::GenerateApiKey());
  webhook.created_by = caller.user;
  FCA_ASSIGN_OR_RETURN(const storage::WebhookRecord stored, store_->AddWebhook(webhook));
  v1::AddWebhookResponse response;
  *response.mutable_webhook() = WebhookProto(stored);
  response.set_secret(stored.secret);
  return response;
}

absl::StatusOr<v1::ListWebhooksResponse> Webhooks::List(const Caller& caller,
                                                        const v1::ListWebhooksRequest& request) {
  FCA_ASSIGN_OR_RETURN(const std::string project, ManagedProject(caller, request.project()));
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::WebhookRecord> webhooks,
                       store_->ListWebhooks(project));
  v1::ListWebhooksResponse response;
  for (const storage::WebhookRecord& w : webhooks) *response.add_webhooks() = WebhookProto(w);
  return response;
}

absl::StatusOr<v1::RemoveWebhookResponse> Webhooks::Remove(
    const Caller& caller, const v1::RemoveWebhookRequest& request) {
  FCA_RETURN_IF_ERROR(ManagedWebhook(caller, request.webhook_id()).status());
  FCA_RETURN_IF_ERROR(store_->RemoveWebhook(request.webhook_id()));
  return v1::RemoveWebhookResponse();
}

absl::StatusOr<v1::ListWebhookDeliveriesResponse> Webhooks::ListDeliveries(
    const Caller& caller, const v1::ListWebhookDeliveriesRequest& request) {
  if (request.limit() < 0) return absl::InvalidArgumentError("limit must not be negative");
  FCA_RETURN_IF_ERROR(ManagedWebhook(caller, request.webhook_id()).status());
  const int limit =
      request.limit() == 0 ? kDefaultDeliveries : std::min<int>(request.limit(), kMaxDeliveries);
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::WebhookDelivery> deliveries,
                       store_->ListWebhookDeliveries(request.webhook_id(), limit));
  v1::ListWebhookDeliveriesResponse response;
  for (const storage::WebhookDelivery& d : deliveries)
    *response.add_deliveries() = DeliveryProto(d);
  return response;
}

void Webhooks::set_dashboard_url(std::string url) {
  absl::MutexLock lock(&mu_);
  dashboard_url_ = std::move(url);
}

std::string Webhooks::Body(const storage::JobRecord& job) const {
  json::Array models;
  // A spec that cannot be read still ends the job: the body lists no model.
  absl::StatusOr<v1::AuditSpec> spec = jobs::StoredSpec(job);
  if (spec.ok()) {
    for (const std::string& m : spec->models()) models.push_back(json::Value::String(m));
  }
  json::Value body = json::Value::MakeObject();
  body.Set("event", json::Value::String("job.ended"));
  body.Set("job_id", json::Value::Int(job.id));
  body.Set("state", json::Value::String(storage::JobStateName(job.state)));
  body.Set("project", json::Value::String(json::ToValidUtf8(job.project)));
  body.Set("owner", json::Value::String(json::ToValidUtf8(job.owner)));
  body.Set("models", json::Value::MakeArray(std::move(models)));
  body.Set("error", json::Value::String(json::ToValidUtf8(job.error)));
  body.Set("created_at", json::Value::String(Rfc3339(job.created_at_us)));
  body.Set("finished_at", json::Value::String(Rfc3339(job.finished_at_us)));
  std::string base;
  {
    absl::MutexLock lock(&mu_);
    base = std::string(absl::StripSuffix(dashboard_url_, "/"));
  }
  body.Set("url", json::Value::String(base.empty() ? "" : absl::StrCat(base, "/#/job/", job.id)));
  return json::Write(body);
}

absl::Status Webhooks::JobEnded(const storage::JobRecord& job) {
  if (!storage::IsTerminal(job.state)) return absl::OkStatus();
  const std::string project = job.project;
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::WebhookRecord> webhooks,
                       store_->ListWebhooks(project));
  if (webhooks.empty()) return absl::OkStatus();
  FCA_ASSIGN_OR_RETURN(const int64_t added, store_->EnqueueWebhookDeliveries(
                                                project, job.id, storage::JobStateName(job.state),
                                                Body(job), /*due_us=*/0));
  if (added > 0 && options_.on_enqueued) options_.on_enqueued();
  return absl::OkStatus();
}

}  // namespace fca::core
