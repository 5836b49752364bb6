// ModelAudit's last phase, the execution audit with its timing, and the
// dense twin's own figures (model_audit_phases.h, model_audit.h).
#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/audit/dense_twin.h"
#include "server/engine/audit/execution.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/routing.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {

absl::Status ModelAudit::ExecutionAudit() {
  const int64_t rows = std::min<int64_t>(eval_.count(), opt_.batch_size);
  const at::Tensor ids = BatchIds(eval_, 0, rows);
  SiteTensors replay;
  for (const at::Tensor& t : eval_coeff_) replay.push_back(t.slice(0, 0, rows));
  // On the device before anything is counted or timed.
  replay = ToDevice(replay, model_.info().compute.device);
  const double weight = weights_.timing;
  const double phase_start = done_;
  // From the first report of the timing, after the counting forwards: the
  // phase starts at exactly its cumulative share.
  std::optional<std::chrono::steady_clock::time_point> start;
  ExecutionInputs in{
      &model_, req_.dense_twin, &ids, &replay, opt_, [&](int64_t done, int64_t total, double left) {
        const auto now = std::chrono::steady_clock::now();
        if (!start) start = now;
        const double taken = std::chrono::duration<double>(now - *start).count();
        // The share of the timing done: by time where the time left is
        // known (its budget may time more pairs than the weight expects),
        // else by pairs; never backwards.
        const double share = left > 0    ? taken / (taken + left)
                             : total > 0 ? static_cast<double>(done) / total
                                         : 0;
        done_ = std::max(done_, phase_start + weight * std::min(share, 1.0));
        Progress("timing", done, total, left);
        return CheckCancelled();
      }};
  FCA_ASSIGN_OR_RETURN(ExecutionOutcome out, AuditExecution(in));
  done_ = phase_start + weight;
  report_.execution = std::move(out.result);
  // The routing statistics over every evaluation token, not the counted
  // batch's: LIVE's recorded coefficients through the model's own top-k.
  if (HasRouters(model_)) {
    FCA_ASSIGN_OR_RETURN(
        RoutingStatistics routing,
        MeasureRouting(model_, eval_coeff_, BatchIds(eval_, 0, eval_.count()), opt_.batch_size));
    report_.execution.expert_load = std::move(routing.load);
    report_.execution.coactivation = std::move(routing.coactivation);
    report_.execution.token_experts = std::move(routing.token_experts);
  }
  {
    absl::MutexLock lock(&mu_);
    forward_seconds_ += out.forward_seconds;
    forward_tokens_ += out.forward_tokens;
  }
  if (req_.on_note && out.stop != TimingStop::kContinue) {
    req_.on_note(absl::StrFormat(
        "model '%s': timed %d pairs against the dense twin in two blocks (the first stopped: "
        "%s; the second timed as many pairs, fixed in advance); the verdict needs both blocks",
        model_.info().name, report_.execution.timing_repeats, TimingStopName(out.first_stop)));
  }
  return absl::OkStatus();
}

namespace {

// Matmul FLOPs per token of one forward of `ids`: LIVE for the twin, a
// REPLAY of the neutral coefficients for a model (every block run, its
// controller removed), so that neither a controller that skips work nor
// the controller's own cost counts as a mismatch.
absl::StatusOr<double> FullFlopsPerToken(ControlledModel& m, const at::Tensor& ids) {
  FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> neutral, m.NeutralCoefficients());
  for (at::Tensor& c : neutral) c = c.expand({ids.size(0), ids.size(1), c.size(-1)}).contiguous();
  m.ResetCounters();
  const CoefficientMode mode = neutral.empty() ? CoefficientMode::kLive : CoefficientMode::kReplay;
  FCA_RETURN_IF_ERROR(m.Forward(ids, mode, neutral.empty() ? nullptr : &neutral).status());
  const ExecutionCounters c = m.counters();
  m.ResetCounters();
  return c.flops / static_cast<double>(c.tokens);
}

}  // namespace

absl::Status CheckDenseTwinFlops(const AuditRequest& req) {
  if (req.dense_twin == nullptr || !req.options.dense_twin_mismatch.empty()) {
    return absl::OkStatus();
  }
  ControlledModel& twin = *req.dense_twin;
  const int64_t t = req.options.window_length;
  // Without a window of E the audit fails on its own, with its own message.
  absl::StatusOr<std::vector<int32_t>> stream = TokenStream(req.eval, twin.tokenizer(), t);
  if (!stream.ok()) return absl::OkStatus();
  absl::StatusOr<WindowSet> w = MakeWindows(*stream, t, 1, req.eval.name);
  if (!w.ok() || w->count() == 0) return absl::OkStatus();
  const at::Tensor ids = BatchIds(*w, 0, 1);
  FCA_ASSIGN_OR_RETURN(const double twin_flops, FullFlopsPerToken(twin, ids));
  for (ControlledModel* m : req.models) {
    FCA_ASSIGN_OR_RETURN(const double model_flops, FullFlopsPerToken(*m, ids));
    FCA_RETURN_IF_ERROR(CheckTwinFlops(m->info(), twin.info(), model_flops, twin_flops,
                                       req.options.dense_twin_mismatch));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecutionResult> DenseTwinExecution(const AuditRequest& req) {
  ControlledModel& dense = *req.dense_twin;
  const AuditOptions& o = req.options;
  FCA_ASSIGN_OR_RETURN(std::vector<int32_t> stream,
                       TokenStream(req.eval, dense.tokenizer(), o.batch_size * o.window_length));
  FCA_ASSIGN_OR_RETURN(WindowSet w,
                       MakeWindows(stream, o.window_length, o.batch_size, req.eval.name));
  at::Tensor ids = BatchIds(w, 0, w.count());
  dense.ResetCounters();
  FCA_RETURN_IF_ERROR(dense.Forward(ids, CoefficientMode::kLive, nullptr).status());
  const ExecutionCounters c = dense.counters();
  ExecutionResult x;
  x.model = dense.info().name;
  x.parameters = dense.info().num_parameters;
  x.blocks_per_token = double(c.blocks_executed) / double(c.tokens);
  x.blocks_executed_fraction = double(c.blocks_executed) / double(c.blocks_total);
  x.flops_per_token = x.replay_flops_per_token = c.flops / double(c.tokens);
  return x;
}

}  // namespace fca::engine
