// The one model of how long each phase of a model's audit is expected to
// take, from which its progress fraction is weighted (docs/user-guide.md,
// "Progress"): each phase counts its expected forwards, in window-forwards
// (one forward of one window through one model), so that the fraction moves
// roughly with the time taken, the timing included. Torch-free.
#ifndef FCA_SERVER_ENGINE_AUDIT_PROGRESS_WEIGHTS_H_
#define FCA_SERVER_ENGINE_AUDIT_PROGRESS_WEIGHTS_H_

#include <cstdint>

#include "server/engine/audit/audit_types.h"

namespace fca::engine {

// The statistics after the replays (bootstrap CIs and tests, Holm,
// retention, variation, lookup tables), in passes over E. Measured on
// featuregate-s1 (docs/user-guide.md, "Progress"): about 0.4 s against 5 s
// for one replay of its 191 windows, with 16 replays and 1000 bootstrap
// resamples; small, but the bootstrap's cost grows with E as a pass's does.
inline constexpr double kStatisticsPasses = 0.1;

// What one model's audit runs, known once its windows are made.
struct PhaseCounts {
  int64_t eval_windows = 0;   // E
  int64_t calib_windows = 0;  // C
  // Whole passes over E after LIVE, each one replay: every intervention
  // but `correct`, each calibration resample's calibrated ones, each group
  // of each per-group intervention, and the float32 routing reference.
  int64_t replays = 0;
  bool dense_twin = false;
};

// Each phase's expected cost in window-forwards.
struct PhaseWeights {
  double live = 0;         // E: the LIVE pass over E
  double calibration = 0;  // C: the LIVE pass over C
  double replay = 0;       // E: each replay
  int64_t replays = 0;
  double statistics = 0;  // kStatisticsPasses * E
  // The execution audit's forwards of its batch of rows = min(E,
  // batch_size) windows: counted (LIVE and REPLAY, and the twin's LIVE),
  // then timed (with a twin, two blocks of timing_warmup + timing_repeats
  // pairs, a pair one forward of each; alone, timing_warmup +
  // timing_repeats forwards; none when timing_repeats is 0).
  double timing = 0;

  double Total() const {
    return live + calibration + replay * static_cast<double>(replays) + statistics + timing;
  }
};

PhaseWeights ExpectedPhaseWeights(const AuditOptions& options, const PhaseCounts& counts);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_PROGRESS_WEIGHTS_H_
