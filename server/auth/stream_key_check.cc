#include "server/auth/stream_key_check.h"

#include <utility>

#include "absl/status/statusor.h"

namespace fca::auth {

StreamKeyCheck::StreamKeyCheck(const Authenticator* auth, std::optional<std::string> authorization,
                               std::string peer, std::chrono::milliseconds interval,
                               std::function<Clock::time_point()> now)
    : auth_(auth),
      authorization_(std::move(authorization)),
      peer_(std::move(peer)),
      interval_(interval),
      now_(std::move(now)),
      last_(now_()) {}

absl::Status StreamKeyCheck::Check(bool at_event) {
  if (!auth_->enabled()) return absl::OkStatus();
  const Clock::time_point now = now_();
  if (!at_event && now - last_ < interval_) return absl::OkStatus();
  last_ = now;
  std::optional<absl::string_view> value;
  if (authorization_) value = *authorization_;
  const absl::StatusOr<core::Caller> caller = auth_->Authenticate(value, peer_);
  if (caller.ok() || !absl::IsUnauthenticated(caller.status())) return absl::OkStatus();
  return absl::UnauthenticatedError(
      "the API key of this stream is no longer valid (revoked or removed): the stream ends");
}

}  // namespace fca::auth
