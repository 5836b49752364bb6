// Audit specs: validation against the server's limits, defaults, and
// resolution of model and dataset names into an engine request (a job's
// datasets in the store: server/jobs/datasets.h).
#ifndef FCA_SERVER_WORKER_SPEC_H_
#define FCA_SERVER_WORKER_SPEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec_fields.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/auditor.h"
#include "server/worker/model_repository.h"

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

// The engine's options of a normalized spec (every AuditSpec field the
// engine reads, per-group dependence included), the spec's names of
// interventions and scope as their ids (common/vocabulary.h).
// INVALID_ARGUMENT for a name that is none (NormalizeSpec refused those at
// submission; a stored spec from another version may still hold one).
[[nodiscard]] absl::StatusOr<engine::AuditOptions> ToEngineOptions(const v1::AuditSpec& spec);

// A spec resolved against the repository and the store, ready to run. The
// request's raw model pointers point into `models`, which keeps every model
// alive for as long as the ResolvedAudit lives, even when the repository
// unloads it meanwhile (memory budget, changed folder).
struct ResolvedAudit {
  engine::AuditRequest request;
  std::vector<std::shared_ptr<engine::ControlledModel>> models;  // audited + twin
  std::string eval_sha256, calib_sha256;
};

// The bytes of one dataset of a job, as a worker needs them.
struct DatasetBytes {
  std::string name, kind, sha256;  // kind: "text" | "tokens"
  // Pre-tokenized data: the ids of at most the spec's max windows of its
  // window length (a job that uses a few windows reads only those); text:
  // whole (the engine tokenizes only the prefix it needs).
  std::string bytes;
};

// The engine's dataset; INVALID_ARGUMENT for tokens that are not whole
// int32s or an unknown kind.
[[nodiscard]] absl::StatusOr<engine::Dataset> MakeDataset(DatasetBytes data);

// The request of one task of a job: the audit of `model` (with the spec's
// dense twin, if any) on the given datasets, models taken from `models`.
// NOT_FOUND for an unknown model, or the repository's load error.
[[nodiscard]] absl::StatusOr<ResolvedAudit> ResolveTask(const v1::AuditSpec& spec,
                                                        const std::string& model,
                                                        ModelRepository* models,
                                                        engine::Dataset eval,
                                                        engine::Dataset calib);

}  // namespace fca::core

#endif  // FCA_SERVER_WORKER_SPEC_H_
