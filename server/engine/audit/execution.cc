#include "server/engine/audit/execution.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "common/status_macros.h"
#include "common/stopwatch.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

SlowdownEstimate Estimate(const std::vector<double>& model, const std::vector<double>& twin,
                          const TimingPlan& plan) {
  return PairedSlowdown(model, twin, plan.ci_level);
}

}  // namespace

TimingPlan MakeTimingPlan(const AuditOptions& o) {
  TimingPlan p;
  p.warmup_pairs = o.timing_warmup;
  p.min_pairs = o.timing_repeats;
  p.max_pairs = std::max(o.timing_repeats, o.timing_max_repeats);
  p.budget_seconds = o.timing_budget_seconds;
  p.resolution = o.timing_resolution;
  p.ci_level = o.ci_level;
  return p;
}

const char* TimingStopName(TimingStop stop) {
  switch (stop) {
    case TimingStop::kContinue:
      return "not stopped";
    case TimingStop::kPrecise:
      return "the CI half-width is below the resolution";
    case TimingStop::kMaxPairs:
      return "the most pairs allowed";
    case TimingStop::kBudget:
      return "the time budget was spent";
  }
  return "unknown";
}

TimingStop DecideTimingStop(const std::vector<double>& model, const std::vector<double>& twin,
                            double elapsed_seconds, const TimingPlan& plan) {
  const int64_t n = static_cast<int64_t>(model.size());
  if (n < plan.min_pairs) return TimingStop::kContinue;
  if (n >= plan.max_pairs) return TimingStop::kMaxPairs;
  if (n % 2 != 0) return TimingStop::kContinue;
  const SlowdownEstimate e = Estimate(model, twin, plan);
  if (e.half_width() <= plan.resolution) return TimingStop::kPrecise;
  if (elapsed_seconds >= plan.budget_seconds) return TimingStop::kBudget;
  return TimingStop::kContinue;
}

absl::StatusOr<PairedTimes> TimePairs(const TimedForward& model, const TimedForward& twin,
                                      const TimingPlan& plan,
                                      const std::function<absl::Status(int64_t)>& after_pair) {
  for (int w = 0; w < plan.warmup_pairs; ++w) {
    FCA_RETURN_IF_ERROR(model().status());
    FCA_RETURN_IF_ERROR(twin().status());
  }
  PairedTimes t;
  const Clock::time_point start = Clock::now();
  while (t.stop == TimingStop::kContinue && plan.max_pairs > 0) {
    // Alternating the order cancels what the first or second forward of a
    // pair gains or loses (caches, frequency scaling, a neighbour's load).
    const bool twin_first = t.model.size() % 2 == 1;
    absl::StatusOr<double> d = twin_first ? twin() : absl::StatusOr<double>(0.0);
    FCA_RETURN_IF_ERROR(d.status());
    FCA_ASSIGN_OR_RETURN(double m, model());
    if (!twin_first) d = twin();
    FCA_RETURN_IF_ERROR(d.status());
    t.model.push_back(m);
    t.twin.push_back(*d);
    if (after_pair) FCA_RETURN_IF_ERROR(after_pair(static_cast<int64_t>(t.model.size())));
    t.stop = DecideTimingStop(t.model, t.twin, SecondsSince(start), plan);
  }
  return t;
}

TimingPlan FirstBlockPlan(const TimingPlan& plan) {
  TimingPlan block = plan;
  block.max_pairs = std::max(plan.min_pairs, plan.max_pairs / 2);
  block.budget_seconds = plan.budget_seconds / 2;
  return block;
}

TimingPlan SecondBlockPlan(const TimingPlan& plan, int64_t first_block_pairs) {
  TimingPlan block = plan;
  block.min_pairs = block.max_pairs = static_cast<int>(first_block_pairs);
  block.budget_seconds = std::numeric_limits<double>::infinity();
  return block;
}

double TimingSecondsLeft(const TimingPlan& first, int64_t done, double seconds) {
  if (done <= 0) return 2 * first.budget_seconds;
  const double pace = seconds / static_cast<double>(done);
  const double first_left = std::min(static_cast<double>(first.max_pairs - done) * pace,
                                     std::max(first.budget_seconds - seconds, 0.0));
  return std::max(first_left, 0.0) * 2 + seconds;
}

int CombinedVerdict(int first_block, int second_block) {
  return first_block == second_block ? first_block : 0;
}

