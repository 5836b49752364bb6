// Long file: the poll loop, its lanes and its refusals share each connection's state.
#include "server/http/reception.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <glog/logging.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "server/http/json_io.h"
#include "server/http/request_head.h"

namespace fca::http {

// ------------------------------------------------------- FrontedServer

namespace {

// httplib's loop is never used to accept (RunDormant): its queue is empty.
class NoTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

bool FrontedServer::Serve(httplib::Stream& stream, bool close_connection, bool& closed) {
  return process_request(stream, close_connection, closed, nullptr);
}

bool FrontedServer::RunDormant(int dormant_fd) {
  new_task_queue = [] { return new NoTaskQueue(); };
  svr_sock_ = dormant_fd;
  // Wake every 100 ms to see whether stop() was called.
  set_idle_interval(0, 100000);
  return listen_after_bind();
}

namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------ metrics

metrics::Gauge& OpenConnections() {
  static auto& g = metrics::Registry::Default()
                       .AddGauge("fca_http_connections",
                                 "HTTP connections open now (sending a request, being served, "
                                 "or idle between requests).")
                       .WithLabels();
  return g;
}
metrics::Family<metrics::Counter>& Refusals() {
  static auto& f = metrics::Registry::Default().AddCounter(
      "fca_http_refused_total",
      "HTTP connections and requests refused before being served, by reason: per_address and "
      "total (connection caps), evicted (dropped for a new connection at the total cap), "
      "per_address_evicted (a connection still sending its head, dropped for a new one from its "
      "address at the address's cap), "
      "timeout (the request did not arrive in time), too_large (Content-Length over the limit), "
      "uploads_budget (request bodies in flight at the server's limit or at their client's "
      "share), unauthenticated (a request body without a valid key), malformed, "
      "head_too_large, length_required.",
      {"reason"});
  return f;
}

// --------------------------------------------------------- connection

struct Connection {
  int fd = -1;
  std::string address, local_address;
  int port = 0, local_port = 0;
  Clock::time_point since;     // accepted (eviction order)
  Clock::time_point deadline;  // the request must be whole by then
  bool idle = false;           // keep-alive: no byte of the next request yet
  std::string buffer;          // the request at the front, maybe more
  // The request at the front, once its head is whole.
  size_t head_bytes = 0;  // 0: not whole yet
  size_t request_bytes = 0;
  bool probe = false;
  // Let in over its address's cap: served only if it is a probe.
  bool probes_only = false;
  ByteBudget::Lease body;
  // A head announcing a body, while its key is checked and the body's bytes
  // reserved on the admission lane, and what that decided.
  std::optional<Head> admitting;
  absl::Status admission;
  int served = 0;
  bool close_after = false;
  // Refused while the client may still be sending its body: the answer is
  // sent and what comes is read and dropped until the client closes (or
  // kLinger passes), so that it reads the answer instead of a reset.
  bool lingering = false;
};

constexpr std::chrono::milliseconds kLinger{2000};

// Connections an address may open beyond its cap when all of its others
// are past their heads (event streams, uploads): each is served only if it
// is GET /healthz, /readyz or /metrics, so probes from a busy address still
// get an answer.
constexpr int kProbesOverCap = 4;

// The request at the front of a connection as httplib reads it (up to its
// end), and its response written to the socket.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(Connection& c, std::chrono::milliseconds write_timeout)
      : c_(c), write_timeout_ms_(static_cast<int>(write_timeout.count())) {}

  bool is_readable() const override { return pos_ < c_.request_bytes; }
  bool is_writable() const override { return AwaitWritable(); }

  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, c_.request_bytes - pos_);
    std::memcpy(ptr, c_.buffer.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // The response starts once the handler is done with the body: its
    // bytes go back to the uploads budget before the client can send more.
    c_.body.Release();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      const bool retry = n < 0 && (errno == EINTR ||
                                   ((errno == EAGAIN || errno == EWOULDBLOCK) && AwaitWritable()));
      if (!retry) return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.address;
    port = c_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local_address;
    port = c_.local_port;
  }
  // httplib (built without CPPHTTPLIB_USE_POLL) answers 500 to a stream
  // whose socket is FD_SETSIZE or above, since it would select() on it;
  // this stream never selects, so it shows no socket beyond that.
  socket_t socket() const override { return c_.fd < FD_SETSIZE ? c_.fd : INVALID_SOCKET; }

