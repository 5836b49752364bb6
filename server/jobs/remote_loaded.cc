#include "server/jobs/remote_loaded.h"

#include <algorithm>
#include <utility>

#include "server/runtime/model_repository.h"
#include "server/runtime/task_broker.h"

namespace fca::jobs {

RemoteLoaded::RemoteLoaded(std::chrono::milliseconds live)
    : live_us_(std::chrono::duration_cast<std::chrono::microseconds>(live).count()) {}

void RemoteLoaded::Report(const std::string& worker, const std::vector<std::string>& models,
                          Micros now) {
  Entry entry;
  entry.seen = now;
  for (const std::string& name : models) {
    if (entry.models.size() >= static_cast<size_t>(runtime::kMaxLoadedModels)) break;
    if (runtime::ValidateName(name, "model").ok()) entry.models.push_back(name);
  }
  std::sort(entry.models.begin(), entry.models.end());
  entry.models.erase(std::unique(entry.models.begin(), entry.models.end()), entry.models.end());
  absl::MutexLock lock(&mu_);
  Expire(now);
  if (entry.models.empty()) {
    by_worker_.erase(worker);
  } else {
    by_worker_[worker] = std::move(entry);
  }
}

std::map<std::string, std::vector<std::string>> RemoteLoaded::Live(Micros now) {
  absl::MutexLock lock(&mu_);
  Expire(now);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [worker, entry] : by_worker_) out[worker] = entry.models;
  return out;
}

void RemoteLoaded::Expire(Micros now) {
  for (auto it = by_worker_.begin(); it != by_worker_.end();) {
    it = now - it->second.seen > live_us_ ? by_worker_.erase(it) : std::next(it);
  }
}

}  // namespace fca::jobs
