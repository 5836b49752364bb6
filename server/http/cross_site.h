// Cross-site protection of the HTTP gateway, whatever --auth says: a web
// page a lab member opens must not drive the server on their machine.
//
// Three checks, in this order, on every API request (/api/...):
//   1. Host: the name the client asked for is one this server answers to:
//      an IP address literal, `localhost` or a name under `.localhost`, this
//      machine's host name, the listen address's name, or a name of
//      --http_allowed_hosts. A page on evil.example whose name was re-bound
//      to 127.0.0.1 (DNS rebinding) sends `Host: evil.example` and is
//      refused, so it cannot read what it sends.
//   2. Origin: when a browser names the page that sent the request, it must
//      be this server's own (scheme://Host of the request) or one of
//      --http_allowed_origins; `null` (sandboxed frames, files) is foreign.
//      Clients that are not browsers send no Origin and pass.
//   3. Content type: a method that changes state needs `Content-Type:
//      application/json`, which a browser only sends cross-site after a
//      CORS preflight (which this gateway answers for allowed origins only);
//      text/plain and form bodies, which need no preflight, are refused.
// The dashboard, /metrics, /healthz and /readyz reveal no user's data and
// are exempt from 1 and 2; they send CSP and X-Frame-Options (gateway.cc).
//
// Pure functions of the request's headers: tested without a socket
// (tests/http/cross_site_test.cc).
#ifndef FCA_SERVER_HTTP_CROSS_SITE_H_
#define FCA_SERVER_HTTP_CROSS_SITE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fca::http {

struct CrossSitePolicy {
  // Host names (lower case, no port) answered besides IP literals and
  // localhost: this machine's name and the listen address's name are added
  // by Make. A name starting with '.' matches that domain and every name
  // under it (".lab.example.org"); "*" matches any name (no DNS-rebinding
  // protection: for a server behind a proxy that checks Host itself).
  std::vector<std::string> allowed_hosts;
  // Origins ("https://grafana.lab.example.org:3000", lower case, no path)
  // allowed besides the server's own; they also get CORS headers.
  std::vector<std::string> allowed_origins;

  // The policy of a gateway listening on `listen_host` (an address or a
  // name) with the flags' comma-separated lists. INVALID_ARGUMENT names an
  // entry that is not a host name or not scheme://host[:port].
  [[nodiscard]] static absl::StatusOr<CrossSitePolicy> Make(absl::string_view listen_host,
                                                            absl::string_view allowed_hosts,
                                                            absl::string_view allowed_origins);
};

// What the checks read of one request.
struct CrossSiteRequest {
  std::optional<std::string> host;          // the Host header
  std::optional<std::string> origin;        // the Origin header
  std::optional<std::string> content_type;  // the Content-Type header
  bool changes_state = false;               // a method that is not read-only
};

// OK, or PERMISSION_DENIED (a foreign Host or Origin) or INVALID_ARGUMENT
// (a state-changing call without a JSON body type; HTTP 415), with a
// message naming the header and the flag that would allow it.
[[nodiscard]] absl::Status CheckCrossSite(const CrossSiteRequest& request,
                                          const CrossSitePolicy& policy);

// Whether `origin` is one of the policy's allowed origins (after
// normalisation): such a caller gets CORS headers.
bool IsAllowedOrigin(absl::string_view origin, const CrossSitePolicy& policy);

// The name of a Host header: "[::1]:7401" -> "::1", "Example.ORG.:80" ->
// "example.org"; nullopt when malformed.
std::optional<std::string> HostName(absl::string_view host_header);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_CROSS_SITE_H_