ExecutionResult::ExpertLoad MakeExpertLoad(int64_t layer, const std::vector<int64_t>& assignments,
                                           int64_t tokens) {
  ExecutionResult::ExpertLoad load;
  load.layer = layer;
  double total = 0;
  for (int64_t a : assignments) total += static_cast<double>(a);
  load.experts_per_token = tokens > 0 ? total / static_cast<double>(tokens) : 0.0;
  load.tokens = tokens;
  for (int64_t a : assignments) {
    const double p = total > 0 ? static_cast<double>(a) / total : 0.0;
    load.share.push_back(p);
    if (p > 0) load.entropy -= p * std::log(p);
  }
  return load;
}

namespace {

// Per layer, from the counters of one forward (the first batch); the audit
// replaces them with the load over all of E (routing.h, MeasureRouting).
std::vector<ExecutionResult::ExpertLoad> ExpertLoads(const ExecutionCounters& c) {
  std::vector<ExecutionResult::ExpertLoad> out;
  const int64_t E = c.experts_per_layer;
  if (E <= 0 || c.tokens <= 0) return out;
  for (size_t begin = 0; begin + E <= c.expert_tokens.size(); begin += E) {
    const std::vector<int64_t> layer(c.expert_tokens.begin() + begin,
                                     c.expert_tokens.begin() + begin + E);
    out.push_back(MakeExpertLoad(static_cast<int64_t>(begin) / E, layer, c.tokens));
  }
  return out;
}

// Counts and times the forwards of one model's execution audit.
class ExecutionRun {
 public:
  explicit ExecutionRun(const ExecutionInputs& in)
      : in_(in), tokens_(static_cast<double>(in.ids->numel())) {}

  absl::StatusOr<ExecutionOutcome> Run() {
    FCA_RETURN_IF_ERROR(Count());
    FCA_RETURN_IF_ERROR(Time());
    return std::move(out_);
  }

 private:
  // Blocks and FLOPs as the models count them while they run.
  absl::Status Count() {
    ExecutionResult& x = out_.result;
    ControlledModel& m = *in_.model;
    x.model = m.info().name;
    x.parameters = m.info().num_parameters;
    m.ResetCounters();
    FCA_RETURN_IF_ERROR(Forward(m, CoefficientMode::kLive, nullptr).status());
    const ExecutionCounters live = m.counters();
    x.blocks_per_token = live.blocks_executed / tokens_;
    x.blocks_executed_fraction = double(live.blocks_executed) / double(live.blocks_total);
    x.flops_per_token = live.flops / tokens_;
    if (live.parameters_read > 0) x.active_parameters = live.parameters_read / tokens_;
    x.expert_load = ExpertLoads(live);
    std::vector<at::Tensor> replay = *in_.replay;
    m.ResetCounters();
    FCA_RETURN_IF_ERROR(Forward(m, CoefficientMode::kReplay, &replay).status());
    x.replay_flops_per_token = m.counters().flops / tokens_;
    if (in_.twin == nullptr) return absl::OkStatus();
    in_.twin->ResetCounters();
    FCA_RETURN_IF_ERROR(Forward(*in_.twin, CoefficientMode::kLive, nullptr).status());
    x.dense_flops_per_token = in_.twin->counters().flops / tokens_;
    x.flops_overhead = x.flops_per_token / *x.dense_flops_per_token - 1.0;
    return absl::OkStatus();
  }

  absl::Status Time() {
    const TimingPlan plan = MakeTimingPlan(in_.options);
    if (plan.min_pairs == 0) return absl::OkStatus();
    const Clock::time_point start = Clock::now();
    auto progress = [&](int64_t done, int64_t total, double left) {
      return in_.after_pair ? in_.after_pair(done, total, left) : absl::OkStatus();
    };
    const TimingPlan first_plan = FirstBlockPlan(plan);
    in_.model->ResetCounters();
    if (in_.twin == nullptr) {
      FCA_RETURN_IF_ERROR(TimeAlone(plan, progress));
      RecordParts();
      return absl::OkStatus();
    }
    in_.twin->ResetCounters();
    FCA_RETURN_IF_ERROR(progress(0, plan.max_pairs, TimingSecondsLeft(first_plan, 0, 0)));
    // Two independent blocks, the second as long as the first (a number of
    // pairs fixed before it is timed); the verdict needs both.
    auto model = [&] { return TimeOne(*in_.model); };
    auto twin = [&] { return TimeOne(*in_.twin); };
    FCA_ASSIGN_OR_RETURN(PairedTimes first, TimePairs(model, twin, first_plan, [&](int64_t pairs) {
                           return progress(
                               pairs, plan.max_pairs,
                               TimingSecondsLeft(first_plan, pairs, SecondsSince(start)));
                         }));
    const int64_t done = static_cast<int64_t>(first.model.size());
    const double first_seconds = SecondsSince(start);
    FCA_ASSIGN_OR_RETURN(
        PairedTimes second, TimePairs(model, twin, SecondBlockPlan(plan, done), [&](int64_t pairs) {
          // The second block's pace, as it times as many pairs as the first.
          const double pace = (SecondsSince(start) - first_seconds) / static_cast<double>(pairs);
          return progress(done + pairs, 2 * done, static_cast<double>(done - pairs) * pace);
        }));
    ExecutionResult& x = out_.result;
    x.first_block = Estimate(first.model, first.twin, plan);
    x.second_block = Estimate(second.model, second.twin, plan);
    std::vector<double> model_us = first.model, twin_us = first.twin;
    model_us.insert(model_us.end(), second.model.begin(), second.model.end());
    twin_us.insert(twin_us.end(), second.twin.begin(), second.twin.end());
    const SlowdownEstimate e = Estimate(model_us, twin_us, plan);
    x.latency_us_per_token = Median(model_us);
    x.dense_latency_us_per_token = Median(twin_us);
    x.slowdown = e.slowdown;
    x.slowdown_ci = e.ci;
    x.slowdown_verdict = CombinedVerdict(x.first_block->verdict, x.second_block->verdict);
    x.timing_repeats = e.pairs;
    out_.first_stop = first.stop;
    out_.stop = second.stop;
    RecordParts();
    return absl::OkStatus();
  }

