// The audit log (docs/operator-guide.md "Audit log"): who did what, from
// where, to which object, with which outcome, kept in the store's
// audit_log table for --audit_log_keep_days.
//
// Recorded: every state-changing RPC (its outcome too when refused), the
// server's start and stop, and refused authentications, rate limited: per
// client address and reason (a missing key, an unknown one, a revoked one)
// at most one row per refusal_interval, and over all
// addresses at most max_refusal_rows per interval (plus one summary row);
// the refusals not written singly are counted and the count is written
// with the address's next row, or by Sweep() once the interval has passed.
// Each refusal row's detail starts with "refusals=N:", N the refusals it
// stands for, so the sum over the rows is the number of refused calls.
//
// A failed write is logged and does not change the outcome of the call it
// records (the call has happened).
//
// Thread-safety: every method may be called from any thread.
#ifndef FCA_SERVER_CORE_AUDIT_LOG_H_
#define FCA_SERVER_CORE_AUDIT_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/caller.h"
#include "storage/store.h"

namespace fca::core {

// The actions recorded, one home for their names (QueryAuditLog accepts
// these only).
#define FCA_AUDIT_ACTIONS(X)            \
  X(kDatasetUpload, "dataset.upload")   \
  X(kDatasetDelete, "dataset.delete")   \
  X(kJobSubmit, "job.submit")           \
  X(kJobCancel, "job.cancel")           \
  X(kJobDelete, "job.delete")           \
  X(kBackup, "database.backup")         \
  X(kKeyCreate, "key.create")           \
  X(kKeyRevoke, "key.revoke")           \
  X(kKeyRotate, "key.rotate")           \
  X(kProjectCreate, "project.create")   \
  X(kProjectDelete, "project.delete")   \
  X(kMemberAdd, "member.add")           \
  X(kMemberRemove, "member.remove")     \
  X(kWebhookAdd, "webhook.add")         \
  X(kWebhookRemove, "webhook.remove")   \
  X(kRetentionSet, "retention.set")     \
  X(kRetentionPurge, "retention.purge") \
  X(kServerStart, "server.start")       \
  X(kServerStop, "server.stop")         \
  X(kAuthRefused, "auth.refused")

namespace audit_action {
#define FCA_AUDIT_ACTION_NAME(id, name) inline constexpr char id[] = name;
FCA_AUDIT_ACTIONS(FCA_AUDIT_ACTION_NAME)
#undef FCA_AUDIT_ACTION_NAME
}  // namespace audit_action

// Every action name, in the order above.
const std::vector<std::string>& AuditActions();

// What an action acted on.
struct AuditObject {
  std::string kind;  // "job", "dataset", "api_key", "backup", "server", "peer", ...
  std::string id;    // its id or name; "" when none
};

class AuditLog {
 public:
  struct Options {
    // Per client address, at most one refusal row per interval.
    absl::Duration refusal_interval = absl::Minutes(1);
    // Over all addresses, at most this many refusal rows per interval (and
    // one summary row of the others).
    int max_refusal_rows = 60;
    // (address, reason) pairs tracked at once; refusals of more are counted
    // in the summary row.
    int max_tracked_peers = 10000;
    // Rows older than this are purged by Sweep(); zero keeps them forever.
    absl::Duration keep = absl::Hours(24 * 90);
    // Rows deleted per purge transaction.
    int purge_batch = 500;
    // How often the background thread (Start) runs Sweep().
    absl::Duration sweep_every = absl::Minutes(1);
    // The clock of the rate limit and of the purge's cut-off (rows are
    // stamped by the store's clock: give both the same one).
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  AuditLog(storage::Store* store, Options options);
  ~AuditLog() { Stop(); }
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Runs Sweep() every sweep_every on a thread of its own until Stop().
  void Start();
  // Stops the thread and writes the refusal counts not written yet.
  void Stop();

  // `caller` did `action` on `object`; `outcome` OK or why it was refused.
  void Record(const Caller& caller, absl::string_view action, const AuditObject& object,
              const absl::Status& outcome, absl::string_view detail = "");
  // The server's own action (start, stop).
  void RecordServer(absl::string_view action, absl::string_view detail);
  // A refused authentication from `peer` (gRPC's "ipv4:1.2.3.4:5678", the
  // gateway's "http 1.2.3.4:5678": the port is dropped, so one client's
  // connections count as one address). Returns whether a row was written.
  bool RecordRefusal(absl::string_view peer, absl::string_view reason);
  // Writes the suppressed refusal counts whose interval has passed, then
  // purges rows older than `keep` in batches of purge_batch. Returns the
  // rows purged.
  absl::StatusOr<int64_t> Sweep();

  // The address of a peer without its port.
  static std::string Address(absl::string_view peer);

 private:
  struct PeerRefusals {
    absl::Time last_row = absl::InfinitePast();  // of this address and reason
    int64_t suppressed = 0;                      // refusals since that row, not written
  };
  // A refusal row standing for `count` refusals.
  storage::AuditLogRow RefusalRow(const std::string& address, int64_t count,
                                  absl::string_view reason) const;
  // A row of the refusal budget of this interval is free (and taken).
  bool TakeRefusalRow(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(const storage::AuditLogRow& row);
  void FlushRefusals(bool all);
  void Run();

  storage::Store* const store_;
  const Options options_;
  absl::Mutex mu_;
  // By (address, reason).
  std::map<std::pair<std::string, std::string>, PeerRefusals> peers_ ABSL_GUARDED_BY(mu_);
  int64_t untracked_ ABSL_GUARDED_BY(mu_) = 0;  // refusals of addresses beyond the map
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int window_rows_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_AUDIT_LOG_H_
