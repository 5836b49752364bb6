#include "common/proto_json.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace fca {

google::protobuf::util::JsonPrintOptions ProtoJsonPrintOptions(bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  return options;
}

absl::StatusOr<std::string> PrintProtoJson(const google::protobuf::Message& message, bool pretty) {
  std::string out;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &out, ProtoJsonPrintOptions(pretty));
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot write ", message.GetDescriptor()->full_name(),
                                            " as JSON: ", std::string(status.message())));
  }
  return out;
}

absl::Status ParseProtoJson(std::string_view json, google::protobuf::Message* message,
                            UnknownFields unknown) {
  message->Clear();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = unknown == UnknownFields::kIgnore;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  // Syntax errors come with a caret line: folded into one line.
  std::string why(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  absl::StripAsciiWhitespace(&why);
  return absl::InvalidArgumentError(why.empty() ? "malformed JSON" : why);
}

}  // namespace fca
