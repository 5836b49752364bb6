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
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/auditor.h"
#include "server/worker/model_repository.h"

namespace fca::core {

struct SpecLimits {
  int64_t max_windows = 4096;        // per dataset and job
  int64_t max_window_length = 4096;  // tokens
  int64_t max_models = 16;           // audited models per job
  int64_t max_batch_size = 256;
  int64_t max_bootstrap_resamples = 100000;
  int64_t max_timing_repeats = 100;
  int64_t max_timing_max_repeats = 2000;    // pairs of the adaptive timing
  double max_timing_budget_seconds = 3600;  // per model
};

// Checks every field and fills defaults (window 128, batch 8, bootstrap
// 1000, ci 0.95, timing 7 to max(200, timing) pairs within 60 s, all
// interventions, per_layer_scope "layer", max windows = the limit: the
// engine notes when a dataset has more).
// INVALID_ARGUMENT naming the field, with the limit where one applies.
[[nodiscard]] absl::StatusOr<v1::AuditSpec> NormalizeSpec(const v1::AuditSpec& spec,
                                                          const SpecLimits& limits);

// The engine's options of a normalized spec (every AuditSpec field the
// engine reads, per-group dependence included).
engine::AuditOptions ToEngineOptions(const v1::AuditSpec& spec);

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
