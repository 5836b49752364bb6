#include "common/proto_json.h"

#include <google/protobuf/descriptor.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/json.h"

namespace fca {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The fast path of ParseProtoJson (internal::ReadProtoJsonFast). protobuf 3.21's
// JsonStringToMessage costs 20-40 us for a stored AuditSpec (it converts the descriptor to a
// google.protobuf.Type and streams through an object writer on every call),
// which made a ListJobs page of 500 take 20+ ms. The messages fca stores
// and most requests it takes are flat: scalars, strings, enums, repeated
// ones and nested messages of the same kind. Those are read here through
// reflection; anything else (a well-known type, a map, a oneof, bytes, a
// null, a name or a value this reader is not sure of, any error) returns
// false and protobuf's parser reads the document instead, so the result
// and every error message are protobuf's. tests/common/proto_json_test.cc
// checks both paths agree.
class FastReader {
 public:
  bool Read(const json::Value& object, Message* message, int depth) {
    if (!object.is_object() || depth > kMaxDepth) return false;
    const Descriptor* type = message->GetDescriptor();
    const Reflection* reflection = message->GetReflection();
    std::set<int> seen;  // "job_id" and "jobId" both: protobuf decides
    for (const auto& [name, value] : object.as_object()) {
      const FieldDescriptor* field = type->FindFieldByName(name);
      if (field == nullptr) {
        field = type->FindFieldByCamelcaseName(name);
        if (field != nullptr && field->json_name() != name) field = nullptr;
      }
      if (field == nullptr || !seen.insert(field->number()).second) return false;
      if (field->is_map() || field->real_containing_oneof() != nullptr) return false;
      if (field->is_repeated()) {
        if (!value.is_array()) return false;
        for (const json::Value& item : value.as_array()) {
          if (!Add(item, field, message, reflection, depth)) return false;
        }
      } else if (!Set(value, field, message, reflection, depth)) {
        return false;
      }
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 32;

  // A JSON integer that fits T: an integer literal, or a string of
  // decimal digits with an optional '-' and no leading zero (nothing
  // SimpleAtoi would also take, spaces or '+', that protobuf might not).
  template <typename T>
  static bool Integer(const json::Value& v, T* out) {
    if (v.is_number()) {
      if (!v.is_int()) return false;
      const int64_t i = v.as_int();
      if (i < 0 ? (std::is_unsigned_v<T> || i < static_cast<int64_t>(std::numeric_limits<T>::min()))
                : static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return false;
      }
      *out = static_cast<T>(i);
      return true;
    }
    if (!v.is_string()) return false;
    const std::string& s = v.as_string();
    const size_t digits = s.size() > 0 && s[0] == '-' ? 1 : 0;
    if (s.size() == digits || s.size() > 21 || (s[digits] == '0' && s.size() > digits + 1)) {
      return false;
    }
    for (size_t i = digits; i < s.size(); ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return absl::SimpleAtoi(s, out);
  }

  static bool Double(const json::Value& v, double* out) {
    if (!v.is_number() || !std::isfinite(v.as_double())) return false;
    *out = v.is_int() ? static_cast<double>(v.as_int()) : v.as_double();
    return true;
  }

  // One value of `field` (a single field's, or one item of a repeated one)
  // through `set_*`/`add_*`: `Store` calls the right one.
  template <typename Store>
  bool Value(const json::Value& v, const FieldDescriptor* field, Store&& store) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        int32_t x;
        return Integer(v, &x) && store(x);
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t x;
        return Integer(v, &x) && store(x);
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        uint32_t x;
        return Integer(v, &x) && store(x);
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t x;
        return Integer(v, &x) && store(x);
      }
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        double x;
        return Double(v, &x) && store(x);
      }
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double x;
        if (!Double(v, &x) || std::fabs(x) > std::numeric_limits<float>::max()) return false;
        return store(static_cast<float>(x));
      }
      case FieldDescriptor::CPPTYPE_BOOL:
        return v.is_bool() && store(v.as_bool());
      case FieldDescriptor::CPPTYPE_STRING:
        // bytes are base64 in JSON; a string protobuf would refuse as
        // invalid UTF-8 goes to it for its message.
        return field->type() == FieldDescriptor::TYPE_STRING && v.is_string() &&
               json::ToValidUtf8(v.as_string()) == v.as_string() && store(v.as_string());
      case FieldDescriptor::CPPTYPE_ENUM: {
        if (!v.is_string()) return false;
        const auto* value = FindEnumValue(*field->enum_type(), v.as_string());
        return value != nullptr && store(value);
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return false;  // Set and Add read messages themselves
    }
    return false;
  }

