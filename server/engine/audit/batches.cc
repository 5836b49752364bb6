#include "server/engine/audit/batches.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// State shared by the threads of one RunBatches call.
class BatchQueue {
 public:
  BatchQueue(int64_t first, int64_t n, int64_t batch) : first_(first), n_(n), batch_(batch) {}

  // Claims the next batch; false when none is left or a batch failed.
  bool Next(int64_t* begin, int64_t* end) {
    if (stopped_.load()) return false;
    const int64_t b = first_ + next_.fetch_add(1) * batch_;
    if (b >= n_) return false;
    *begin = b;
    *end = std::min(n_, b + batch_);
    return true;
  }

  void Finished(int64_t windows) { done_.fetch_add(windows); }
  // Windows finished, counting the `first` ones before the queue.
  int64_t done() const { return first_ + done_.load(); }

  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = std::move(status);
    stopped_.store(true);
  }
  absl::Status error() const {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  const int64_t first_, n_, batch_;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stopped_{false};
  mutable absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status RunBatches(int64_t first, int64_t n, int64_t batch, int threads,
                        const std::function<absl::Status(int64_t begin, int64_t end)>& fn,
                        const std::function<absl::Status(int64_t windows_done)>& after) {
  if (first >= n) return absl::OkStatus();
  BatchQueue queue(first, n, std::max<int64_t>(1, batch));
  int64_t reported = first;
  auto work = [&](bool calling_thread) {
    int64_t b = 0, e = 0;
    while (queue.Next(&b, &e)) {
      absl::Status s = GuardTorch("running a batch", [&] { return fn(b, e); });
      if (!s.ok()) return queue.Fail(std::move(s));
      queue.Finished(e - b);
      if (!calling_thread) continue;
      reported = queue.done();
      s = after(reported);
      if (!s.ok()) return queue.Fail(std::move(s));
    }
  };
  const int64_t batches = (n - first + batch - 1) / std::max<int64_t>(1, batch);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < std::min<int64_t>(threads, batches); ++t) {
    helpers.emplace_back(work, false);
  }
  work(true);
  for (std::thread& h : helpers) h.join();
  FCA_RETURN_IF_ERROR(queue.error());
  if (queue.done() != reported) return after(queue.done());
  return absl::OkStatus();
}

}  // namespace fca::engine
