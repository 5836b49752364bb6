// fca.v1.AuditService as JSON over HTTP, next to the gRPC port, and the
// server's metrics and health endpoints (cpp-httplib, Debian's
// libcpp-httplib-dev).
//
//   POST /api/v1/<RpcName>         proto3 JSON request (empty body = empty
//                                  message) -> proto3 JSON response; GET too
//                                  for the read-only methods (empty body)
//   GET  /api/v1/jobs/<id>/events  WatchJob as server-sent events, from
//                                  ?after_seq=N or the Last-Event-ID header
//   GET  /metrics                  Prometheus text format (common/metrics.h)
//   GET  /healthz, /readyz         liveness, readiness
//   GET  /, /ui/<path>             the dashboard (assets.h)
//
// Each API call authenticates like gRPC (`Authorization: Bearer <key>`,
// grpc_server::Authenticator; worker keys are refused), calls the same
// AuditServiceCore method, and maps an error to its HTTP status with the
// body {"code": "NOT_FOUND", "message": "..."} (HttpStatus below).
// JSON is printed with the proto field names (snake_case), every field
// present, int64 as strings (the proto3 JSON mapping of protobuf's util);
// unknown fields are refused (400, the message names the field).
//
// /metrics, /healthz and /readyz need no key: they reveal no user's data.
//
// Whatever --auth says, API requests from other sites are refused (403):
// a foreign Host (DNS rebinding) or Origin, and a state-changing call
// without `Content-Type: application/json` is 415 (cross_site.h). Every
// response forbids framing (CSP frame-ancestors, X-Frame-Options) and
// sniffing; API responses are never cached.
#ifndef FCA_SERVER_HTTP_GATEWAY_H_
#define FCA_SERVER_HTTP_GATEWAY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/service.h"
#include "server/grpc/auth.h"
#include "server/http/cross_site.h"

namespace httplib {
class Server;
}

namespace fca::http {

struct GatewayOptions {
  // HOST:PORT ("127.0.0.1:7401", "[::1]:7401", "0.0.0.0:7401"); port 0
  // picks a free one (port()).
  std::string listen = "127.0.0.1:7401";
  // Connections served at once (each event stream holds one); further
  // connections wait in a queue of 4x this many, then in the kernel's.
  int threads = 32;
  // Largest request body (413 beyond it).
  int64_t max_body_bytes = int64_t{16} << 20;
  // Event streams open at once (429 beyond it): at most this and at most
  // half of `threads`, so streams never starve plain calls. They also count
  // against the core's WatchJob limit (ServiceLimits::max_watch_streams).
  int64_t max_event_streams = 256;
  // A comment line on an idle event stream this often.
  std::chrono::milliseconds keepalive_interval{15000};
  // Both set: HTTPS with these PEM files (the gRPC port's --tls_cert and
  // --tls_key).
  std::string tls_cert_file, tls_key_file;
  // GET /readyz: 200 when it returns OK, else 503 with its message. Unset:
  // always ready.
  std::function<absl::Status()> ready;
  // Comma-separated host names and origins the API answers to besides its
  // own (cross_site.h; --http_allowed_hosts, --http_allowed_origins).
  std::string allowed_hosts, allowed_origins;
};

// The HTTP status of an error code:
//   INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
//   NOT_FOUND 404, ALREADY_EXISTS 409, FAILED_PRECONDITION 409 (the state of
//   a resource forbids the call: a conflict; 412 is for conditional request
//   headers, which this API has none of), RESOURCE_EXHAUSTED 429,
//   UNIMPLEMENTED 501, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, others 500.
int HttpStatus(absl::StatusCode code);

class Gateway {
 public:
  // Binds and starts serving on threads of its own. `core` must outlive
  // the gateway. UNAVAILABLE when the address cannot be bound,
  // INVALID_ARGUMENT for a malformed address or options, FAILED_PRECONDITION
  // when the TLS files cannot be used.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Gateway>> Start(
      core::AuditServiceCore* core, grpc_server::Authenticator auth, GatewayOptions options);
  ~Gateway();  // Shutdown()
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  bool tls() const { return tls_; }

  // Ends the event streams (each with an UNAVAILABLE error event: resume
  // with Last-Event-ID), stops accepting and waits for the requests in
  // flight. Idempotent.
  void Shutdown();

  // One API method: the caller and the JSON request body (never empty) in,
  // the JSON response out.
  struct Method {
    bool read_only = false;  // GET accepted too
    std::function<absl::StatusOr<std::string>(const core::Caller&, const std::string& body)> call;
  };

 private:
  Gateway(core::AuditServiceCore* core, grpc_server::Authenticator auth, GatewayOptions options);
  void Route();

  core::AuditServiceCore* core_;
  const grpc_server::Authenticator auth_;
  const GatewayOptions options_;
  CrossSitePolicy cross_site_;
  std::map<std::string, Method> methods_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string host_;
  int port_ = 0;
  bool tls_ = false;
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> event_streams_{0};
};

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_GATEWAY_H_
