// Conversions between storage records, engine structs and fca.v1 messages
// (those that need no storage record: server/runtime/messages.h).
#ifndef FCA_SERVER_JOBS_MAPPING_H_
#define FCA_SERVER_JOBS_MAPPING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/auditor.h"
#include "server/runtime/messages.h"
#include "server/runtime/task_broker.h"
#include "storage/records.h"

namespace fca::jobs {

v1::JobState ToProto(storage::JobState s);
[[nodiscard]] absl::StatusOr<storage::JobState> FromProto(v1::JobState s);

std::string DatasetKindName(v1::DatasetKind kind);  // "text" | "tokens"
v1::DatasetKind DatasetKindFromName(const std::string& name);

v1::Dataset ToProto(const storage::DatasetRecord& d);
v1::Result ToProto(const storage::ResultRow& r);
v1::Model ToProto(const engine::ModelInfo& info, const std::vector<engine::CoefficientSite>& sites,
                  const std::string& tokenizer);

// The spec of a stored job; DATA_LOSS naming the job when it cannot be
// parsed (the store was damaged: the server wrote it from a valid spec).
[[nodiscard]] absl::StatusOr<v1::AuditSpec> StoredSpec(const storage::JobRecord& job);

// A job as clients see it (its provenance included, not its tasks);
// `progress` comes from the coordinator.
[[nodiscard]] absl::StatusOr<v1::Job> ToProto(const storage::JobRecord& job, double progress);

// The lease a stored task is held under (the latest claim's).
runtime::Lease LeaseOf(const storage::TaskRecord& task);

// A task as clients see it, with its provenance (placement is the
// coordinator's to add).
[[nodiscard]] absl::StatusOr<v1::JobTask> ToProto(const storage::TaskRecord& task);

// The datasets a stored row was computed on.
struct RowDatasets {
  std::string eval_sha256, calib_sha256;
};

// Engine rows of one model (weights `weights_sha256`) -> storage rows of a job.
std::vector<storage::ResultRow> ToStorageRows(const std::vector<engine::ResultRow>& rows,
                                              const std::string& weights_sha256, int64_t job_id,
                                              const RowDatasets& datasets);

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_MAPPING_H_
