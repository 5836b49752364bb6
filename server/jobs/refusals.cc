#include "server/jobs/refusals.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fca::jobs {
namespace {

int64_t ToMicros(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

std::chrono::milliseconds RefusalBackoff::After(int refusals) const {
  std::chrono::milliseconds out = initial;
  // Doubling stops at the cap, long before it could overflow.
  for (int i = 1; i < refusals && out < max; ++i) out *= 2;
  return std::min(out, max);
}

void Refusals::Seen(const std::string& worker, Micros now) {
  absl::MutexLock lock(&mu_);
  Micros& seen = last_seen_[worker];
  seen = std::max(seen, now);
}

std::chrono::milliseconds Refusals::Record(int64_t job_id, int64_t task_id,
                                           const std::string& worker, const std::string& reason,
                                           Micros now) {
  absl::MutexLock lock(&mu_);
  Micros& seen = last_seen_[worker];
  seen = std::max(seen, now);
  TaskRefusals& task = refusals_[task_id];
  task.job_id = job_id;
  Refusal& r = task.by_worker[worker];
  if (r.count == 0) r.first = now;
  ++r.count;
  r.reason = reason;
  const std::chrono::milliseconds wait = backoff_.After(r.count);
  r.until = now + ToMicros(wait);
  return wait;
}

std::vector<int64_t> Refusals::BackedOff(const std::string& worker, Micros now) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> out;
  for (const auto& [task_id, task] : refusals_) {
    auto it = task.by_worker.find(worker);
    if (it != task.by_worker.end() && it->second.until > now) out.push_back(task_id);
  }
  return out;
}

bool Refusals::RefusedByEveryLiveWorker(int64_t task_id, Micros now,
                                        std::chrono::milliseconds live) {
  absl::MutexLock lock(&mu_);
  const Micros since = now - ToMicros(live);
  const auto task = refusals_.find(task_id);
  bool every = true;
  for (auto it = last_seen_.begin(); it != last_seen_.end();) {
    if (it->second < since) {
      it = last_seen_.erase(it);
      continue;
    }
    if (task == refusals_.end() || task->second.by_worker.count(it->first) == 0) every = false;
    ++it;
  }
  return every;
}

bool Refusals::GraceOver(int64_t task_id, Micros now) {
  absl::MutexLock lock(&mu_);
  const auto task = refusals_.find(task_id);
  if (task == refusals_.end() || task->second.by_worker.empty()) return false;
  Micros first = now;
  for (const auto& [worker, r] : task->second.by_worker) first = std::min(first, r.first);
  return now - first >= ToMicros(backoff_.grace);
}

std::string Refusals::Describe(int64_t task_id) {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<Micros, std::string>> parts;
  const auto task = refusals_.find(task_id);
  if (task == refusals_.end()) return "";
  for (const auto& [worker, r] : task->second.by_worker) {
    parts.emplace_back(r.first, absl::StrFormat("%s (%s)", worker, r.reason));
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, "; ", [](std::string* out, const auto& p) { out->append(p.second); });
}

void Refusals::ForgetJob(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = refusals_.begin(); it != refusals_.end();) {
    it = it->second.job_id == job_id ? refusals_.erase(it) : std::next(it);
  }
}

}  // namespace fca::jobs
