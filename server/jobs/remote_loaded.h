// What remote workers last reported holding loaded (ClaimTaskRequest and
// RenewLeaseRequest .loaded_models), for GetQueue's loaded_on.
//
// Kept in the coordinator's memory, by lease holder ("<worker>@<key
// user>"): a report replaces the worker's previous one, and a worker that
// has not called for longer than `live` (the coordinator's lease, the same
// liveness as refusals.h) is forgotten. A restarted coordinator knows
// nothing until each worker calls again (within a poll or a heartbeat).
#ifndef FCA_SERVER_JOBS_REMOTE_LOADED_H_
#define FCA_SERVER_JOBS_REMOTE_LOADED_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fca::jobs {

class RemoteLoaded {
 public:
  using Micros = int64_t;  // the coordinator's clock, microseconds

  explicit RemoteLoaded(std::chrono::milliseconds live);

  // `worker` reported `models` at `now`. Names that cannot name a model
  // (model_repository.h ValidateName) are dropped, and so is all beyond
  // kMaxLoadedModels (the caller refuses longer lists): a worker cannot
  // make the coordinator keep more than that. Entries older than `live`
  // are dropped on the way, so stale holders do not accumulate.
  void Report(const std::string& worker, const std::vector<std::string>& models, Micros now);
  // The models of each worker seen within `live` before `now`, by worker;
  // workers holding none are left out.
  std::map<std::string, std::vector<std::string>> Live(Micros now);

 private:
  struct Entry {
    std::vector<std::string> models;
    Micros seen = 0;
  };
  void Expire(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Micros live_us_;
  absl::Mutex mu_;
  std::map<std::string, Entry> by_worker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_REMOTE_LOADED_H_
