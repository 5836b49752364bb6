// Listen addresses written HOST:PORT ("127.0.0.1:7401", "[::1]:7401",
// "localhost:0"): the one parser of fca-server's --http_listen and the HTTP
// gateway's address.
#ifndef FCA_COMMON_HOST_PORT_H_
#define FCA_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fca {

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  int port = 0;      // 0: any free port
};

// INVALID_ARGUMENT "'<address>' is not HOST:PORT with a port in [0, 65535]"
// (the address cut to 64 bytes) for no colon, an empty host or a bad port;
// callers put the flag or the address's role in front.
[[nodiscard]] absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// The host of a caller's peer as the transports name it: gRPC's
// "ipv4:10.0.0.7:5123" and "ipv6:[::1]:5123" (brackets maybe written %5B
// and %5D), the HTTP gateway's "http 10.0.0.7:5123". Anything else (a Unix
// socket's "unix:/path") comes back whole.
std::string PeerHost(absl::string_view peer);

}  // namespace fca

#endif  // FCA_COMMON_HOST_PORT_H_