  bool Set(const json::Value& v, const FieldDescriptor* field, Message* message,
           const Reflection* r, int depth) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      return !IsWellKnown(field) && Read(v, r->MutableMessage(message, field), depth + 1);
    }
    return Value(v, field, [&](auto x) {
      using T = decltype(x);
      if constexpr (std::is_same_v<T, int32_t>) r->SetInt32(message, field, x);
      if constexpr (std::is_same_v<T, int64_t>) r->SetInt64(message, field, x);
      if constexpr (std::is_same_v<T, uint32_t>) r->SetUInt32(message, field, x);
      if constexpr (std::is_same_v<T, uint64_t>) r->SetUInt64(message, field, x);
      if constexpr (std::is_same_v<T, double>) r->SetDouble(message, field, x);
      if constexpr (std::is_same_v<T, float>) r->SetFloat(message, field, x);
      if constexpr (std::is_same_v<T, bool>) r->SetBool(message, field, x);
      if constexpr (std::is_same_v<T, std::string>) r->SetString(message, field, x);
      if constexpr (std::is_pointer_v<T>) r->SetEnum(message, field, x);
      return true;
    });
  }

  bool Add(const json::Value& v, const FieldDescriptor* field, Message* message,
           const Reflection* r, int depth) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      return !IsWellKnown(field) && Read(v, r->AddMessage(message, field), depth + 1);
    }
    return Value(v, field, [&](auto x) {
      using T = decltype(x);
      if constexpr (std::is_same_v<T, int32_t>) r->AddInt32(message, field, x);
      if constexpr (std::is_same_v<T, int64_t>) r->AddInt64(message, field, x);
      if constexpr (std::is_same_v<T, uint32_t>) r->AddUInt32(message, field, x);
      if constexpr (std::is_same_v<T, uint64_t>) r->AddUInt64(message, field, x);
      if constexpr (std::is_same_v<T, double>) r->AddDouble(message, field, x);
      if constexpr (std::is_same_v<T, float>) r->AddFloat(message, field, x);
      if constexpr (std::is_same_v<T, bool>) r->AddBool(message, field, x);
      if constexpr (std::is_same_v<T, std::string>) r->AddString(message, field, x);
      if constexpr (std::is_pointer_v<T>) r->AddEnum(message, field, x);
      return true;
    });
  }

  // Timestamp, Duration, Struct, wrappers...: JSON forms of their own.
  static bool IsWellKnown(const FieldDescriptor* field) {
    return field->message_type()->file()->package() == "google.protobuf";
  }
};

// Calls `rename` on each enum value (a JSON string) of a document of `type`
// in place: in fields, repeated fields and map values, through nested
// messages; the well-known types (google.protobuf.*) hold none of fca's.
template <typename Rename>
void RenameEnums(json::Value& doc, const Descriptor& type, const Rename& rename, int depth) {
  if (!doc.is_object() || depth > 64) return;
  for (auto& [name, value] : doc.mutable_object()) {
    const FieldDescriptor* field = type.FindFieldByName(name);
    if (field == nullptr) field = type.FindFieldByCamelcaseName(name);
    if (field == nullptr) continue;
    const bool map = field->is_map();
    if (map) field = field->message_type()->map_value();
    const auto one = [&](json::Value& v) {
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM && v.is_string()) {
        rename(*field->enum_type(), v);
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                 field->message_type()->file()->package() != "google.protobuf") {
        RenameEnums(v, *field->message_type(), rename, depth + 1);
      }
    };
    if (map && value.is_object()) {
      for (auto& member : value.mutable_object()) one(member.second);
    } else if (value.is_array()) {
      for (json::Value& item : value.mutable_array()) one(item);
    } else {
      one(value);
    }
  }
}