 private:
  bool AwaitWritable() const {
    pollfd p{c_.fd, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, write_timeout_ms_);
    } while (n < 0 && errno == EINTR);
    return n > 0 && (p.revents & POLLOUT) != 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }

  Connection& c_;
  const int write_timeout_ms_;
  size_t pos_ = 0;
};

// ----------------------------------------------------------- refusals

// Best effort, never blocking: the connection is closed next either way.
void SendNow(int fd, absl::string_view bytes) {
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// --------------------------------------------------------------- lanes

// Threads serving whole requests, in arrival order. The queue needs no
// bound: it holds connections, which the reception caps.
class Lane {
 public:
  using Serve = std::function<void(std::unique_ptr<Connection>)>;
  Lane(int threads, Serve serve) : serve_(std::move(serve)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Lane() { Shutdown(); }

  void Push(std::unique_ptr<Connection> c) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(c));
  }
  // Serves what is queued, then joins.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || shutdown_; }
  void Work() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Lane::HasWork));
        if (queue_.empty()) return;
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      serve_(std::move(c));
    }
  }

  const Serve serve_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Connection>> queue_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

std::string AddressOf(const sockaddr_storage& ss, int* port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    *port = ntohs(a->sin6_port);
  }
  return text;
}

int MillisUntil(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(t - now).count());
}

}  // namespace

// ------------------------------------------------------------ the loop

class Reception::Impl {
 public:
  Impl(FrontedServer* server, int listen_fd, ReceptionLimits limits, ByteBudget* bodies,
       BodyGate gate)
      : server_(server),
        listen_fd_(listen_fd),
        limits_(limits),
        bodies_(bodies),
        gate_(std::move(gate)) {}

  absl::Status Start() {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
    OpenConnections();  // the families exist before the first connection
    Refusals();
    api_ = std::make_unique<Lane>(limits_.api_threads,
                                  [this](std::unique_ptr<Connection> c) { Serve(std::move(c)); });
    probes_ = std::make_unique<Lane>(
        limits_.probe_threads, [this](std::unique_ptr<Connection> c) { Serve(std::move(c)); });
    admissions_ = std::make_unique<Lane>(
        kAdmissionThreads, [this](std::unique_ptr<Connection> c) { AdmitBody(std::move(c)); });
    loop_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    Wake();
    if (loop_.joinable()) loop_.join();
    // The requests read whole are served (closing their connections).
    if (api_ != nullptr) api_->Shutdown();
    if (probes_ != nullptr) probes_->Shutdown();
    if (admissions_ != nullptr) admissions_->Shutdown();
    std::vector<std::unique_ptr<Connection>> returned = TakeReturned();
    for (const auto& c : returned) Close(*c);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

 private:
  // --------------------------------------------------- serving threads

  void Serve(std::unique_ptr<Connection> c) {
    BufferedStream stream(*c, limits_.write_timeout);
    bool client_closes = false;
    const bool close = stopping_ || c->served + 1 >= limits_.max_requests_per_connection;
    const bool written = server_->Serve(stream, close, client_closes);
    ++c->served;
    c->buffer.erase(0, c->request_bytes);
    c->head_bytes = c->request_bytes = 0;
    c->probe = false;
    c->body.Release();
    c->close_after = !written || client_closes || close;
    Return(std::move(c));
  }

  // The admission lane: checks the key of a head that announces a body and
  // reserves the body's bytes for its address and user, or records why not.
  // Off the loop thread, since a key lookup may wait on the store.
  void AdmitBody(std::unique_ptr<Connection> c) {
    const Head& head = *c->admitting;
    absl::StatusOr<std::string> user =
        gate_ ? gate_(head.authorization, c->address, c->port) : std::string();
    if (!user.ok()) {
      c->admission = user.status();
    } else {
      absl::StatusOr<ByteBudget::Lease> lease =
          bodies_->TryReserve(head.content_length, ByteBudget::Clients(c->address, *user));
      if (lease.ok()) {
        c->body = *std::move(lease);
      } else {
        c->admission = lease.status();
      }
    }
    Return(std::move(c));
  }

  void Return(std::unique_ptr<Connection> c) {
    {
      absl::MutexLock lock(&returned_mu_);
      returned_.push_back(std::move(c));
    }
    Wake();
  }

  std::vector<std::unique_ptr<Connection>> TakeReturned() {
    absl::MutexLock lock(&returned_mu_);
    return std::exchange(returned_, {});
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // ------------------------------------------------------- loop thread

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<int> reading;
    while (!stopping_) {
      for (std::unique_ptr<Connection>& c : TakeReturned()) Resume(std::move(c));
      fds.clear();
      reading.clear();
      const Clock::time_point now = Clock::now();
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, static_cast<short>(now < accept_paused_until_ ? 0 : POLLIN), 0});
      int timeout_ms = 1000;
      for (const auto& [fd, c] : reading_) {
        fds.push_back({fd, POLLIN, 0});
        reading.push_back(fd);
        timeout_ms = std::min(timeout_ms, MillisUntil(c->deadline, now));
      }
      if (now < accept_paused_until_) {
        timeout_ms = std::min(timeout_ms, MillisUntil(accept_paused_until_, now));
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        PLOG(ERROR) << "http: poll failed";
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (fds[0].revents != 0) {
        uint64_t n;
        (void)!::read(wake_fd_, &n, sizeof(n));
      }
      for (size_t i = 0; i < reading.size(); ++i) {
        if (fds[i + 2].revents != 0) Receive(reading[i]);
      }
      if (fds[1].revents != 0) AcceptAll();
      Expire();
    }
    for (auto& [fd, c] : reading_) Close(*c);
    reading_.clear();
    ::close(listen_fd_);
  }

