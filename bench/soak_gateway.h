// fca_soak_bench: pressure on the HTTP gateway while the gRPC clients run
// (issue 22): slow clients that trickle a request head a byte at a time
// from 127.0.0.2 and reconnect whenever the server cuts them off,
// cross-site requests (a foreign Origin, a text/plain body, a foreign Host)
// that must all be refused, and a prober that asks /healthz from 127.0.0.1
// every --healthz_ms on a fresh connection and times the answer.
#ifndef FCA_BENCH_SOAK_GATEWAY_H_
#define FCA_BENCH_SOAK_GATEWAY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fca::soak {

struct GatewayFigures {
  int slow_clients = 0;
  int64_t slow_connections = 0;  // connections the slow clients opened
  int64_t slow_cut = 0;          // ... that the server ended (408, 429, closed)
  int64_t cross_site_attempts = 0;
  int64_t cross_site_not_refused = 0;  // answered other than 403/415: a problem
  int64_t healthz_probes = 0;
  int64_t healthz_failures = 0;  // no 200 within 5 s
  double healthz_max_ms = 0, healthz_p50_ms = 0, healthz_p99_ms = 0;
};

class GatewayPressure {
 public:
  GatewayPressure(int http_port, int slow_clients, int healthz_ms);
  ~GatewayPressure();  // Stop()
  void Start();
  // Stops the threads; the figures.
  GatewayFigures Stop();

 private:
  void Slow(int index);
  void CrossSite();
  void Probe();

  const int port_, slow_clients_, healthz_ms_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  GatewayFigures figures_;
  std::vector<double> healthz_ms_samples_;
};

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_GATEWAY_H_
