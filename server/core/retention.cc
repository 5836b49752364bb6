#include "server/core/retention.h"

#include <glog/logging.h>

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/jobs/datasets.h"

namespace fca::core {
namespace {

constexpr int64_t kMicrosPerDay = int64_t{86400} * 1000 * 1000;

std::string Describe(const PurgeCounts& counts) {
  return absl::StrFormat(
      "purged %d jobs, %d datasets, %d cache entries; kept %d expired datasets that queued or "
      "running jobs name",
      counts.jobs, counts.datasets, counts.cache_entries, counts.datasets_in_use);
}

}  // namespace

Retention::Retention(storage::Store* store, RetentionOptions options)
    : store_(store), options_(std::move(options)) {}

Retention::~Retention() { Stop(); }

int64_t Retention::NowUs() const {
  return options_.now_us ? options_.now_us() : absl::ToUnixMicros(absl::Now());
}

void Retention::Start() {
  thread_ = std::thread([this] {
    while (true) {
      const absl::StatusOr<PurgeCounts> counts = PurgeOnce();
      if (!counts.ok()) {
        LOG(WARNING) << "retention: purge: " << counts.status();
      } else if (counts->jobs + counts->datasets + counts->cache_entries > 0) {
        LOG(INFO) << "retention: " << Describe(*counts);
      }
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval)) return;
    }
  });
}

void Retention::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<PurgeCounts> Retention::PurgeOnce() {
  PurgeCounts counts;
  // What was purged before a failure is recorded too.
  absl::Status status = PurgeJobs(&counts);
  if (status.ok()) status = PurgeDatasets(&counts);
  if (status.ok()) status = PurgeCache(&counts);
  if (options_.audit_log != nullptr &&
      counts.jobs + counts.datasets + counts.cache_entries + counts.datasets_in_use > 0) {
    options_.audit_log->RecordServer(audit_action::kRetentionPurge, Describe(counts));
  }
  if (!status.ok()) return status;
  return counts;
}

absl::Status Retention::PurgeJobs(PurgeCounts* counts) {
  while (true) {
    FCA_ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                         store_->ExpiredJobs(options_.defaults, options_.batch));
    // One job (its events and results by cascade) per transaction: the
    // store is held for one job's rows at a time.
    int64_t deleted = 0;
    for (int64_t id : ids) {
      FCA_ASSIGN_OR_RETURN(const bool purged, store_->PurgeExpiredJob(id, options_.defaults));
      deleted += purged ? 1 : 0;
    }
    counts->jobs += deleted;
    if (static_cast<int>(ids.size()) < options_.batch || deleted == 0) return absl::OkStatus();
  }
}

absl::Status Retention::PurgeDatasets(PurgeCounts* counts) {
  storage::DatasetUse after{0, -1};
  while (true) {
    FCA_ASSIGN_OR_RETURN(const std::vector<storage::DatasetUse> uses,
                         store_->ExpiredDatasets(options_.defaults, options_.batch, after));
    for (const storage::DatasetUse& use : uses) {
      // Checked and deleted in one transaction: a job submitted meanwhile
      // either marked the dataset used (no longer expired) or is queued
      // and names it.
      bool in_use = false;
      bool deleted = false;
      const absl::Status status = store_->Transaction([&]() -> absl::Status {
        absl::StatusOr<storage::DatasetRecord> dataset = store_->GetDataset(use.id);
        if (absl::IsNotFound(dataset.status())) return absl::OkStatus();  // deleted meanwhile
        FCA_RETURN_IF_ERROR(dataset.status());
        const absl::Status unused = jobs::CheckDatasetUnused(store_, *dataset);
        if (absl::IsFailedPrecondition(unused)) {
          in_use = true;
          return absl::OkStatus();
        }
        FCA_RETURN_IF_ERROR(unused);
        FCA_ASSIGN_OR_RETURN(deleted, store_->PurgeExpiredDataset(use.id, options_.defaults));
        return absl::OkStatus();
      });
      FCA_RETURN_IF_ERROR(status);
      counts->datasets += deleted ? 1 : 0;
      counts->datasets_in_use += in_use ? 1 : 0;
    }
    if (static_cast<int>(uses.size()) < options_.batch) return absl::OkStatus();
    after = uses.back();
  }
}

absl::Status Retention::PurgeCache(PurgeCounts* counts) {
  if (options_.coeff_cache_max_age_days <= 0) return absl::OkStatus();
  const int64_t cutoff = NowUs() - options_.coeff_cache_max_age_days * kMicrosPerDay;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const int64_t evicted,
                         store_->EvictCoefficientsUnusedSince(cutoff, options_.batch));
    counts->cache_entries += evicted;
    if (evicted < options_.batch) return absl::OkStatus();
  }
}

absl::StatusOr<v1::Retention> DescribeRetention(storage::Store* store,
                                                const storage::RetentionDays& defaults,
                                                const std::string& project) {
  FCA_ASSIGN_OR_RETURN(const storage::RetentionRule rule, store->GetRetentionRule(project));
  v1::Retention out;
  out.set_project(project);
  out.set_keep_jobs_days(rule.keep_jobs_days.value_or(defaults.keep_jobs_days));
  out.set_keep_unused_datasets_days(
      rule.keep_unused_datasets_days.value_or(defaults.keep_unused_datasets_days));
  out.set_jobs_days_default(!rule.keep_jobs_days.has_value());
  out.set_datasets_days_default(!rule.keep_unused_datasets_days.has_value());
  return out;
}

namespace {

absl::Status ApplyDays(bool has, int32_t days, const char* field, std::optional<int>* out) {
  if (!has) return absl::OkStatus();
  if (days < -1 || days > kMaxRetentionDays) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is %d; it must be -1 (the server's default), 0 (forever) or up to %d",
                        field, days, kMaxRetentionDays));
  }
  *out = days == -1 ? std::nullopt : std::optional<int>(days);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyRetentionRequest(const v1::SetRetentionRequest& request,
                                   storage::RetentionRule* rule) {
  FCA_RETURN_IF_ERROR(ApplyDays(request.has_keep_jobs_days(), request.keep_jobs_days(),
                                "keep_jobs_days", &rule->keep_jobs_days));
  return ApplyDays(request.has_keep_unused_datasets_days(), request.keep_unused_datasets_days(),
                   "keep_unused_datasets_days", &rule->keep_unused_datasets_days);
}

}  // namespace fca::core
