#include "server/engine/audit/progress_weights.h"

#include <algorithm>

namespace fca::engine {

PhaseWeights ExpectedPhaseWeights(const AuditOptions& o, const PhaseCounts& c) {
  const double e = static_cast<double>(c.eval_windows);
  PhaseWeights w;
  w.live = e;
  w.calibration = static_cast<double>(c.calib_windows);
  w.replay = e;
  w.replays = c.replays;
  w.statistics = kStatisticsPasses * e;
  const double rows = static_cast<double>(std::min<int64_t>(c.eval_windows, o.batch_size));
  const double counted = c.dense_twin ? 3 : 2;
  double timed = 0;
  if (o.timing_repeats > 0) {
    const double per_block = static_cast<double>(o.timing_warmup + o.timing_repeats);
    timed = c.dense_twin ? 2 * 2 * per_block : per_block;
  }
  w.timing = rows * (counted + timed);
  return w;
}

}  // namespace fca::engine
