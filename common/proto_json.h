// The one JSON dialect of fca: protobuf's proto3 JSON mapping with one set
// of options, used by everything that writes JSON (the CLI's
// --format=json, `fca jobs show`, manifests, `fca report --save_json`,
// `fca compare --format=json`, the HTTP gateway, the stored specs and
// provenance). docs/api.md "JSON" documents it for users.
//
// Printed:
//   - field names as in the .proto (snake_case: `job_id`, not `jobId`);
//   - every field present, zeros, "" and false included (a layer 0 or a
//     0.0 penalty must not vanish from a reader's table); a proto3
//     `optional` field that is unset stays absent (absent means unset);
//   - enums by name ("JOB_STATE_SUCCEEDED");
//   - int64/uint64 as decimal strings ("42"), as the proto3 JSON spec
//     says: JavaScript's numbers lose integers above 2^53, so readers get
//     the exact value and parse it; int32 and doubles are JSON numbers.
// Parsed: both spellings of a name (`job_id` and `jobId`, so manifests
// written before this dialect still load), int64 as a string or a number.
#ifndef FCA_COMMON_PROTO_JSON_H_
#define FCA_COMMON_PROTO_JSON_H_

#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fca {

// The options above; `pretty` adds newlines and two-space indents.
google::protobuf::util::JsonPrintOptions ProtoJsonPrintOptions(bool pretty);

// The message in fca's JSON. INTERNAL when it cannot be written (a string
// field holding invalid UTF-8).
[[nodiscard]] absl::StatusOr<std::string> PrintProtoJson(const google::protobuf::Message& message,
                                                         bool pretty = false);

// Whether a field the message does not have is an error (input a person
// wrote: a typo must not pass silently) or skipped (stored JSON written by
// a newer version).
enum class UnknownFields { kRefuse, kIgnore };

// Parses `json` into `message` (cleared first). INVALID_ARGUMENT with the
// parser's reason on one line ("bogus: Cannot find field."). Flat messages
// (scalars, strings, enums, nested and repeated ones: the stored specs and
// provenance) are read by a reflection reader several times faster than
// protobuf 3.21's parser; every other document, and every error, is
// protobuf's (proto_json.cc ReadProtoJsonFast).
[[nodiscard]] absl::Status ParseProtoJson(std::string_view json, google::protobuf::Message* message,
                                          UnknownFields unknown = UnknownFields::kRefuse);

// ------------------------------------------------------------ enum names
//
// People read an enum value by its short name: "SUCCEEDED" for
// JOB_STATE_SUCCEEDED, "OWNER" for PROJECT_ROLE_OWNER (the prefix is the enum
// type's name in UPPER_SNAKE_CASE and "_", as the proto style guide spells
// it). The CLI's output, the HTTP gateway's JSON and (python/fca/enums.py)
// the Python frames print it; input takes either spelling, in any case. The
// wire, and the JSON fca stores (specs, manifests), keep the full names.

// "SUCCEEDED" for JOB_STATE_SUCCEEDED; a value without the prefix as it is.
std::string ShortEnumName(const google::protobuf::EnumValueDescriptor& value);
// The value of `type` named `name` in full or short, in any case; nullptr
// when there is none.
const google::protobuf::EnumValueDescriptor* FindEnumValue(
    const google::protobuf::EnumDescriptor& type, std::string_view name);
// PrintProtoJson with every enum value by its short name (the HTTP API's
// replies and events, the CLI's JSON).
[[nodiscard]] absl::StatusOr<std::string> PrintProtoJsonShortEnums(
    const google::protobuf::Message& message, bool pretty = false);
// ParseProtoJson reads both spellings: its fast path looks names up with
// FindEnumValue, and before protobuf's own parser (which knows full names
// only) this rewrites, in a document of `type`, every enum value given by
// another spelling to its full name. Text that is not JSON comes back as it
// is, for the parser to report.
std::string WithFullEnumNames(std::string_view json, const google::protobuf::Descriptor& type);

namespace internal {
// ParseProtoJson's fast path alone: true when it read `json` into
// `message`, false (message cleared) when protobuf's parser must. Exposed
// for tests/common/proto_json_test.cc, which checks the two agree.
[[nodiscard]] bool ReadProtoJsonFast(std::string_view json, google::protobuf::Message* message);
}  // namespace internal

}  // namespace fca

#endif  // FCA_COMMON_PROTO_JSON_H_
