// The HTTP API's JSON: protobuf's proto3 JSON mapping with this API's
// options, set here once, and the error body.
//
// Printed with the proto field names (snake_case), every field present,
// int64 as strings; parsed with unknown fields refused (a typo must not
// pass silently: the message names the field). Errors are
// {"code": "NOT_FOUND", "message": "..."}, always valid UTF-8.
#ifndef FCA_SERVER_HTTP_JSON_IO_H_
#define FCA_SERVER_HTTP_JSON_IO_H_

#include <google/protobuf/message.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fca::http {

// INVALID_ARGUMENT "the request body is not a valid <message type> in JSON:
// <the parser's reason, on one line>".
[[nodiscard]] absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message);

// INTERNAL when the message cannot be written (e.g. a string field holding
// invalid UTF-8).
[[nodiscard]] absl::StatusOr<std::string> PrintJson(const google::protobuf::Message& message);

std::string ErrorJson(const absl::Status& status);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_JSON_IO_H_
