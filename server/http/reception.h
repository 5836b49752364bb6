// The plain-HTTP gateway's front end: it accepts connections and reads each
// request whole (head and body) on one thread with poll(), and hands only
// complete requests to the threads that serve them. A client that sends
// its request a byte at a time therefore holds a socket and a few KB,
// never a serving thread.
//
// Why not httplib's own loop: cpp-httplib 0.11 reads a request on a pool
// thread with a timeout per recv(), which every byte restarts; 200 clients
// sending a byte every 4 s held all 32 threads and filled the accept queue,
// so /healthz and every API call went unanswered (issue 22). Here:
//   - a request's head and body must arrive within `request_timeout` of its
//     first byte being awaited, however they trickle (408, then closed); an
//     idle keep-alive connection is closed after `keep_alive_idle`;
//   - at most `max_connections_per_address` connections per client address
//     and `max_connections` in all: at either cap the oldest connection
//     still sending its request (its head, at the address's cap) is dropped
//     for the new one (a stalled client is the likeliest to be one), so slow
//     clients cannot starve a quick one behind the same address; when there
//     is none, 503 at the total cap, and at the address's cap a few more
//     connections are let in for GET /healthz, /readyz and /metrics only
//     (429 for anything else);
//   - a Content-Length beyond the body limit is refused at once (413), and
//     a body's bytes are reserved from the uploads budget before they are
//     read (429 when it is spent, or when the client's address or user holds
//     its share); the request's key is checked first (BodyGate: 401 for
//     none or a bad one), so a client without a key reserves nothing;
//   - GET /healthz, /readyz and /metrics are served by a lane of their own,
//     so they answer while every API thread is busy (event streams, slow
//     calls);
//   - request bodies must come with Content-Length (411 for chunked ones).
//
// The complete request is served by httplib's own parser, routes, hooks
// and response writer (FrontedServer::Serve over a Stream that reads the
// buffered bytes and writes to the socket), so routing and the gateway's
// handlers are the same as with TLS, which keeps httplib's loop
// (transport.h).
#ifndef FCA_SERVER_HTTP_RECEPTION_H_
#define FCA_SERVER_HTTP_RECEPTION_H_

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/byte_budget.h"

namespace fca::http {

struct ReceptionLimits {
  int api_threads = 0;    // serving API calls, the dashboard and event streams
  int probe_threads = 2;  // serving GET /healthz, /readyz, /metrics
  std::chrono::milliseconds request_timeout{0};
  std::chrono::milliseconds keep_alive_idle{0};
  std::chrono::milliseconds write_timeout{0};  // per blocked write
  int max_connections = 0;
  int max_connections_per_address = 0;
  int max_requests_per_connection = 100;
  int64_t max_body_bytes = 0;
  size_t max_head_bytes = 16 << 10;  // request line and headers (431 beyond)
};

// httplib's server, serving requests that the reception has read whole.
class FrontedServer : public httplib::Server {
 public:
  // One complete request from `stream`; false when its response could not
  // be written. `closed`: the client asked to close the connection.
  bool Serve(httplib::Stream& stream, bool close_connection, bool& closed);
  // Makes is_running() true until stop() without accepting anything:
  // httplib ends a streamed response (an event stream) once its server
  // is not running. Blocks; `dormant_fd` is a descriptor that never
  // becomes readable (the read end of a pipe nobody writes).
  bool RunDormant(int dormant_fd);
};

// Who sends a request body, asked before any of its bytes is reserved, on
// a thread of the reception's own (it may wait on the key store): the user
// the body's bytes count against, from the request's Authorization header
// (nullopt: none) and the client's address and port; or the refusal
// (UNAUTHENTICATED: 401, PERMISSION_DENIED: 403, other: 503).
using BodyGate = std::function<absl::StatusOr<std::string>(
    std::optional<absl::string_view> authorization, const std::string& address, int port)>;

class Reception {
 public:
  // Serves `listen_fd` (bound and listening; taken) with `server`'s routes.
  // `bodies` (may be null) is the budget request bodies are reserved from,
  // for their address and the user `gate` names (unset: the address only).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Reception>> Start(FrontedServer* server,
                                                                        int listen_fd,
                                                                        ReceptionLimits limits,
                                                                        ByteBudget* bodies,
                                                                        BodyGate gate);
  ~Reception();  // Stop()
  Reception(const Reception&) = delete;
  Reception& operator=(const Reception&) = delete;

  // Stops accepting, closes the connections still sending requests, waits
  // for the requests being served, closes everything. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit Reception(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_RECEPTION_H_
