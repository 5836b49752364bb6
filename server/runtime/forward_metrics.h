// The forward metrics of the workers of this process (listed with the
// server's other metrics in server/jobs/server_metrics.h): fca-server's own
// workers count their forwards here, and GET /metrics exposes them.
#ifndef FCA_SERVER_RUNTIME_FORWARD_METRICS_H_
#define FCA_SERVER_RUNTIME_FORWARD_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>

namespace fca::runtime {

// One model's audit by one of this process's workers, counted as its
// progress reports come (so that the counters move while it runs): each
// Update and Finish takes the totals so far and counts their growth;
// Finish also observes the audit's throughput.
class ForwardTally {
 public:
  explicit ForwardTally(std::string model) : model_(std::move(model)) {}
  void Update(int64_t tokens, double seconds);
  void Finish(int64_t tokens, double seconds);

 private:
  const std::string model_;
  int64_t tokens_ = 0;  // counted so far
  double seconds_ = 0;
};
// Creates the families (no series) so that they are exposed before the
// first audit.
void RegisterForwardMetrics();

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_FORWARD_METRICS_H_
