// The execution audit (fca.md "Execution"): what a model runs (blocks and
// FLOPs, counted by the model while it runs) and what it costs in wall-clock
// time against its dense twin, timed in interleaved pairs until the
// slowdown's CI is narrow enough to say something. Used by the auditor; the
// pair timing is exposed so that tests can drive it with any two forwards.
// Torch-free header.
#ifndef FCA_SERVER_ENGINE_AUDIT_EXECUTION_H_
#define FCA_SERVER_ENGINE_AUDIT_EXECUTION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/audit/audit_types.h"
#include "server/engine/audit/statistics.h"

namespace at {
class Tensor;
}  // namespace at

namespace fca::engine {

// How one model is timed against its twin (AuditOptions' timing fields,
// whose defaults these are).
struct TimingPlan {
  int warmup_pairs = AuditOptions().timing_warmup;  // untimed pairs first: allocator, caches
  int min_pairs = AuditOptions().timing_repeats;
  int max_pairs = AuditOptions().timing_max_repeats;  // >= min_pairs
  // Past min_pairs, stop after this much wall time.
  double budget_seconds = AuditOptions().timing_budget_seconds;
  double resolution = AuditOptions().timing_resolution;  // precise: half-width <= this
  double ci_level = AuditOptions().ci_level;             // of the slowdown's t-interval
};

TimingPlan MakeTimingPlan(const AuditOptions& options);

// Why the timing stopped adding pairs. The rule never looks at where the
// CI lies (whether it excludes 0), only at its width, the pairs and the
// time (fca.md "Execution": valid under optional stopping).
enum class TimingStop {
  kContinue,  // not yet
  kPrecise,   // the CI half-width is below the resolution (may contain 0)
  kMaxPairs,  // max_pairs reached
  kBudget,    // budget_seconds spent
};
const char* TimingStopName(TimingStop stop);

// The stop rule after `model.size()` timed pairs and `elapsed_seconds`:
// nothing before min_pairs, kMaxPairs at max_pairs, and otherwise only after
// an even number of pairs (so each order, model first and twin first, has
// run equally often and an order effect cancels in the estimate), the first
// of kPrecise, kBudget that holds. The CI's half-width depends on the pairs'
// log ratios only through their deviations from their mean, so stopping on
// it does not select for a verdict.
TimingStop DecideTimingStop(const std::vector<double>& model, const std::vector<double>& twin,
                            double elapsed_seconds, const TimingPlan& plan);

// One timed forward; returns its wall time in microseconds per token.
using TimedForward = std::function<absl::StatusOr<double>()>;

struct PairedTimes {
  std::vector<double> model, twin;  // us/token of pair i
  TimingStop stop = TimingStop::kContinue;
};

// Runs plan.warmup_pairs untimed pairs, then timed pairs (model first in
// even pairs, twin first in odd ones) until DecideTimingStop says stop.
// `after_pair` (may be empty) is called with the number of timed pairs after
// each one; an error from it (CANCELLED) or from a forward is returned.
[[nodiscard]] absl::StatusOr<PairedTimes> TimePairs(
    const TimedForward& model, const TimedForward& twin, const TimingPlan& plan,
    const std::function<absl::Status(int64_t)>& after_pair);

// The two timing blocks of one model (fca.md "Execution"), each a TimePairs
// run of its own (warm-up included). The first stops by the rule above with
// half the pairs and half the budget of `plan` (at least plan.min_pairs);
// the second times exactly as many pairs as the first did: a number fixed
// before it starts, so its verdict is that of a fixed-size experiment.
TimingPlan FirstBlockPlan(const TimingPlan& plan);
TimingPlan SecondBlockPlan(const TimingPlan& plan, int64_t first_block_pairs);
// For progress: the seconds a twin's timing has left when `done` pairs of
// the first block (`first`: FirstBlockPlan) took `seconds`, warm-up
// included. The first block runs on at the pace so far until its most
// pairs or its budget (half the whole), the second as long again. Before
// any pair: the whole budget.
double TimingSecondsLeft(const TimingPlan& first, int64_t done, double seconds);

// The reported verdict: a block's verdict when both blocks agree, else 0
// (no detectable difference).
int CombinedVerdict(int first_block, int second_block);

// One router layer's load from its (token, expert) assignments counted per
// expert over `tokens` tokens: experts run per token, each expert's share
// of the assignments and the entropy of the shares (fca.md "Execution").
ExecutionResult::ExpertLoad MakeExpertLoad(int64_t layer, const std::vector<int64_t>& assignments,
                                           int64_t tokens);

// What the execution audit of one model is given by the auditor.
struct ExecutionInputs {
  ControlledModel* model = nullptr;  // audited
  ControlledModel* twin = nullptr;   // may be null
  const at::Tensor* ids = nullptr;   // int64 [B, T]: counted and timed
  // Its `correct` coefficients, on the model's device (ToDevice), so that no
  // transfer is counted or timed.
  const std::vector<at::Tensor>* replay = nullptr;
  AuditOptions options;
  // Called with (timed pairs so far, most pairs, estimated seconds left:
  // TimingSecondsLeft) after each timed pair and once before the first; an
  // error (CANCELLED) stops the audit. In the second block "most pairs" is
  // the exact count, twice the first block's.
  std::function<absl::Status(int64_t, int64_t, double)> after_pair;
};

struct ExecutionOutcome {
  ExecutionResult result;
  TimingStop stop = TimingStop::kContinue;  // of the second block
  TimingStop first_stop = TimingStop::kContinue;
  double forward_seconds = 0;  // inside model forwards (twin's too)
  int64_t forward_tokens = 0;
};

// Counts blocks and FLOPs on one LIVE and one REPLAY forward of `ids` (and
// the twin's on the same batch), then times the model against the twin
// (or alone); on a GPU each time is the device's (SynchronizeDevice around
// it). Torch errors come back as INTERNAL naming the model.
[[nodiscard]] absl::StatusOr<ExecutionOutcome> AuditExecution(const ExecutionInputs& in);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_EXECUTION_H_
