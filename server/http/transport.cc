#include "server/http/transport.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "server/http/json_io.h"

namespace fca::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kKeepAliveMaxCount = 100;   // requests per connection
constexpr int kKeepAliveSeconds = 5;      // idle between requests
constexpr int kWriteTimeoutSeconds = 10;  // per blocked write

// ------------------------------------------------------------ metrics

metrics::Family<metrics::Counter>& HttpRequests() {
  static auto& f = metrics::Registry::Default().AddCounter(
      "fca_http_requests_total",
      "HTTP requests served, by handler (the RPC name, events, metrics, healthz, readyz, ui, "
      "unmatched) and HTTP status code.",
      {"handler", "code"});
  return f;
}
metrics::Family<metrics::Histogram>& HttpLatency() {
  static auto& f = metrics::Registry::Default().AddHistogram(
      "fca_http_request_duration_seconds",
      "Latency of HTTP requests (event streams: their whole life), by handler and HTTP status "
      "code.",
      {"handler", "code"}, metrics::LatencyBuckets());
  return f;
}
metrics::Gauge& EventStreams() {
  static auto& g = metrics::Registry::Default()
                       .AddGauge("fca_http_event_streams", "Job event streams open now.")
                       .WithLabels();
  return g;
}

// What the logger needs of the request being served on this thread: set
// by the pre-routing handler and the route, read by the logger, which runs
// on the same thread once the response (a whole event stream) is written.
struct RequestContext {
  bool started = false;
  Clock::time_point start;
  std::string handler;
};
thread_local RequestContext t_request;

// --------------------------------------------------------- thread pool

// httplib's pool with a bounded queue: when every thread is busy and the
// queue is full, the accepting thread waits (new connections then wait in
// the kernel's backlog) instead of queueing without limit.
class BoundedThreadPool final : public httplib::TaskQueue {
 public:
  BoundedThreadPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~BoundedThreadPool() override = default;

  void enqueue(std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BoundedThreadPool::HasSpace));
    jobs_.push_back(std::move(fn));
  }

  void shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 private:
  // Conditions of the waits on mu_, which absl::Mutex re-checks whenever
  // mu_ is released: enqueue, Work and shutdown need no notify.
  bool HasSpace() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return jobs_.size() < max_queued_ || shutdown_;
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || shutdown_; }

  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &BoundedThreadPool::HasWork));
        if (jobs_.empty()) return;  // shut down
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_queued_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

// ------------------------------------------------------------ responses

// The dashboard loads only its own files and may not be framed; no
// response is sniffed for another type. (Every response: cheap, and a
// JSON or error page is no more frameable than the dashboard.)
void SetSecurityHeaders(httplib::Response& res) {
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                 "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
}

// httplib's own refusals (a malformed request, 404 of an unknown path,
// 413) as API errors.
absl::Status RefusalOf(int http_status) {
  if (http_status == 404) {
    return absl::NotFoundError("no such endpoint (the API is POST /api/v1/<RpcName>)");
  }
  if (http_status == 413) return absl::ResourceExhaustedError("the request body is too large");
  if (http_status == 414) return absl::InvalidArgumentError("the request line is too long");
  if (http_status >= 500) return absl::InternalError("internal error");
  return absl::InvalidArgumentError("malformed request");
}

// ----------------------------------------------------------- the server

// Metrics, security headers, and JSON bodies for errors of every kind.
void InstallHooks(httplib::Server& s) {
  s.set_pre_routing_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        t_request.started = true;
        t_request.start = Clock::now();
        t_request.handler = "unmatched";
        SetSecurityHeaders(res);
        return httplib::Server::HandlerResponse::Unhandled;
      }));
  s.set_logger([](const httplib::Request&, const httplib::Response& res) {
    // Requests refused before routing (a malformed request line) have no
    // start time: they count with a latency of 0.
    const double seconds =
        t_request.started ? std::chrono::duration<double>(Clock::now() - t_request.start).count()
                          : 0.0;
    const std::string handler = t_request.started ? t_request.handler : "unmatched";
    const std::string code = std::to_string(res.status);
    HttpRequests().WithLabels({handler, code}).Increment();
    HttpLatency().WithLabels({handler, code}).Observe(seconds);
    t_request.started = false;
  });
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty() || res.get_header_value("Content-Type") == "text/event-stream") {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        res.set_header("Cache-Control", "no-store");
        res.set_content(ErrorJson(RefusalOf(res.status)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& error) {
        std::string what = "unknown exception";
        try {
          if (error) std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LOG(ERROR) << "http: request failed: " << what;
        Send(res, ErrorReply(absl::InternalError("internal error")));
      });
}

// A plain (fronted by the reception) or TLS server.
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeServer(const TransportOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("the HTTP gateway's TLS needs both a certificate and a key");
  }
  if (o.tls_cert_file.empty()) return std::make_unique<FrontedServer>();
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  auto tls = std::make_unique<httplib::SSLServer>(o.tls_cert_file.c_str(), o.tls_key_file.c_str());
  if (!tls->is_valid()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the HTTP gateway cannot use the TLS certificate %s with the key %s",
                        o.tls_cert_file, o.tls_key_file));
  }
  return tls;
#else
  return absl::FailedPreconditionError(
      "this build's HTTP library has no TLS: turn the HTTP gateway off (--http_listen=) or "
      "serve it on loopback behind a TLS proxy");
#endif
}

