#include "server/runtime/forward_metrics.h"

#include "common/metrics.h"

namespace fca::runtime {
namespace {

metrics::Registry& R() { return metrics::Registry::Default(); }

metrics::Family<metrics::Counter>& ForwardTokens() {
  static auto& f = R().AddCounter(
      "fca_forward_tokens_total",
      "Tokens through model forwards of this server's own workers (audited model and dense "
      "twin), by audited model.",
      {"model"});
  return f;
}
metrics::Family<metrics::Counter>& ForwardSeconds() {
  static auto& f = R().AddCounter(
      "fca_forward_seconds_total",
      "Seconds inside model forwards of this server's own workers, by audited model.", {"model"});
  return f;
}
metrics::Family<metrics::Histogram>& TokensPerSecond() {
  static auto& f =
      R().AddHistogram("fca_forward_tokens_per_second",
                       "Forward throughput of each model audit by this server's own workers.",
                       {"model"}, metrics::ExponentialBuckets(10, 2, 20));
  return f;
}

}  // namespace

void ForwardTally::Update(int64_t tokens, double seconds) {
  if (tokens > tokens_) {
    ForwardTokens().WithLabels({model_}).Increment(static_cast<double>(tokens - tokens_));
    tokens_ = tokens;
  }
  if (seconds > seconds_) {
    ForwardSeconds().WithLabels({model_}).Increment(seconds - seconds_);
    seconds_ = seconds;
  }
}

void ForwardTally::Finish(int64_t tokens, double seconds) {
  Update(tokens, seconds);
  if (tokens <= 0 || seconds <= 0) return;
  TokensPerSecond().WithLabels({model_}).Observe(static_cast<double>(tokens) / seconds);
}

void RegisterForwardMetrics() {
  ForwardTokens();
  ForwardSeconds();
  TokensPerSecond();
}

}  // namespace fca::runtime
