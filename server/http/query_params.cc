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

// The field a parameter names: one of `request`'s own, else (flat
// parameters, ?job_id=7 for QueryResults' filter.job_id) a field of the one
// single, non-well-known message field that has it, returned in `parent`.
const FieldDescriptor* FindParamField(const google::protobuf::Descriptor& request,
                                      const std::string& name, const FieldDescriptor** parent) {
  *parent = nullptr;
  if (const FieldDescriptor* own = request.FindFieldByName(name)) return own;
  const FieldDescriptor* found = nullptr;
  for (int i = 0; i < request.field_count(); ++i) {
    const FieldDescriptor* outer = request.field(i);
    if (outer->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || outer->is_repeated() ||
        TakesText(*outer)) {
      continue;
    }
    const FieldDescriptor* inner = outer->message_type()->FindFieldByName(name);
    if (inner == nullptr) continue;
    if (found != nullptr) return nullptr;  // ambiguous: named by no flat parameter
    found = inner;
    *parent = outer;
  }
  return found;
}

}  // namespace

absl::StatusOr<std::string> QueryToJson(const google::protobuf::Descriptor& request,
                                        const QueryParams& params) {
  // By field name: one member each; a flat parameter's under its parent's.
  std::map<std::string, std::map<std::string, json::Value>> fields;
  for (const auto& [name, text] : params) {
    const FieldDescriptor* parent = nullptr;
    const FieldDescriptor* field = FindParamField(request, name, &parent);
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
    auto [it, added] = fields[parent == nullptr ? "" : parent->name()].try_emplace(
        name, field->is_repeated() ? json::Value::MakeArray() : json::Value());
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
  for (auto& [parent, members] : fields) {
    json::Object nested;
    for (auto& [name, value] : members) nested.emplace_back(name, std::move(value));
    if (parent.empty()) {
      for (auto& member : nested) object.push_back(std::move(member));
    } else {
      object.emplace_back(parent, json::Value::MakeObject(std::move(nested)));
    }
  }
  return json::Write(json::Value::MakeObject(std::move(object)));
}

}  // namespace fca::http
