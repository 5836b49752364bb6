#include "bench/soak_gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/e2e/loopback.h"

namespace fca::soak {
namespace {

using Clock = std::chrono::steady_clock;

// One request on a fresh connection from 127.0.0.1; the status code of the
// answer, 0 when none came within `wait_ms`.
int Exchange(int port, const std::string& request, int wait_ms) {
  const int fd = e2e::ConnectFrom(port, "127.0.0.1");
  if (fd < 0) return 0;
  std::string got;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    const Clock::time_point end = Clock::now() + std::chrono::milliseconds(wait_ms);
    char buffer[2048];
    while (got.find("\r\n") == std::string::npos && Clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      got.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  // "HTTP/1.1 200 OK"
  return got.size() >= 12 ? std::atoi(got.c_str() + 9) : 0;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

GatewayPressure::GatewayPressure(int http_port, int slow_clients, int healthz_ms)
    : port_(http_port), slow_clients_(slow_clients), healthz_ms_(healthz_ms) {
  figures_.slow_clients = slow_clients;
}

GatewayPressure::~GatewayPressure() { Stop(); }

void GatewayPressure::Start() {
  for (int i = 0; i < slow_clients_; ++i) threads_.emplace_back([this, i] { Slow(i); });
  threads_.emplace_back([this] { CrossSite(); });
  threads_.emplace_back([this] { Probe(); });
}

GatewayFigures GatewayPressure::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  figures_.healthz_p50_ms = Percentile(healthz_ms_samples_, 0.5);
  figures_.healthz_p99_ms = Percentile(healthz_ms_samples_, 0.99);
  return figures_;
}

// A request head, a byte a second, on and on; a new connection whenever
// the server ends one.
void GatewayPressure::Slow(int index) {
  const std::string head =
      absl::StrCat("GET /api/v1/ListJobs?slow=", index, " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
  int fd = -1;
  size_t sent = 0;
  while (!stop_) {
    if (fd < 0) {
      fd = e2e::ConnectFrom(port_, "127.0.0.2");
      sent = 0;
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.slow_connections;
    }
    const char byte = sent < head.size() ? head[sent] : 'a';
    pollfd p{fd, POLLIN, 0};
    const bool ended = fd < 0 || ::poll(&p, 1, 0) > 0 ||
                       ::send(fd, &byte, 1, MSG_NOSIGNAL) != 1;  // answered or closed
    if (ended) {
      if (fd >= 0) ::close(fd);
      fd = -1;
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.slow_cut;
    } else {
      ++sent;
    }
    for (int ms = 0; ms < 1000 && !stop_; ms += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (fd >= 0) ::close(fd);
}

// The attacks of issue 22, in turn, 5 a second: each must be refused, 403 or
// 415 by the cross-site rules, or 401 first, since they carry a body and no
// key and a body's key is checked before anything else is (issue 40).
void GatewayPressure::CrossSite() {
  const std::string body = R"({"job_id": "1"})";
  const std::string length = absl::StrCat("Content-Length: ", body.size(), "\r\n");
  const std::string self = absl::StrCat("Host: 127.0.0.1:", port_, "\r\n");
  const std::string attacks[] = {
      // A page on another site posting JSON.
      "POST /api/v1/CancelJob HTTP/1.1\r\n" + self +
          "Origin: https://evil.example\r\nContent-Type: application/json\r\n" + length +
          "Connection: close\r\n\r\n" + body,
      // A "simple" request, which a browser sends without a preflight.
      "POST /api/v1/CancelJob HTTP/1.1\r\n" + self + "Content-Type: text/plain\r\n" + length +
          "Connection: close\r\n\r\n" + body,
      // DNS rebinding: a foreign name for 127.0.0.1.
      "POST /api/v1/CancelJob HTTP/1.1\r\nHost: rebound.evil.example\r\n"
      "Content-Type: application/json\r\n" +
          length + "Connection: close\r\n\r\n" + body,
  };
  for (size_t i = 0; !stop_; ++i) {
    const int status = Exchange(port_, attacks[i % 3], 5000);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.cross_site_attempts;
      if (status != 401 && status != 403 && status != 415) ++figures_.cross_site_not_refused;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void GatewayPressure::Probe() {
  const std::string request = absl::StrCat("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:", port_,
                                           "\r\nConnection: close\r\n\r\n");
  while (!stop_) {
    const Clock::time_point t0 = Clock::now();
    const int status = Exchange(port_, request, 5000);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.healthz_probes;
      if (status != 200) ++figures_.healthz_failures;
      figures_.healthz_max_ms = std::max(figures_.healthz_max_ms, ms);
      healthz_ms_samples_.push_back(ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(healthz_ms_));
  }
}

}  // namespace fca::soak
