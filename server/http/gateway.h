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
// server/auth; worker keys are refused), calls the same AuditServiceCore
// method (api_handlers.h), and maps an error to its HTTP status with the
// body {"code": "NOT_FOUND", "message": "..."} (HttpStatus). JSON is
// protobuf's proto3 mapping (json_io.h).
//
// /metrics, /healthz and /readyz need no key: they reveal no user's data.
//
// This file is the wiring: the methods are api_handlers.h's, the event
// stream event_stream.h's, the cross-site rules cross_site.h's, and the
// server itself (TLS, threads, limits, metrics) transport.h's.
//
// Whatever --auth says, API requests from other sites are refused (403):
// a foreign Host (DNS rebinding) or Origin, and a state-changing call
// without `Content-Type: application/json` is 415 (cross_site.h). With
// --auth, a request with a body and no valid key is refused before that,
// with 401, when its head arrives (reception.h, BodyGate). Every
// response forbids framing (CSP frame-ancestors, X-Frame-Options) and
// sniffing; API responses are never cached.
#ifndef FCA_SERVER_HTTP_GATEWAY_H_
#define FCA_SERVER_HTTP_GATEWAY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/stream_shares.h"
#include "server/auth/authenticator.h"
#include "server/core/service.h"
#include "server/http/api_handlers.h"
#include "server/http/cross_site.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace fca::http {

class Transport;  // transport.h, which includes <httplib.h>

struct GatewayOptions {
  // HOST:PORT ("127.0.0.1:7401", "[::1]:7401", "0.0.0.0:7401"); port 0
  // picks a free one (port()).
  std::string listen = "127.0.0.1:7401";
  // Requests served at once (each event stream holds a thread). Plain HTTP
  // (reception.h): further whole requests wait in a queue, while /healthz,
  // /readyz and /metrics have threads of their own. TLS: further
  // connections wait in a queue of 4x this many, then in the kernel's.
  int threads = 32;
  // Largest request body (413 beyond it, at once on plain HTTP). Bodies in
  // flight also reserve their bytes from the core's uploads budget
  // (ServiceLimits::max_upload_bytes_in_flight; 429 when spent).
  int64_t max_body_bytes = int64_t{16} << 20;
  // Plain HTTP (reception.h): a request's head and body must arrive within
  // this, in all, however slowly they trickle (408 then). TLS: a timeout per
  // read (httplib's own loop) of this many whole seconds.
  std::chrono::milliseconds request_timeout{10000};
  // Plain HTTP: connections open at once from one client address (429
  // beyond) and in all (the oldest still sending its request is dropped
  // for a new one; 503 when none is).
  int max_connections = 512;
  int max_connections_per_address = 64;
  // Event streams open at once (429 beyond it): at most this and at most
  // half of `threads`, so streams never starve plain calls; each user at
  // most a quarter of that (common/stream_shares.h). They also count
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

class Gateway {
 public:
  // Binds and starts serving on threads of its own. `core` must outlive
  // the gateway. UNAVAILABLE when the address cannot be bound,
  // INVALID_ARGUMENT for a malformed address or options, FAILED_PRECONDITION
  // when the TLS files cannot be used.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Gateway>> Start(core::AuditServiceCore* core,
                                                                      auth::Authenticator auth,
                                                                      GatewayOptions options);
  ~Gateway();  // Shutdown()
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  const std::string& host() const { return host_; }
  int port() const;
  bool tls() const;

  // Ends the event streams (each with an UNAVAILABLE error event: resume
  // with Last-Event-ID), stops accepting and waits for the requests in
  // flight. Idempotent.
  void Shutdown();

 private:
  Gateway(core::AuditServiceCore* core, auth::Authenticator auth, GatewayOptions options,
          ApiHandlers api, CrossSitePolicy cross_site);
  void RouteApi();
  void RouteEvents();
  void RouteProbesAndDashboard();
  // Cross-site checks and authentication of an API request: the caller, or
  // the refusal to send. An allowed foreign origin gets CORS headers.
  std::variant<core::Caller, ApiReply> Admit(const httplib::Request& req, httplib::Response& res,
                                             bool changes_state) const;
  void ServeEvents(const httplib::Request& req, httplib::Response& res);
  // The reception's BodyGate: the user a request body counts against, its
  // key checked as Admit checks it, before any byte of it is reserved.
  absl::StatusOr<std::string> BodySender(std::optional<absl::string_view> authorization,
                                         const std::string& address, int port) const;

  core::AuditServiceCore* core_;
  const auth::Authenticator auth_;
  const GatewayOptions options_;
  CrossSitePolicy cross_site_;
  const ApiHandlers api_;
  std::unique_ptr<Transport> transport_;
  std::string host_;
  std::atomic<bool> shutting_down_{false};
  // The HTTP event streams, each user a share (common/stream_shares.h).
  StreamShares event_streams_;
};

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_GATEWAY_H_
