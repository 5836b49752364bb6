#include "server/worker/messages.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/proto_json.h"

namespace fca::core {

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

}  // namespace fca::core
