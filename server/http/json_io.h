// The HTTP API's JSON: fca's one JSON dialect (common/proto_json.h:
// snake_case names, every field present, int64 as strings), and the error
// body. Requests are parsed with unknown fields refused (a typo must not
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

// The HTTP status of an error code:
//   INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
//   NOT_FOUND 404, ALREADY_EXISTS 409, FAILED_PRECONDITION 409 (the state of
//   a resource forbids the call: a conflict; 412 is for conditional request
//   headers, which this API has none of), RESOURCE_EXHAUSTED 429,
//   UNIMPLEMENTED 501, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, others 500.
int HttpStatus(absl::StatusCode code);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_JSON_IO_H_
