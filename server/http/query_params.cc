#include "server/http/query_params.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace fca::http {
namespace {

using google::protobuf::FieldDescriptor;

// What a query may give: a scalar, an enum, or a message whose proto3 JSON
// is a string.
bool TakesText(const FieldDescriptor& field) {
  if (field.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return !field.is_map();
  const std::string& type = field.message_type()->full_name();
  return type == "google.protobuf.Timestamp" || type == "google.protobuf.Duration";
}

absl::StatusOr<json::Value> ValueOf(const FieldDescriptor& field, const std::string& name,
                                    const std::string& text) {
  if (field.cpp_type() != FieldDescriptor::CPPTYPE_BOOL) return json::Value::String(text);
  if (text == "true" || text == "false") return json::Value::Bool(text == "true");
  return absl::InvalidArgumentError(
      absl::StrFormat("query parameter '%s' must be true or false", name));
}

}  // namespace

absl::StatusOr<std::string> QueryToJson(const google::protobuf::Descriptor& request,
                                        const QueryParams& params) {
  std::map<std::string, json::Value> fields;  // by field name: one member each
  for (const auto& [name, text] : params) {
    const FieldDescriptor* field = request.FindFieldByName(name);
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown query parameter '%s': %s has no such field",
                          json::ToValidUtf8(name.substr(0, 64)), request.name()));
    }
    if (!TakesText(*field)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "query parameter '%s' cannot be given in a query: POST the request as JSON", name));
    }
    absl::StatusOr<json::Value> value = ValueOf(*field, name, json::ToValidUtf8(text));
    if (!value.ok()) return value.status();
    auto [it, added] =
        fields.try_emplace(name, field->is_repeated() ? json::Value::MakeArray() : json::Value());
    if (field->is_repeated()) {
      it->second.mutable_array().push_back(*std::move(value));
    } else if (!added) {
      return absl::InvalidArgumentError(
          absl::StrFormat("query parameter '%s' is given more than once", name));
    } else {
      it->second = *std::move(value);
    }
  }
  json::Object object;
  for (auto& [name, value] : fields) object.emplace_back(name, std::move(value));
  return json::Write(json::Value::MakeObject(std::move(object)));
}

}  // namespace fca::http
