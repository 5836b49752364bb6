// Conversions of fca.v1 messages that need no store: timestamps, the stored
// JSON of specs and provenance, status text, result rows. Workers and the
// coordinator share them (server/jobs/mapping.h has the rest).
#ifndef FCA_SERVER_RUNTIME_MESSAGES_H_
#define FCA_SERVER_RUNTIME_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/engine/audit/audit_types.h"

namespace fca::runtime {

void ToTimestamp(int64_t unix_us, google::protobuf::Timestamp* out);
int64_t FromTimestamp(const google::protobuf::Timestamp& t);
// A listing's time bound, when set (nullopt: not set). protobuf's Timestamp
// keeps nanos in [0, 1e9); anything else is a client bug worth naming
// (INVALID_ARGUMENT naming `field`), not a bound.
[[nodiscard]] absl::StatusOr<std::optional<int64_t>> TimeBound(bool set,
                                                               const google::protobuf::Timestamp& t,
                                                               const char* field);
// created_after <= created_before when both are set: a reversed range is a
// mistake (swapped flags), not a wish for nothing (INVALID_ARGUMENT).
[[nodiscard]] absl::Status CheckTimeRange(const std::optional<int64_t>& after,
                                          const std::optional<int64_t>& before);

// The canonical JSON of a spec (what the store keeps and a manifest holds).
std::string SpecToJson(const v1::AuditSpec& spec);

// A message as the store keeps it (specs, provenance): proto3 JSON with the
// proto field names.
std::string ToStoredJson(const google::protobuf::Message& message);
// Stored provenance: fields it does not know (a newer server wrote them)
// are ignored, "" (a job or task stored before provenance was kept) gives
// an empty message; malformed JSON is DATA_LOSS.
[[nodiscard]] absl::Status ProvenanceFromJson(const std::string& json,
                                              google::protobuf::Message* out);

// A result row as fca.v1 carries it, its typed key decoded from the stored
// name (common/result_key.h), and back: the one mapping of the fields an
// engine row and a Result share (the worker's ReportRows, the coordinator's
// reading of them, the rows the service serves). An undefined value is 0.
v1::Result RowToProto(const engine::ResultRow& row);
engine::ResultRow RowFromProto(const v1::Result& row);

// "CODE: message", the form job errors are stored and shown in.
std::string StatusText(const absl::Status& status);

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_MESSAGES_H_
