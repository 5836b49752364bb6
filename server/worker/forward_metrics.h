// The forward metrics of the workers of this process (listed with the
// server's other metrics in server/jobs/server_metrics.h): fca-server's own
// workers count their forwards here, and GET /metrics exposes them.
#ifndef FCA_SERVER_WORKER_FORWARD_METRICS_H_
#define FCA_SERVER_WORKER_FORWARD_METRICS_H_

#include <cstdint>
#include <string>

namespace fca::core {

// One model's audit by one of this process's workers.
void ObserveForwards(const std::string& model, int64_t tokens, double seconds);
// Creates the families (no series) so that they are exposed before the
// first audit.
void RegisterForwardMetrics();

}  // namespace fca::core

#endif  // FCA_SERVER_WORKER_FORWARD_METRICS_H_
