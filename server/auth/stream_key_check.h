// Whether a long-lived stream (gRPC WatchJob, the HTTP event stream) may
// go on: its key is checked again at each event and, while no event comes,
// every `interval`, so a stream ends once its key is revoked or removed
// from the store (UNAUTHENTICATED) instead of streaming for as long as the
// job runs. Without --auth nothing is checked.
#ifndef FCA_SERVER_AUTH_STREAM_KEY_CHECK_H_
#define FCA_SERVER_AUTH_STREAM_KEY_CHECK_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/auth/authenticator.h"

namespace fca::auth {

class StreamKeyCheck {
 public:
  using Clock = std::chrono::steady_clock;
  // How often an idle stream's key is checked again.
  static constexpr std::chrono::milliseconds kInterval{5000};

  // `auth` must outlive the check; `authorization` and `peer` as given to
  // Authenticate when the stream opened.
  StreamKeyCheck(const Authenticator* auth, std::optional<std::string> authorization,
                 std::string peer, std::chrono::milliseconds interval = kInterval,
                 std::function<Clock::time_point()> now = Clock::now);

  // OK while the key is valid; UNAUTHENTICATED once it is not. At an event
  // (`at_event`) it checks now, otherwise once `interval` has passed since
  // the last check. A lookup that fails (the store busy) counts as valid:
  // a stream does not end on a transient error.
  [[nodiscard]] absl::Status Check(bool at_event);

 private:
  const Authenticator* auth_;
  const std::optional<std::string> authorization_;
  const std::string peer_;
  const std::chrono::milliseconds interval_;
  const std::function<Clock::time_point()> now_;
  Clock::time_point last_;
};

}  // namespace fca::auth

#endif  // FCA_SERVER_AUTH_STREAM_KEY_CHECK_H_