// UPPER_SNAKE_CASE of a CamelCase type name, and "_": "JOB_STATE_".
std::string EnumPrefix(const google::protobuf::EnumDescriptor& type) {
  std::string out;
  for (const char c : type.name()) {
    if (absl::ascii_isupper(c) && !out.empty()) out += '_';
    out += absl::ascii_toupper(c);
  }
  return out + "_";
}

}  // namespace

std::string ShortEnumName(const google::protobuf::EnumValueDescriptor& value) {
  const std::string prefix = EnumPrefix(*value.type());
  const std::string& name = value.name();
  return absl::StartsWith(name, prefix) && name.size() > prefix.size() ? name.substr(prefix.size())
                                                                       : name;
}

const google::protobuf::EnumValueDescriptor* FindEnumValue(
    const google::protobuf::EnumDescriptor& type, std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(std::string(name));
  if (const auto* full = type.FindValueByName(upper)) return full;
  return upper.empty() ? nullptr : type.FindValueByName(EnumPrefix(type) + upper);
}

absl::StatusOr<std::string> PrintProtoJsonShortEnums(const google::protobuf::Message& message,
                                                     bool pretty) {
  absl::StatusOr<std::string> full = PrintProtoJson(message, /*pretty=*/false);
  if (!full.ok()) return full;
  absl::StatusOr<json::Value> doc = json::Parse(*full);
  if (!doc.ok())
    return absl::InternalError(absl::StrCat("cannot reread JSON: ", doc.status().message()));
  RenameEnums(
      *doc, *message.GetDescriptor(),
      [](const google::protobuf::EnumDescriptor& type, json::Value& v) {
        if (const auto* value = type.FindValueByName(v.as_string())) {
          v = json::Value::String(ShortEnumName(*value));
        }
      },
      0);
  return json::Write(*doc, pretty);
}

std::string WithFullEnumNames(std::string_view json, const google::protobuf::Descriptor& type) {
  absl::StatusOr<json::Value> doc = json::Parse(json);
  if (!doc.ok()) return std::string(json);
  bool renamed = false;
  RenameEnums(
      *doc, type,
      [&](const google::protobuf::EnumDescriptor& enum_type, json::Value& v) {
        const auto* value = FindEnumValue(enum_type, v.as_string());
        if (value != nullptr && value->name() != v.as_string()) {
          v = json::Value::String(value->name());
          renamed = true;
        }
      },
      0);
  return renamed ? json::Write(*doc) : std::string(json);
}

namespace internal {

bool ReadProtoJsonFast(std::string_view json, Message* message) {
  message->Clear();
  absl::StatusOr<json::Value> doc = json::Parse(json);
  if (doc.ok() && FastReader().Read(*doc, message, 0)) return true;
  message->Clear();
  return false;
}

}  // namespace internal

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
  if (internal::ReadProtoJsonFast(json, message)) return absl::OkStatus();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = unknown == UnknownFields::kIgnore;
  const std::string full = WithFullEnumNames(json, *message->GetDescriptor());
  const auto status = google::protobuf::util::JsonStringToMessage(full, message, options);
  if (status.ok()) return absl::OkStatus();
  // Syntax errors come with a caret line: folded into one line.
  std::string why(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  absl::StripAsciiWhitespace(&why);
  return absl::InvalidArgumentError(why.empty() ? "malformed JSON" : why);
}

}  // namespace fca
