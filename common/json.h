// A small, strict JSON reader and writer (RFC 8259).
//
// Used for safetensors headers, config.json, index files, tokenizer.json and
// job manifests. Parsing never throws and never crashes on malformed input:
// every problem is an INVALID_ARGUMENT naming the byte offset.
#ifndef FCA_COMMON_JSON_H_
#define FCA_COMMON_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::json {

class Value;
using Array = std::vector<Value>;
// Object members keep their source order (tokenizer.json and safetensors
// headers are order-sensitive for humans, not for us, but writing back in
// the same order keeps diffs readable). Duplicate keys are rejected.
using Object = std::vector<std::pair<std::string, Value>>;

enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

// A JSON value. Numbers keep both a double and, when the literal is an
// integer that fits, the exact int64 (safetensors offsets exceed 2^53 only
// for absurd files, but we must not round them silently).
class Value {
 public:
  Value();  // null
  static Value Null();
  static Value Bool(bool b);
  static Value Number(double d);
  static Value Int(int64_t i);
  static Value String(std::string s);
  static Value MakeArray(Array a = {});
  static Value MakeObject(Object o = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // True when the number was written as an integer literal that fits int64.
  bool is_int() const { return type_ == Type::kNumber && is_int_; }

  // Accessors; calling one on the wrong type is a programming error (checked
  // with assert in debug builds, returns a default value otherwise).
  bool as_bool() const;
  double as_double() const;
  int64_t as_int() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& mutable_array();
  const Object& as_object() const;
  Object& mutable_object();

  // Object lookup: nullptr when this is not an object or the key is absent.
  const Value* Find(std::string_view key) const;
  // Appends or replaces a member (this must be an object).
  void Set(std::string key, Value v);

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
};

struct ParseOptions {
  // Nesting deeper than this is rejected (protects the stack).
  int max_depth = 128;
};

// Parses a complete JSON document; trailing non-space text is an error.
[[nodiscard]] absl::StatusOr<Value> Parse(std::string_view text, const ParseOptions& options = {});

// `text` with every byte that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates, code points past U+10FFFF, truncated
// sequences) replaced by '?': what Write needs for valid JSON when the text
// comes from elsewhere (an error message quoting a client's bytes).
std::string ToValidUtf8(std::string_view text);

// Serializes compactly (no spaces) or with two-space indentation.
std::string Write(const Value& v, bool pretty = false);

// Typed getters for reading config-like objects with good messages:
// "config.json: field 'd_model' must be a positive integer".
[[nodiscard]] absl::StatusOr<int64_t> GetInt(const Value& obj, std::string_view key);
[[nodiscard]] absl::StatusOr<double> GetDouble(const Value& obj, std::string_view key);
[[nodiscard]] absl::StatusOr<std::string> GetString(const Value& obj, std::string_view key);
[[nodiscard]] absl::StatusOr<bool> GetBool(const Value& obj, std::string_view key);

}  // namespace fca::json

#endif  // FCA_COMMON_JSON_H_
