// Conversions between storage records, engine structs and fca.v1 messages.
#ifndef FCA_SERVER_CORE_MAPPING_H_
#define FCA_SERVER_CORE_MAPPING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/auditor.h"
#include "storage/records.h"

namespace fca::core {

void ToTimestamp(int64_t unix_us, google::protobuf::Timestamp* out);
int64_t FromTimestamp(const google::protobuf::Timestamp& t);

v1::JobState ToProto(storage::JobState s);
[[nodiscard]] absl::StatusOr<storage::JobState> FromProto(v1::JobState s);

std::string DatasetKindName(v1::DatasetKind kind);  // "text" | "tokens"
v1::DatasetKind DatasetKindFromName(const std::string& name);

v1::Dataset ToProto(const storage::DatasetRecord& d);
v1::Result ToProto(const storage::ResultRow& r);
v1::Model ToProto(const engine::ModelInfo& info, const std::vector<engine::CoefficientSite>& sites,
                  const std::string& tokenizer);

// The canonical JSON of a spec (what the store keeps and a manifest holds).
std::string SpecToJson(const v1::AuditSpec& spec);
// The spec of a stored job; DATA_LOSS naming the job when it cannot be
// parsed (the store was damaged: the server wrote it from a valid spec).
[[nodiscard]] absl::StatusOr<v1::AuditSpec> StoredSpec(const storage::JobRecord& job);

// A message as the store keeps it (specs, provenance): proto3 JSON with the
// proto field names.
std::string ToStoredJson(const google::protobuf::Message& message);
// Stored provenance: fields it does not know (a newer server wrote them)
// are ignored, "" (a job or task stored before provenance was kept) gives
// an empty message; malformed JSON is DATA_LOSS.
[[nodiscard]] absl::Status ProvenanceFromJson(const std::string& json,
                                              google::protobuf::Message* out);

// A job as clients see it (its provenance included, not its tasks);
// `progress` comes from the coordinator.
[[nodiscard]] absl::StatusOr<v1::Job> ToProto(const storage::JobRecord& job, double progress);

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

// "CODE: message", the form job errors are stored and shown in.
std::string StatusText(const absl::Status& status);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_MAPPING_H_
