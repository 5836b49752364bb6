// Wakes WatchJob streams when a job gets a new event. Events themselves live
// in the store; the hub only carries "job J has events up to seq S" and the
// job's latest progress fraction. Thread-safe.
#ifndef FCA_SERVER_JOBS_EVENT_HUB_H_
#define FCA_SERVER_JOBS_EVENT_HUB_H_

#include <chrono>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fca::core {

class EventHub {
 public:
  // Waiters re-check their condition whenever mu_ is released, so no
  // notification is needed after a change under mu_.
  void Notify(int64_t job_id, int64_t seq) {
    absl::MutexLock lock(&mu_);
    int64_t& last = last_seq_[job_id];
    if (seq > last) last = seq;
  }

  // Returns when the job has an event after `after_seq`, Shutdown() was
  // called, or `timeout` passed; callers re-read the store either way.
  void Wait(int64_t job_id, int64_t after_seq, std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    const NewEvent ready{this, job_id, after_seq};
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
  }

  void SetProgress(int64_t job_id, double fraction) {
    absl::MutexLock lock(&mu_);
    progress_[job_id] = fraction;
  }
  double Progress(int64_t job_id) const {
    absl::MutexLock lock(&mu_);
    auto it = progress_.find(job_id);
    return it == progress_.end() ? 0.0 : it->second;
  }

  // Wakes every waiter (server shutdown).
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }

 private:
  // Wait's condition, evaluated by absl::Mutex with mu_ held.
  struct NewEvent {
    const EventHub* hub;
    int64_t job_id;
    int64_t after_seq;
    bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub->mu_) {
      auto it = hub->last_seq_.find(job_id);
      return hub->shutdown_ || (it != hub->last_seq_.end() && it->second > after_seq);
    }
  };

  mutable absl::Mutex mu_;
  std::map<int64_t, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, double> progress_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fca::core

#endif  // FCA_SERVER_JOBS_EVENT_HUB_H_
