#include "common/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace fca {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const absl::Status malformed = absl::InvalidArgumentError(
      absl::StrFormat("'%s' is not HOST:PORT with a port in [0, 65535]", address.substr(0, 64)));
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return malformed;
  absl::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (host.empty() || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return malformed;
  }
  return HostPort{std::string(host), port};
}

std::string PeerHost(absl::string_view peer) {
  absl::string_view rest = peer;
  if (!absl::ConsumePrefix(&rest, "ipv4:") && !absl::ConsumePrefix(&rest, "ipv6:") &&
      !absl::ConsumePrefix(&rest, "http ")) {
    return std::string(peer);
  }
  const std::string decoded = absl::StrReplaceAll(rest, {{"%5B", "["}, {"%5D", "]"}});
  absl::StatusOr<HostPort> parsed = ParseHostPort(decoded);
  return parsed.ok() ? parsed->host : std::string(peer);
}

}  // namespace fca
