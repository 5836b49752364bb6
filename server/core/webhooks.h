// Webhooks of projects (issue 23): the AddWebhook, ListWebhooks,
// RemoveWebhook and ListWebhookDeliveries RPCs, and what a job's end
// enqueues for the sender (server/jobs/webhook_sender.h). The body and its
// signature are documented in docs/operator-guide.md ("Webhooks").
#ifndef FCA_SERVER_CORE_WEBHOOKS_H_
#define FCA_SERVER_CORE_WEBHOOKS_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/caller.h"
#include "server/jobs/webhook_policy.h"
#include "storage/store.h"

namespace fca::core {

// Who may manage project `project`'s webhooks: its owners and admins
// (projects.h RequireRole): NOT_FOUND for a non-member, exactly as for a
// project that does not exist; PERMISSION_DENIED for a reader or writer.
[[nodiscard]] absl::Status MayManageWebhooks(storage::Store* store, const Caller& caller,
                                             const std::string& project);

struct WebhookOptions {
  jobs::WebhookAllowlist allow;
  // Where the dashboard is reached from outside ("https://fca.lab.example");
  // a job's link is this + "/#/job/ID". "": bodies carry no link (see
  // Webhooks::set_dashboard_url).
  std::string dashboard_url;
  int max_per_project = 10;
  // Called after deliveries were enqueued (the sender's Wake).
  std::function<void()> on_enqueued;
};

class Webhooks {
 public:
  // Deliveries a ListWebhookDeliveries call returns by default and at most.
  static constexpr int kDefaultDeliveries = 20;
  static constexpr int kMaxDeliveries = 100;

  Webhooks(storage::Store* store, WebhookOptions options)
      : store_(store), options_(std::move(options)), dashboard_url_(options_.dashboard_url) {}
  // The server knows the gateway's address only once it listens.
  void set_dashboard_url(std::string url) ABSL_LOCKS_EXCLUDED(mu_);

  [[nodiscard]] absl::StatusOr<v1::AddWebhookResponse> Add(const Caller& caller,
                                                           const v1::AddWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListWebhooksResponse> List(
      const Caller& caller, const v1::ListWebhooksRequest& request);
  [[nodiscard]] absl::StatusOr<v1::RemoveWebhookResponse> Remove(
      const Caller& caller, const v1::RemoveWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListWebhookDeliveriesResponse> ListDeliveries(
      const Caller& caller, const v1::ListWebhookDeliveriesRequest& request);

  // The coordinator's job-end observer: one delivery of the job's body to
  // each webhook of its project. Runs inside the transaction that ends the
  // job, so a job never ends without its deliveries.
  [[nodiscard]] absl::Status JobEnded(const storage::JobRecord& job);
  // The JSON body a job's end sends.
  std::string Body(const storage::JobRecord& job) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The project a request names ("" = the caller's personal one), if the
  // caller may manage it; NOT_FOUND otherwise.
  [[nodiscard]] absl::StatusOr<std::string> ManagedProject(const Caller& caller,
                                                           const std::string& requested) const;
  // The webhook, if the caller may manage its project; NOT_FOUND otherwise.
  [[nodiscard]] absl::StatusOr<storage::WebhookRecord> ManagedWebhook(const Caller& caller,
                                                                      int64_t id) const;

  storage::Store* store_;
  const WebhookOptions options_;
  mutable absl::Mutex mu_;
  std::string dashboard_url_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_WEBHOOKS_H_
