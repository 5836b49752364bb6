// The HTTP server under the gateway (cpp-httplib, Debian's
// libcpp-httplib-dev, built with OpenSSL): plain HTTP behind the reception
// (reception.h: whole requests only, deadlines, connection caps, a lane for
// the probes), TLS on httplib's own loop with a bounded thread pool;
// binding, limits, the security headers of every response, the JSON error
// body of httplib's own refusals, and the request metrics
// (fca_http_requests_total, fca_http_request_duration_seconds by handler and
// status; fca_http_event_streams). What is served is gateway.cc's.
#ifndef FCA_SERVER_HTTP_TRANSPORT_H_
#define FCA_SERVER_HTTP_TRANSPORT_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/byte_budget.h"
#include "common/host_port.h"
#include "server/http/api_handlers.h"
#include "server/http/reception.h"

namespace fca::http {

// GatewayOptions' (gateway.h), where the defaults are.
struct TransportOptions {
  HostPort address;
  int threads = 0;  // requests served at once
  int64_t max_body_bytes = 0;
  std::chrono::milliseconds request_timeout{0};  // head and body, in all
  int max_connections = 0, max_connections_per_address = 0;
  ByteBudget* bodies = nullptr;             // request bodies in flight (may be null)
  BodyGate body_gate;                       // who sends a body (reception.h)
  std::string tls_cert_file, tls_key_file;  // both set: HTTPS
};

// A bound server, listening on a thread of its own from Start() to Stop().
class Transport {
 public:
  // The server with every route-independent setting, bound to the address
  // (port 0: a free one). INVALID_ARGUMENT for one TLS file without the
  // other, FAILED_PRECONDITION when they cannot be used, UNAVAILABLE when
  // the address cannot be bound (`listen` names it in the message).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Transport>> Bind(
      const TransportOptions& options, const std::string& listen);
  ~Transport();  // Stop()
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // For the routes, before Start().
  httplib::Server& server() { return *server_; }
  int port() const { return port_; }
  bool tls() const { return tls_; }

  // Serves on threads of its own; returns once the server runs. INTERNAL
  // when the system refuses a pipe or thread's resources.
  [[nodiscard]] absl::Status Start();
  // Stops accepting and waits for the requests in flight. Idempotent.
  void Stop();

 private:
  Transport() = default;

  std::unique_ptr<httplib::Server> server_;
  // Plain HTTP: the reception, the socket it listens on until started, and
  // the pipe that keeps httplib's own loop dormant (FrontedServer).
  std::unique_ptr<Reception> reception_;
  ReceptionLimits reception_limits_;
  ByteBudget* bodies_ = nullptr;
  BodyGate body_gate_;
  int listen_fd_ = -1;
  int dormant_pipe_[2] = {-1, -1};
  std::thread listener_;  // httplib's loop (TLS: accepting; plain: dormant)
  int port_ = 0;
  bool tls_ = false;
  std::atomic<bool> stopped_{false};
};

// The handler label of the request served on this thread, in the metrics
// (an RPC name, "events", "metrics", ...; "unmatched" until set).
void SetHandler(std::string name);

// Writes `reply` (Cache-Control: no-store).
void Send(httplib::Response& res, const ApiReply& reply);

// The request's header, nullopt when absent.
std::optional<std::string> Header(const httplib::Request& req, const char* name);
// "http <address>:<port>", for log lines.
std::string Peer(const httplib::Request& req);
std::string Peer(absl::string_view address, int port);

// The request's body up to `max_bytes`: RESOURCE_EXHAUSTED (413) beyond it,
// INVALID_ARGUMENT when it cannot be read. A request with neither
// Content-Length nor Transfer-Encoding has no body (RFC 9112 6.3).
[[nodiscard]] absl::StatusOr<std::string> ReadBody(const httplib::Request& req,
                                                   const httplib::Response& res,
                                                   const httplib::ContentReader& read,
                                                   int64_t max_bytes);

// fca_http_event_streams: `delta` streams opened (+1) or closed (-1).
void CountEventStreams(int64_t delta);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_TRANSPORT_H_
