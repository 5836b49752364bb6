#include "server/http/json_io.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/json.h"

namespace fca::http {

absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a typo must not pass silently
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  // The parser's message names the field ("bogus: Cannot find field.");
  // syntax errors come with a caret line, folded here into one line.
  std::string why(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  absl::StripAsciiWhitespace(&why);
  return absl::InvalidArgumentError(
      absl::StrFormat("the request body is not a valid %s in JSON: %s",
                      message->GetDescriptor()->full_name(), why.empty() ? "malformed" : why));
}

absl::StatusOr<std::string> PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the response as JSON: ", std::string(status.message())));
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

}  // namespace fca::http