  // A connection back from a serving thread: closed, or waiting for its
  // next request (maybe buffered already).
  void Resume(std::unique_ptr<Connection> c) {
    if (c->admitting.has_value()) {
      Admitted(std::move(c));
      return;
    }
    if (c->close_after) {
      Close(*c);
      return;
    }
    const Clock::time_point now = Clock::now();
    c->idle = c->buffer.empty();
    c->deadline = now + (c->idle ? limits_.keep_alive_idle : limits_.request_timeout);
    const int fd = c->fd;
    reading_[fd] = std::move(c);
    Examine(fd);
  }

  void AcceptAll() {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof(peer);
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of descriptors or memory: try again shortly, not in a spin.
          PLOG_EVERY_N(WARNING, 100) << "http: accept failed";
          accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      Admit(fd, peer);
    }
  }

  void Admit(int fd, const sockaddr_storage& peer) {
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->address = AddressOf(peer, &c->port);
    // At the address's cap its oldest connection still sending a head makes
    // room (slow clients must not starve a quick one behind the same NAT);
    // when every one is past its head, a few more are let in for probes only.
    const int open = per_address_[c->address];
    if (open >= limits_.max_connections_per_address && !EvictOldestReading(&c->address)) {
      if (open >= limits_.max_connections_per_address + kProbesOverCap) {
        Refusals().WithLabels({"per_address"}).Increment();
        SendNow(fd, RefusalResponse(429, PerAddressRefusal(c->address)));
        ::close(fd);
        return;
      }
      c->probes_only = true;
    }
    if (total_ >= limits_.max_connections && !EvictOldestReading()) {
      Refusals().WithLabels({"total"}).Increment();
      SendNow(fd, RefusalResponse(503, absl::UnavailableError(absl::StrFormat(
                                           "the server has %d connections open, its limit; "
                                           "retry shortly",
                                           limits_.max_connections))));
      ::close(fd);
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      c->local_address = AddressOf(local, &c->local_port);
    }
    c->since = Clock::now();
    c->deadline = c->since + limits_.request_timeout;
    ++per_address_[c->address];
    ++total_;
    OpenConnections().Add(1);
    reading_[fd] = std::move(c);
  }

  // At the total cap (address null): drops the connection that has been
  // sending its request (or idling) longest. At an address's cap: its
  // oldest one whose head is not whole yet (one sending a body it was
  // admitted for is left alone). False when there is none.
  bool EvictOldestReading(const std::string* address = nullptr) {
    auto oldest = reading_.end();
    for (auto it = reading_.begin(); it != reading_.end(); ++it) {
      const Connection& c = *it->second;
      if (address != nullptr && (c.address != *address || c.head_bytes != 0)) continue;
      if (oldest == reading_.end() || c.since < oldest->second->since) oldest = it;
    }
    if (oldest == reading_.end()) return false;
    if (address != nullptr) {
      Refusals().WithLabels({"per_address_evicted"}).Increment();
      Drop(oldest->first, 429, PerAddressRefusal(*address));
      return true;
    }
    Refusals().WithLabels({"evicted"}).Increment();
    Drop(oldest->first, 503,
         absl::UnavailableError("the server is at its connection limit and dropped this "
                                "connection, the slowest; retry"));
    return true;
  }

  absl::Status PerAddressRefusal(const std::string& address) const {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d connections from %s are open, the limit per address; retry when one "
                        "has closed",
                        limits_.max_connections_per_address, address));
  }

  void Receive(int fd) {
    Connection& c = *reading_.at(fd);
    if (c.lingering) {
      const ssize_t n = ::recv(fd, chunk_.data(), chunk_.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        Drop(fd);
      }
      return;
    }
    const size_t limit = c.head_bytes == 0 ? limits_.max_head_bytes + 1 : c.request_bytes;
    const size_t want = std::min(chunk_.size(), limit - std::min(limit, c.buffer.size()));
    const ssize_t n = ::recv(fd, chunk_.data(), std::max<size_t>(want, 1), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      Drop(fd);
      return;
    }
    if (c.idle) {
      c.idle = false;
      c.deadline = Clock::now() + limits_.request_timeout;
    }
    c.buffer.append(chunk_.data(), static_cast<size_t>(n));
    Examine(fd);
  }

  // Reads the head once it is whole; hands the request on once its body is.
  void Examine(int fd) {
    Connection& c = *reading_.at(fd);
    if (c.lingering) return;
    if (c.head_bytes == 0) {
      const size_t end = c.buffer.find("\r\n\r\n");
      if (end == std::string::npos || end + 4 > limits_.max_head_bytes) {
        if (c.buffer.size() > limits_.max_head_bytes) {
          Refusals().WithLabels({"head_too_large"}).Increment();
          Linger(fd, 431,
                 absl::InvalidArgumentError(absl::StrFormat(
                     "the request line and headers exceed %d bytes", limits_.max_head_bytes)));
        }
        return;
      }
      std::variant<Head, Refusal> parsed =
          ParseHead(absl::string_view(c.buffer).substr(0, end + 4));
      if (const Refusal* r = std::get_if<Refusal>(&parsed)) {
        Refusals().WithLabels({r->reason}).Increment();
        Linger(fd, r->http_status, r->status);
        return;
      }
      Head& head = std::get<Head>(parsed);
      if (c.probes_only && !head.probe) {
        Refusals().WithLabels({"per_address"}).Increment();
        Linger(fd, 429, PerAddressRefusal(c.address));
        return;
      }
      if (head.content_length > limits_.max_body_bytes) {
        Refusals().WithLabels({"too_large"}).Increment();
        Linger(fd, 413,
               absl::ResourceExhaustedError(absl::StrFormat(
                   "the request body (Content-Length %d) exceeds the limit of %d bytes",
                   head.content_length, limits_.max_body_bytes)));
        return;
      }
      if (head.content_length > 0 && bodies_ != nullptr) {
        // No byte of the body is reserved (nor read) before its key is
        // known: keyless clients must not hold the uploads budget.
        c.admitting = std::move(head);
        std::unique_ptr<Connection> owned = std::move(reading_.at(fd));
        reading_.erase(fd);
        admissions_->Push(std::move(owned));
        return;
      }
      TakeHead(c, head);
    }
    if (c.buffer.size() < c.request_bytes) return;
    std::unique_ptr<Connection> whole = std::move(reading_.at(fd));
    reading_.erase(fd);
    (whole->probe ? probes_ : api_)->Push(std::move(whole));
  }

  // The request's head, read and accepted: what is left to read is its body.
  void TakeHead(Connection& c, const Head& head) {
    c.buffer.replace(0, head.length, head.rewritten);
    c.head_bytes = head.rewritten.size();
    c.request_bytes = c.head_bytes + static_cast<size_t>(head.content_length);
    c.probe = head.probe;
    if (head.expect_continue && c.buffer.size() < c.request_bytes) {
      SendNow(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
    }
  }

  // A connection back from the admission lane: refused (lingering), or its
  // body's bytes are reserved and it reads on, within its first deadline.
  void Admitted(std::unique_ptr<Connection> c) {
    const int fd = c->fd;
    const Head head = *std::exchange(c->admitting, std::nullopt);
    const absl::Status admission = std::exchange(c->admission, absl::OkStatus());
    reading_[fd] = std::move(c);
    if (!admission.ok()) {
      const bool budget = absl::IsResourceExhausted(admission);
      Refusals().WithLabels({budget ? "uploads_budget" : "unauthenticated"}).Increment();
      Linger(fd, HttpStatus(admission.code()), admission);
      return;
    }
    TakeHead(*reading_.at(fd), head);
    Examine(fd);
  }

  void Expire() {
    const Clock::time_point now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : reading_) {
      if (c->deadline <= now) late.push_back(fd);
    }
    for (int fd : late) {
      if (reading_.at(fd)->idle || reading_.at(fd)->lingering) {
        Drop(fd);  // idle between requests, or refused already: closed quietly
        continue;
      }
      Refusals().WithLabels({"timeout"}).Increment();
      Drop(fd, 408,
           absl::DeadlineExceededError(absl::StrFormat(
               "the request did not arrive whole within %d ms", limits_.request_timeout.count())));
    }
  }

  // Closes a connection of reading_, after a refusal when http_status > 0.
  void Drop(int fd, int http_status = 0, const absl::Status& status = absl::OkStatus()) {
    auto it = reading_.find(fd);
    if (http_status > 0) SendNow(fd, RefusalResponse(http_status, status));
    Close(*it->second);
    reading_.erase(it);
  }

  // Refuses a request whose body may be on its way: answers, then lingers.
  void Linger(int fd, int http_status, const absl::Status& status) {
    Connection& c = *reading_.at(fd);
    SendNow(fd, RefusalResponse(http_status, status));
    ::shutdown(fd, SHUT_WR);
    c.lingering = true;
    c.idle = false;
    c.buffer.clear();
    c.deadline = Clock::now() + kLinger;
  }

  void Close(Connection& c) {
    ::close(c.fd);
    if (--per_address_[c.address] <= 0) per_address_.erase(c.address);
    --total_;
    OpenConnections().Add(-1);
  }

  FrontedServer* const server_;
  const int listen_fd_;
  const ReceptionLimits limits_;
  ByteBudget* const bodies_;
  const BodyGate gate_;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
  // Threads that check keys and reserve bodies (AdmitBody): few, since a
  // request waits there only on the key store.
  static constexpr int kAdmissionThreads = 2;
  std::unique_ptr<Lane> api_, probes_, admissions_;

  absl::Mutex returned_mu_;
  std::vector<std::unique_ptr<Connection>> returned_ ABSL_GUARDED_BY(returned_mu_);

  // The loop thread's alone.
  std::unordered_map<int, std::unique_ptr<Connection>> reading_;
  std::map<std::string, int> per_address_;
  int total_ = 0;
  Clock::time_point accept_paused_until_;
  std::vector<char> chunk_ = std::vector<char>(64 << 10);
};

absl::StatusOr<std::unique_ptr<Reception>> Reception::Start(FrontedServer* server, int listen_fd,
                                                            ReceptionLimits limits,
                                                            ByteBudget* bodies, BodyGate gate) {
  auto impl = std::make_unique<Impl>(server, listen_fd, limits, bodies, std::move(gate));
  if (absl::Status started = impl->Start(); !started.ok()) {
    ::close(listen_fd);
    return started;
  }
  return std::unique_ptr<Reception>(new Reception(std::move(impl)));
}

Reception::Reception(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reception::~Reception() { Stop(); }
void Reception::Stop() { impl_->Stop(); }

}  // namespace fca::http
