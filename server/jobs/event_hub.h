// Wakes WatchJob streams when a job gets a new event. Events themselves live
// in the store; the hub only carries "job J has events up to seq S", the
// job's latest progress fraction, and its notice: what the server knows of
// the job that the store could not record (its end, on a full disk).
// Thread-safe.
#ifndef FCA_SERVER_JOBS_EVENT_HUB_H_
#define FCA_SERVER_JOBS_EVENT_HUB_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fca::jobs {

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

  // Sets the job's notice ("" clears it); each change gets a new version.
  void SetNotice(int64_t job_id, const std::string& text) {
    absl::MutexLock lock(&mu_);
    if (text.empty()) {
      notices_.erase(job_id);
      return;
    }
    Notice& notice = notices_[job_id];
    if (notice.text == text) return;
    notice.text = text;
    notice.version = ++notice_versions_;
  }
  // The job's notice ("" when none) and its version (0 when none): a
  // watcher sends each version once.
  std::pair<std::string, int64_t> GetNotice(int64_t job_id) const {
    absl::MutexLock lock(&mu_);
    auto it = notices_.find(job_id);
    if (it == notices_.end()) return {"", 0};
    return {it->second.text, it->second.version};
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

  struct Notice {
    std::string text;
    int64_t version = 0;
  };

  mutable absl::Mutex mu_;
  std::map<int64_t, Notice> notices_ ABSL_GUARDED_BY(mu_);
  int64_t notice_versions_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, double> progress_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_EVENT_HUB_H_