  // The parts' seconds the models counted over the timing's LIVE forwards
  // (warm-ups included), per token; absent where a part was not timed (off
  // the CPU, or not in the family).
  void RecordParts() {
    const auto per_token = [](double seconds, const ExecutionCounters& c) {
      return seconds > 0 && c.tokens > 0 ? std::optional<double>(seconds * 1e6 / c.tokens)
                                         : std::nullopt;
    };
    ExecutionResult& x = out_.result;
    const ExecutionCounters m = in_.model->counters();
    if (m.experts_per_layer > 0) {
      x.router_us_per_token = per_token(m.seconds.router, m);
      x.dispatch_us_per_token = per_token(m.seconds.dispatch, m);
      x.experts_us_per_token = per_token(m.seconds.experts, m);
      if (in_.twin != nullptr) {
        const ExecutionCounters t = in_.twin->counters();
        x.dense_mlp_us_per_token = per_token(t.seconds.mlp, t);
      }
    }
  }

  // Without a twin there is nothing to compare: a fixed number of forwards
  // gives the latency.
  absl::Status TimeAlone(const TimingPlan& plan,
                         const std::function<absl::Status(int64_t, int64_t, double)>& progress) {
    FCA_RETURN_IF_ERROR(progress(0, plan.min_pairs, 0));  // 0: not known yet
    const Clock::time_point start = Clock::now();
    for (int w = 0; w < plan.warmup_pairs; ++w) {
      FCA_RETURN_IF_ERROR(TimeOne(*in_.model).status());
    }
    std::vector<double> own;
    for (int r = 0; r < plan.min_pairs; ++r) {
      FCA_ASSIGN_OR_RETURN(double t, TimeOne(*in_.model));
      own.push_back(t);
      const double pace = SecondsSince(start) / (r + 1);
      FCA_RETURN_IF_ERROR(progress(r + 1, plan.min_pairs, (plan.min_pairs - r - 1) * pace));
    }
    out_.result.latency_us_per_token = Median(own);
    out_.result.timing_repeats = static_cast<int64_t>(own.size());
    return absl::OkStatus();
  }

  // Microseconds per token of one LIVE forward. An asynchronous device
  // (CUDA) is idle when the clock starts and done when it stops (Forward
  // waits for it); on the CPU neither wait does anything.
  absl::StatusOr<double> TimeOne(ControlledModel& m) {
    SynchronizeDevice(m.info().compute.device);
    const Clock::time_point t0 = Clock::now();
    FCA_RETURN_IF_ERROR(Forward(m, CoefficientMode::kLive, nullptr).status());
    return SecondsSince(t0) * 1e6 / tokens_;
  }

  // A forward, its time taken until the device has finished it.
  absl::StatusOr<at::Tensor> Forward(ControlledModel& m, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<at::Tensor> logits = m.Forward(*in_.ids, mode, coefficients);
    SynchronizeDevice(m.info().compute.device);
    out_.forward_seconds += SecondsSince(t0);
    out_.forward_tokens += in_.ids->numel();
    return logits;
  }

  const ExecutionInputs& in_;
  const double tokens_;
  ExecutionOutcome out_;
};

}  // namespace

absl::StatusOr<ExecutionOutcome> AuditExecution(const ExecutionInputs& in) {
  return GuardTorch("the execution audit of model '" + in.model->info().name + "'",
                    [&] { return ExecutionRun(in).Run(); });
}

}  // namespace fca::engine
