// Wakes WatchJob streams when a job gets a new event. Events themselves live
// in the store; the hub only carries "job J has events up to seq S" and the
// job's latest progress fraction. Thread-safe.
#ifndef FCA_SERVER_CORE_EVENT_HUB_H_
#define FCA_SERVER_CORE_EVENT_HUB_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

namespace fca::core {

class EventHub {
 public:
  void Notify(int64_t job_id, int64_t seq) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t& last = last_seq_[job_id];
      if (seq > last) last = seq;
    }
    cv_.notify_all();
  }

  // Returns when the job has an event after `after_seq`, Shutdown() was
  // called, or `timeout` passed; callers re-read the store either way.
  void Wait(int64_t job_id, int64_t after_seq, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] {
      auto it = last_seq_.find(job_id);
      return shutdown_ || (it != last_seq_.end() && it->second > after_seq);
    });
  }

  void SetProgress(int64_t job_id, double fraction) {
    std::lock_guard<std::mutex> lock(mu_);
    progress_[job_id] = fraction;
  }
  double Progress(int64_t job_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = progress_.find(job_id);
    return it == progress_.end() ? 0.0 : it->second;
  }

  // Wakes every waiter (server shutdown).
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, int64_t> last_seq_;  // guarded by mu_
  std::map<int64_t, double> progress_;   // guarded by mu_
  bool shutdown_ = false;                // guarded by mu_
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_EVENT_HUB_H_
