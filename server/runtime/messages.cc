#include "server/runtime/messages.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/proto_json.h"
#include "common/result_key.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::runtime {

v1::Result RowToProto(const engine::ResultRow& row) {
  v1::Result out;
  out.set_model(row.model);
  out.set_intervention(row.intervention);
  out.set_metric(row.metric);
  *out.mutable_key() = v1::ToProto(ResultKeyOf(row.metric));
  out.set_value(row.defined ? row.value : 0.0);
  out.set_defined(row.defined);
  if (row.ci_low) out.set_ci_low(*row.ci_low);
  if (row.ci_high) out.set_ci_high(*row.ci_high);
  out.set_n(row.n);
  return out;
}

engine::ResultRow RowFromProto(const v1::Result& row) {
  engine::ResultRow out;
  out.model = row.model();
  out.intervention = row.intervention();
  out.metric = row.metric();
  out.value = row.value();
  out.defined = row.defined();
  if (row.has_ci_low()) out.ci_low = row.ci_low();
  if (row.has_ci_high()) out.ci_high = row.ci_high();
  out.n = row.n();
  return out;
}

void ToTimestamp(int64_t unix_us, google::protobuf::Timestamp* out) {
  out->set_seconds(unix_us / 1000000);
  out->set_nanos(static_cast<int32_t>((unix_us % 1000000) * 1000));
}

int64_t FromTimestamp(const google::protobuf::Timestamp& t) {
  // Clamped: a far-future or far-past bound must not wrap around and turn
  // "after year 9999" into "after 1970".
  constexpr int64_t kMaxSeconds = std::numeric_limits<int64_t>::max() / 1000000 - 1;
  const int64_t seconds = std::clamp<int64_t>(t.seconds(), -kMaxSeconds, kMaxSeconds);
  return seconds * 1000000 + t.nanos() / 1000;
}

absl::StatusOr<std::optional<int64_t>> TimeBound(bool set, const google::protobuf::Timestamp& t,
                                                 const char* field) {
  if (!set) return std::nullopt;
  if (t.nanos() < 0 || t.nanos() >= 1000000000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has nanos %d; they must be in [0, 999999999]", field, t.nanos()));
  }
  return FromTimestamp(t);
}

absl::Status CheckTimeRange(const std::optional<int64_t>& after,
                            const std::optional<int64_t>& before) {
  if (after && before && *after > *before) {
    return absl::InvalidArgumentError("created_after is later than created_before");
  }
  return absl::OkStatus();
}

std::string ToStoredJson(const google::protobuf::Message& message) {
  // Fails only for invalid UTF-8 in a string field; the fields stored here
  // (names, hashes, versions) were checked when they came in.
  absl::StatusOr<std::string> out = PrintProtoJson(message);
  return out.ok() ? *std::move(out) : std::string("{}");
}

std::string SpecToJson(const v1::AuditSpec& spec) { return ToStoredJson(spec); }

absl::Status ProvenanceFromJson(const std::string& json, google::protobuf::Message* out) {
  out->Clear();
  if (json.empty()) return absl::OkStatus();
  // A newer version's fields are skipped.
  const absl::Status st = ParseProtoJson(json, out, UnknownFields::kIgnore);
  if (!st.ok()) {
    return absl::DataLossError(absl::StrCat("stored provenance: ", st.message()));
  }
  return absl::OkStatus();
}

std::string StatusText(const absl::Status& status) {
  return absl::StrFormat("%s: %s", absl::StatusCodeToString(status.code()), status.message());
}

}  // namespace fca::runtime
