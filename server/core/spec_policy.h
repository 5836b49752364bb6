// The server's spec policy: a submitted audit spec checked against the
// server's limits, with its defaults filled (what a task makes of a spec:
// server/runtime/task_spec.h).
#ifndef FCA_SERVER_CORE_SPEC_POLICY_H_
#define FCA_SERVER_CORE_SPEC_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/spec_fields.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::core {

// The server's limits on a spec; the defaults are common/spec_fields.h's.
struct SpecLimits {
  int64_t max_windows = spec_fields::kMaxEvalWindows.ServerLimit();      // per dataset and job
  int64_t max_window_length = spec_fields::kWindowLength.ServerLimit();  // tokens
  int64_t max_models = spec_fields::kModels.ServerLimit();               // audited models per job
  int64_t max_batch_size = spec_fields::kBatchSize.ServerLimit();
  int64_t max_bootstrap_resamples = spec_fields::kBootstrapResamples.ServerLimit();
  int64_t max_timing_repeats = spec_fields::kTimingRepeats.ServerLimit();
  int64_t max_timing_max_repeats = spec_fields::kTimingMaxRepeats.ServerLimit();
  double max_timing_budget_seconds = spec_fields::kTimingBudgetSeconds.ServerLimit();  // per model
};

// Checks every field and fills the defaults of common/spec_fields.h (max
// windows: the limit; the engine notes when a dataset has more).
// INVALID_ARGUMENT naming the field, with the limit where one applies.
[[nodiscard]] absl::StatusOr<v1::AuditSpec> NormalizeSpec(const v1::AuditSpec& spec,
                                                          const SpecLimits& limits);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_SPEC_POLICY_H_
