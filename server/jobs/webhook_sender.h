// The webhook sender: a thread of the server (fca::Server owns it) that
// POSTs every due delivery (storage/webhook_records.h) to its webhook's URL,
// signed (webhook_policy.h), and records each attempt in the store: its
// time, the HTTP status or the error, and when it is tried again.
//
// A delivery is DELIVERED on a 2xx answer. A 5xx, 408 or 429 answer or no
// answer at all (refused, timed out, TLS) is retried after
// first_retry * 2^(n-1) (at most max_retry), until max_attempts attempts
// have been made: then it is FAILED. Any other answer fails it at once: a
// 3xx (redirects are never followed: the allowlist names the hosts that
// may be called, not where they point), or a 4xx (the receiver refused
// it). The URL is checked against the allowlist again before every
// attempt: an operator who takes a host off the list stops its deliveries.
// Pending deliveries live in the store, so a restarted server resumes them.
//
// Deliveries run concurrently on `concurrency` threads, isolated from each
// other: a webhook has at most one attempt in flight (a hanging receiver
// holds up only its own deliveries), and a project at most
// `per_project` (so one project's hanging receivers leave threads for the
// others); due deliveries are handed out round-robin across projects.
#ifndef FCA_SERVER_JOBS_WEBHOOK_SENDER_H_
#define FCA_SERVER_JOBS_WEBHOOK_SENDER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/jobs/webhook_policy.h"
#include "storage/store.h"

namespace fca::jobs {

class WebhookSender {
 public:
  struct Options {
    WebhookAllowlist allow;
    int max_attempts = 6;
    absl::Duration first_retry = absl::Seconds(10);
    absl::Duration max_retry = absl::Minutes(30);
    // Each of connecting, sending and waiting for the answer.
    absl::Duration timeout = absl::Seconds(5);
    // How often the thread looks for due deliveries when not woken.
    absl::Duration poll = absl::Seconds(1);
    // Attempts in flight at once, in all and per project.
    int concurrency = 8;
    int per_project = 2;
    // Clock of the attempts and of what is due, microseconds; unset: the
    // wall clock.
    std::function<int64_t()> now_us;
  };
  // Deliveries read from the store per pass (one per webhook at most).
  static constexpr int kBatch = 256;

  WebhookSender(storage::Store* store, Options options);
  ~WebhookSender();  // Stop()
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Starts the dispatcher and the `concurrency` delivery threads.
  void Start();
  // Idempotent; waits for the POSTs in flight (at most a few timeouts).
  void Stop();
  // Deliveries were enqueued: look now.
  void Wake();

  // One pass on the calling thread: every delivery due now (at most kBatch,
  // one per webhook), one attempt each, in turn. Returns how many were
  // attempted. Tests call it with the threads not started.
  int DeliverDue();

  // The wait after `failed` attempts (1, 2, ...).
  absl::Duration RetryDelay(int failed) const;

 private:
  struct Outcome {
    int http_status = 0;
    std::string error;  // "" when delivered
    bool retry = false;
  };
  Outcome Post(const storage::WebhookDelivery& delivery, int64_t now_us) const;
  void Record(const storage::WebhookDelivery& delivery, const Outcome& outcome, int64_t now_us);
  void Attempt(const storage::WebhookDelivery& delivery);
  std::vector<storage::WebhookDelivery> Due();
  // The dispatcher: hands due deliveries to the delivery threads.
  void Loop();
  // Queues what may start now of `due` (ordered fairly across projects).
  void Dispatch(std::vector<storage::WebhookDelivery> due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work();
  int64_t NowUs() const;
  bool Woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_.load() || wake_; }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_.load() || !queue_.empty();
  }

  storage::Store* store_;
  const Options options_;
  std::thread thread_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<storage::WebhookDelivery> queue_ ABSL_GUARDED_BY(mu_);
  // Queued or being attempted: webhook ids, and their count per project.
  std::set<int64_t> busy_hooks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> busy_projects_ ABSL_GUARDED_BY(mu_);
  // Deliveries attempted since Loop last began reading the due ones: the
  // store's answer may still show them pending, so they wait for the next.
  std::set<int64_t> attempted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_WEBHOOK_SENDER_H_
