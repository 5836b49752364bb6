// The task side of an audit spec: its engine options, and the resolution of
// model and dataset names into an engine request (a job's datasets in the
// store: server/jobs/datasets.h; the server's check of a submitted spec:
// server/core/spec_policy.h).
#ifndef FCA_SERVER_RUNTIME_TASK_SPEC_H_
#define FCA_SERVER_RUNTIME_TASK_SPEC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/auditor.h"
#include "server/runtime/model_repository.h"

namespace fca::runtime {

// The engine's options of a normalized spec (every AuditSpec field the
// engine reads, per-group dependence included), the spec's names of
// interventions and scope as their ids (common/vocabulary.h).
// INVALID_ARGUMENT for a name that is none (core::NormalizeSpec refused
// those at submission; a stored spec from another version may still hold one).
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

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_TASK_SPEC_H_
