// A job's datasets in the store: what submissions check and workers read
// (through the coordinator).
#ifndef FCA_SERVER_JOBS_DATASETS_H_
#define FCA_SERVER_JOBS_DATASETS_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/runtime/task_spec.h"
#include "storage/store.h"

namespace fca::jobs {

// The evaluation (or calibration) dataset of a job of `project`. NOT_FOUND
// for an unknown dataset (looked up among the project's only, by name or
// "sha256:<hex>": a job reads no other project's datasets).
[[nodiscard]] absl::StatusOr<runtime::DatasetBytes> ReadJobDataset(storage::Store* store,
                                                                   const v1::AuditSpec& spec,
                                                                   const std::string& project,
                                                                   bool calibration);

// Finds the project's dataset by name or "sha256:<hex>"; NOT_FOUND otherwise.
[[nodiscard]] absl::StatusOr<storage::DatasetRecord> FindDatasetRef(storage::Store* store,
                                                                    const std::string& ref,
                                                                    const std::string& project);

// FAILED_PRECONDITION when a queued or running job of the dataset's
// project names it (by name or by content hash): DeleteDataset and
// retention keep it.
[[nodiscard]] absl::Status CheckDatasetUnused(storage::Store* store,
                                              const storage::DatasetRecord& dataset);

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_DATASETS_H_
