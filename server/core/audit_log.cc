#include "server/core/audit_log.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fca::core {
namespace {

int64_t Micros(absl::Time time) { return absl::ToUnixMicros(time); }

}  // namespace

const std::vector<std::string>& AuditActions() {
  static const auto* const names = new std::vector<std::string>{
#define FCA_AUDIT_ACTION_STRING(id, name) name,
      FCA_AUDIT_ACTIONS(FCA_AUDIT_ACTION_STRING)
#undef FCA_AUDIT_ACTION_STRING
  };
  return *names;
}

AuditLog::AuditLog(storage::Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

void AuditLog::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void AuditLog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  FlushRefusals(/*all=*/true);
}

void AuditLog::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.sweep_every);
      if (stop_) return;
    }
    if (absl::StatusOr<int64_t> purged = Sweep(); !purged.ok()) {
      LOG(WARNING) << "audit log: sweep failed (retried later): " << purged.status();
    }
  }
}

void AuditLog::Write(const storage::AuditLogRow& row) {
  if (absl::StatusOr<int64_t> id = store_->AppendAuditLog(row); !id.ok()) {
    LOG(ERROR) << "audit log: cannot record " << row.action << " by '" << row.user
               << "': " << id.status();
  }
}

void AuditLog::Record(const Caller& caller, absl::string_view action, const AuditObject& object,
                      const absl::Status& outcome, absl::string_view detail) {
  storage::AuditLogRow row;  // at_us 0: the store's clock
  row.user = caller.user;
  row.key_id = caller.key_id;
  row.peer = caller.peer;
  row.action = std::string(action);
  row.object_kind = object.kind;
  row.object_id = object.id;
  row.outcome = outcome.ok() ? "OK" : absl::StatusCodeToString(outcome.code());
  row.detail = outcome.ok()     ? std::string(detail)
               : detail.empty() ? std::string(outcome.message())
                                : absl::StrCat(detail, ": ", outcome.message());
  Write(row);
}

void AuditLog::RecordServer(absl::string_view action, absl::string_view detail) {
  Record(Caller{"fca-server", true}, action, AuditObject{"server", ""}, absl::OkStatus(), detail);
}

std::string AuditLog::Address(absl::string_view peer) {
  const size_t colon = peer.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == peer.size()) return std::string(peer);
  const absl::string_view port = peer.substr(colon + 1);
  if (!std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) return std::string(peer);
  const absl::string_view host = peer.substr(0, colon);
  // "ipv6:[::1]:5678" and "ipv4:1.2.3.4:5678" end in a port; "ipv6:::1"
  // without brackets does not, nor does a unix socket's path.
  if (host.empty() || (host.back() != ']' && host.find(':') != host.rfind(':'))) {
    return std::string(peer);
  }
  return std::string(host);
}

storage::AuditLogRow AuditLog::RefusalRow(const std::string& address, int64_t count,
                                          absl::string_view reason) const {
  storage::AuditLogRow row;
  row.peer = address;
  row.action = audit_action::kAuthRefused;
  row.object_kind = "peer";
  row.object_id = address;
  row.outcome = absl::StatusCodeToString(absl::StatusCode::kUnauthenticated);
  row.detail = absl::StrFormat("refusals=%d: %s", count, reason);
  return row;
}

bool AuditLog::TakeRefusalRow(absl::Time now) {
  if (now - window_start_ >= options_.refusal_interval || now < window_start_) {
    window_start_ = now;
    window_rows_ = 0;
  }
  if (window_rows_ >= options_.max_refusal_rows) return false;
  ++window_rows_;
  return true;
}

bool AuditLog::RecordRefusal(absl::string_view peer, absl::string_view reason) {
  const std::string address = Address(peer);
  const absl::Time now = options_.now();
  storage::AuditLogRow row;
  {
    absl::MutexLock lock(&mu_);
    const std::pair<std::string, std::string> source(address, reason);
    auto it = peers_.find(source);
    if (it == peers_.end()) {
      if (static_cast<int>(peers_.size()) >= options_.max_tracked_peers) {
        ++untracked_;
        return false;
      }
      it = peers_.emplace(source, PeerRefusals()).first;
    }
    PeerRefusals& refusals = it->second;
    const bool in_interval =
        now - refusals.last_row < options_.refusal_interval && now >= refusals.last_row;
    if (in_interval || !TakeRefusalRow(now)) {
      ++refusals.suppressed;
      return false;
    }
    row = RefusalRow(address, refusals.suppressed + 1, reason);
    refusals.suppressed = 0;
    refusals.last_row = now;
  }
  Write(row);
  return true;
}

void AuditLog::FlushRefusals(bool all) {
  const absl::Time now = options_.now();
  std::vector<storage::AuditLogRow> rows;
  {
    absl::MutexLock lock(&mu_);
    int64_t summary_count = 0;
    int summary_peers = 0;
    for (auto it = peers_.begin(); it != peers_.end();) {
      PeerRefusals& refusals = it->second;
      const bool interval_over = now - refusals.last_row >= options_.refusal_interval;
      if (refusals.suppressed > 0 && (interval_over || all)) {
        if (TakeRefusalRow(now)) {
          rows.push_back(RefusalRow(it->first.first, refusals.suppressed, it->first.second));
          refusals.last_row = now;
        } else {
          summary_count += refusals.suppressed;
          ++summary_peers;
        }
        refusals.suppressed = 0;
      }
      // An address quiet for a whole interval is forgotten: the map holds
      // the addresses of the last interval only.
      if (refusals.suppressed == 0 && now - refusals.last_row >= options_.refusal_interval) {
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
    summary_count += untracked_;
    untracked_ = 0;
    if (summary_count > 0) {
      rows.push_back(
          RefusalRow("", summary_count,
                     absl::StrFormat("from %d or more addresses beyond the audit log's rate limit",
                                     std::max(summary_peers, 1))));
    }
  }
  for (const storage::AuditLogRow& row : rows) Write(row);
}

absl::StatusOr<int64_t> AuditLog::Sweep() {
  FlushRefusals(/*all=*/false);
  if (options_.keep <= absl::ZeroDuration()) return 0;
  const int64_t before = Micros(options_.now() - options_.keep);
  int64_t purged = 0;
  while (true) {
    absl::StatusOr<int64_t> batch = store_->PurgeAuditLog(before, options_.purge_batch);
    if (!batch.ok()) return batch.status();
    purged += *batch;
    if (*batch < options_.purge_batch) break;
  }
  if (purged > 0) {
    LOG(INFO) << "audit log: purged " << purged << " rows older than "
              << absl::FormatDuration(options_.keep);
    if (absl::Status reclaimed = store_->ReclaimSpace(); !reclaimed.ok()) {
      LOG(WARNING) << "audit log: " << reclaimed;
    }
  }
  return purged;
}

}  // namespace fca::core