void SetLimits(httplib::Server& s, const TransportOptions& o) {
  const int threads = o.threads;
  s.new_task_queue = [threads] {
    return new BoundedThreadPool(static_cast<size_t>(threads), static_cast<size_t>(threads) * 4);
  };
  // SO_REUSEADDR only. httplib's default adds SO_REUSEPORT, which lets a
  // second process of the same user bind the same address and take half of
  // the connections: a second server must fail to bind instead.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  s.set_keep_alive_max_count(kKeepAliveMaxCount);
  s.set_keep_alive_timeout(kKeepAliveSeconds);
  s.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(o.request_timeout).count(),
                     0);
  s.set_write_timeout(kWriteTimeoutSeconds, 0);
}

// A listening socket (non-blocking, SO_REUSEADDR only) on the address, or
// -1; *port: the port bound.
int Listen(const HostPort& address, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(address.port);
  if (getaddrinfo(address.host.c_str(), service.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (fd >= 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    *port =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  }
  return fd;
}

// The port bound, or -1.
int BindPort(httplib::Server& s, const HostPort& address) {
  if (address.port == 0) {
    const int port = s.bind_to_any_port(address.host);
    return port > 0 ? port : -1;
  }
  return s.bind_to_port(address.host.c_str(), address.port) ? address.port : -1;
}

// stop() only stops a server that is running: wait until it is.
void AwaitRunning(const httplib::Server& s, const std::thread& listener) {
  for (int i = 0; i < 5000 && listener.joinable() && !s.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> Transport::Bind(const TransportOptions& options,
                                                           const std::string& listen) {
  absl::StatusOr<std::unique_ptr<httplib::Server>> server = MakeServer(options);
  if (!server.ok()) return server.status();
  std::unique_ptr<Transport> t(new Transport());
  t->server_ = std::move(*server);
  t->tls_ = !options.tls_cert_file.empty();
  // Families exist (empty) before the first request.
  HttpRequests();
  HttpLatency();
  EventStreams();
  InstallHooks(*t->server_);
  SetLimits(*t->server_, options);
  if (t->tls_) {
    t->port_ = BindPort(*t->server_, options.address);
  } else {
    t->listen_fd_ = Listen(options.address, &t->port_);
    if (t->listen_fd_ < 0) t->port_ = -1;
    ReceptionLimits& r = t->reception_limits_;
    r.api_threads = options.threads;
    r.request_timeout = options.request_timeout;
    r.keep_alive_idle = std::chrono::seconds(kKeepAliveSeconds);
    r.write_timeout = std::chrono::seconds(kWriteTimeoutSeconds);
    r.max_connections = options.max_connections;
    r.max_connections_per_address = options.max_connections_per_address;
    r.max_requests_per_connection = kKeepAliveMaxCount;
    r.max_body_bytes = options.max_body_bytes;
    t->bodies_ = options.bodies;
    t->body_gate_ = options.body_gate;
  }
  if (t->port_ < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for HTTP on %s (in use, or not an address of this host)", listen));
  }
  return t;
}

Transport::~Transport() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);  // never started
}

absl::Status Transport::Start() {
  if (tls_) {
    httplib::Server* server = server_.get();
    listener_ = std::thread([server] { server->listen_after_bind(); });
    AwaitRunning(*server_, listener_);
    return absl::OkStatus();
  }
  if (::pipe2(dormant_pipe_, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  auto* fronted = static_cast<FrontedServer*>(server_.get());
  listener_ = std::thread([fronted, fd = dormant_pipe_[0]] { fronted->RunDormant(fd); });
  AwaitRunning(*server_, listener_);
  absl::StatusOr<std::unique_ptr<Reception>> reception = Reception::Start(
      fronted, std::exchange(listen_fd_, -1), reception_limits_, bodies_, body_gate_);
  if (!reception.ok()) return reception.status();
  reception_ = *std::move(reception);
  return absl::OkStatus();
}

void Transport::Stop() {
  if (stopped_.exchange(true)) return;
  if (reception_ != nullptr) reception_->Stop();
  // Until the listener runs, stop() would do nothing.
  if (listener_.joinable()) AwaitRunning(*server_, listener_);
  server_->stop();  // closes the dormant pipe's read end
  if (listener_.joinable()) listener_.join();
  if (dormant_pipe_[1] >= 0) ::close(dormant_pipe_[1]);
}

void SetHandler(std::string name) { t_request.handler = std::move(name); }

void Send(httplib::Response& res, const ApiReply& reply) {
  res.status = reply.status;
  for (const auto& [name, value] : reply.headers) res.set_header(name, value);
  res.set_header("Cache-Control", "no-store");
  res.set_content(reply.json, "application/json");
}

std::optional<std::string> Header(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

std::string Peer(const httplib::Request& req) { return Peer(req.remote_addr, req.remote_port); }

std::string Peer(absl::string_view address, int port) {
  return absl::StrCat("http ", address, ":", port);
}

absl::StatusOr<std::string> ReadBody(const httplib::Request& req, const httplib::Response& res,
                                     const httplib::ContentReader& read, int64_t max_bytes) {
  std::string body;
  if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) return body;
  bool too_large = false;
  const bool read_ok = read([&](const char* data, size_t n) {
    if (body.size() + n > static_cast<size_t>(max_bytes)) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large || res.status == 413) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the request body exceeds the limit of %d bytes", max_bytes));
  }
  if (!read_ok) return absl::InvalidArgumentError("cannot read the request body");
  return body;
}

void CountEventStreams(int64_t delta) { EventStreams().Add(static_cast<double>(delta)); }

}  // namespace fca::http
