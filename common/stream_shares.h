// Long-lived streams (WatchJob, the HTTP event stream) are held as slots of
// a bounded pool in which each user holds at most a share, so that one key
// cannot take every stream of the server (issue 40). The one home of the
// share's rule.
#ifndef FCA_COMMON_STREAM_SHARES_H_
#define FCA_COMMON_STREAM_SHARES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace fca {

class StreamShares {
 public:
  // A user holds at most limit / kUserShareDivisor streams (at least 1).
  static constexpr int64_t kUserShareDivisor = 4;

  // `limit`: streams open at once in all. `observe` (if set) is told +1 and
  // -1 as slots are taken and given back (a gauge).
  explicit StreamShares(int64_t limit, std::function<void(int64_t)> observe = nullptr);

  // Held while its stream is open; gives its slot back when destroyed.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    friend class StreamShares;
    Slot(StreamShares* shares, std::string user) : shares_(shares), user_(std::move(user)) {}
    StreamShares* const shares_;
    const std::string user_;
  };

  // A slot for `user`, or RESOURCE_EXHAUSTED naming the limit reached (the
  // server's, or the user's share); `what` names the streams ("job
  // streams"). Must not outlive this.
  absl::StatusOr<std::shared_ptr<Slot>> Acquire(const std::string& user, absl::string_view what);

  int64_t limit() const { return limit_; }
  int64_t per_user() const { return per_user_; }
  int64_t open() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Release(const std::string& user) ABSL_LOCKS_EXCLUDED(mu_);

  const int64_t limit_;
  const int64_t per_user_;
  const std::function<void(int64_t)> observe_;
  mutable absl::Mutex mu_;
  int64_t open_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> by_user_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca

#endif  // FCA_COMMON_STREAM_SHARES_H_
