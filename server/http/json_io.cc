#include "server/http/json_io.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/proto_json.h"

namespace fca::http {

absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message) {
  // A typo must not pass silently: the parser's message names the field
  // ("bogus: Cannot find field.").
  const absl::Status status =
      ParseProtoJson(std::string_view(json.data(), json.size()), message, UnknownFields::kRefuse);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("the request body is not a valid %s in JSON: %s",
                      message->GetDescriptor()->full_name(), status.message()));
}

absl::StatusOr<std::string> PrintJson(const google::protobuf::Message& message) {
  // Enum values by their short names ("SUCCEEDED"), as the CLI prints them.
  absl::StatusOr<std::string> out = PrintProtoJsonShortEnums(message);
  if (!out.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the response as JSON: ", out.status().message()));
  }
  return out;
}

std::string ErrorJson(const absl::Status& status) {
  json::Value error = json::Value::MakeObject();
  error.Set("code", json::Value::String(absl::StatusCodeToString(status.code())));
  error.Set("message", json::Value::String(
                           json::ToValidUtf8({status.message().data(), status.message().size()})));
  return json::Write(error);
}

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

}  // namespace fca::http
