#include "common/stream_shares.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fca {

StreamShares::StreamShares(int64_t limit, std::function<void(int64_t)> observe)
    : limit_(std::max<int64_t>(1, limit)),
      per_user_(std::max<int64_t>(1, limit_ / kUserShareDivisor)),
      observe_(std::move(observe)) {}

StreamShares::Slot::~Slot() { shares_->Release(user_); }

absl::StatusOr<std::shared_ptr<StreamShares::Slot>> StreamShares::Acquire(const std::string& user,
                                                                          absl::string_view what) {
  {
    absl::MutexLock lock(&mu_);
    if (open_ >= limit_) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("the server is serving %d %s, its limit; retry shortly", limit_, what));
    }
    int64_t& mine = by_user_[user];
    if (mine >= per_user_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s holds %d %s, a user's share (a quarter of the server's %d); close one first", user,
          mine, what, limit_));
    }
    ++mine;
    ++open_;
  }
  if (observe_) observe_(1);
  return std::shared_ptr<Slot>(new Slot(this, user));
}

void StreamShares::Release(const std::string& user) {
  {
    absl::MutexLock lock(&mu_);
    --open_;
    auto it = by_user_.find(user);
    if (it != by_user_.end() && --it->second <= 0) by_user_.erase(it);
  }
  if (observe_) observe_(-1);
}

int64_t StreamShares::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

}  // namespace fca
