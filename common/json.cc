// Long file: fca's one JSON parser and writer, whose grammar reads best in one place.
#include "common/json.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace fca::json {

// ---------------------------------------------------------------------------
// Value

Value::Value() = default;

Value Value::Null() { return Value(); }

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Number(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kNumber;
  v.is_int_ = true;
  v.int_ = i;
  v.number_ = static_cast<double>(i);
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}

Value Value::MakeArray(Array a) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::make_shared<Array>(std::move(a));
  return v;
}

Value Value::MakeObject(Object o) {
  Value v;
  v.type_ = Type::kObject;
  v.object_ = std::make_shared<Object>(std::move(o));
  return v;
}

bool Value::as_bool() const {
  assert(is_bool());
  return is_bool() && bool_;
}

double Value::as_double() const {
  assert(is_number());
  return is_number() ? number_ : 0.0;
}

int64_t Value::as_int() const {
  assert(is_number());
  if (!is_number()) return 0;
  if (is_int_) return int_;
  // Converting an out-of-range (or NaN) double is undefined behaviour.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (!(number_ >= -kTwo63 && number_ < kTwo63)) return 0;
  return static_cast<int64_t>(number_);
}

const std::string& Value::as_string() const {
  assert(is_string());
  static const std::string* const kEmpty = new std::string();
  return is_string() ? string_ : *kEmpty;
}

const Array& Value::as_array() const {
  assert(is_array());
  static const Array* const kEmpty = new Array();
  return is_array() && array_ ? *array_ : *kEmpty;
}

// Copies of a Value share their array/object storage; mutation clones it
// first so that a copy never changes behind another copy's back.
Array& Value::mutable_array() {
  assert(is_array());
  if (!is_array()) {
    thread_local Array scratch;
    scratch.clear();
    return scratch;
  }
  if (!array_) {
    array_ = std::make_shared<Array>();
  } else if (array_.use_count() > 1) {
    array_ = std::make_shared<Array>(*array_);
  }
  return *array_;
}

const Object& Value::as_object() const {
  assert(is_object());
  static const Object* const kEmpty = new Object();
  return is_object() && object_ ? *object_ : *kEmpty;
}

Object& Value::mutable_object() {
  assert(is_object());
  if (!is_object()) {
    thread_local Object scratch;
    scratch.clear();
    return scratch;
  }
  if (!object_) {
    object_ = std::make_shared<Object>();
  } else if (object_.use_count() > 1) {
    object_ = std::make_shared<Object>(*object_);
  }
  return *object_;
}

const Value* Value::Find(std::string_view key) const {
  if (!is_object() || !object_) return nullptr;
  for (const auto& [k, v] : *object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::Set(std::string key, Value v) {
  assert(is_object());
  if (!is_object()) return;
  Object& members = mutable_object();
  for (auto& [k, existing] : members) {
    if (k == key) {
      existing = std::move(v);
      return;
    }
  }
  members.emplace_back(std::move(key), std::move(v));
}

// ---------------------------------------------------------------------------
// Parser

namespace {

// Two-character escapes: kEscapeLetters[i] after '\\' stands for
// kEscapedChars[i].
constexpr std::string_view kEscapeLetters = "\"\\/bfnrt";
constexpr std::string_view kEscapedChars = "\"\\/\b\f\n\r\t";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& options)
      : text_(text), max_depth_(options.max_depth) {}

  absl::StatusOr<Value> ParseDocument() {
    Value v;
    SkipSpace();
    if (!ParseValue(v, 0)) return error_;
    SkipSpace();
    if (pos_ != text_.size()) {
      return Error(pos_, "unexpected trailing text after the document");
    }
    return v;
  }

 private:
  // Records the first error; returns false so callers can `return Error(..)`.
  bool Fail(size_t offset, std::string_view what) {
    error_ =
        absl::InvalidArgumentError(absl::StrFormat("invalid JSON at byte %d: %s", offset, what));
    return false;
  }
  absl::Status Error(size_t offset, std::string_view what) {
    Fail(offset, what);
    return error_;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  }

  bool ParseValue(Value& out, int depth) {
    if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input, expected a value");
    const char c = text_[pos_];
    switch (c) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"': {
        std::string s;
        if (!ParseString(s)) return false;
        out = Value::String(std::move(s));
        return true;
      }
      case 't':
        if (!ParseLiteral("true")) return false;
        out = Value::Bool(true);
        return true;
      case 'f':
        if (!ParseLiteral("false")) return false;
        out = Value::Bool(false);
        return true;
      case 'n':
        if (!ParseLiteral("null")) return false;
        out = Value::Null();
        return true;
      default:
        if (c == '-' || IsDigit(c)) return ParseNumber(out);
        return Fail(pos_, UnexpectedChar(c, "a value"));
    }
  }

  static std::string UnexpectedChar(char c, std::string_view expected) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      return absl::StrFormat("unexpected character '%c', expected %s", c, expected);
    }
    return absl::StrFormat("unexpected byte 0x%02x, expected %s", u, expected);
  }

  bool ParseLiteral(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail(pos_, absl::StrFormat("invalid literal, expected '%s'", word));
    }
    pos_ += word.size();
    return true;
  }

  bool ParseArray(Value& out, int depth) {
    if (depth > max_depth_) {
      return Fail(pos_, absl::StrCat("nesting deeper than ", max_depth_, " levels"));
    }
    ++pos_;  // '['
    Array items;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      out = Value::MakeArray(std::move(items));
      return true;
    }
    while (true) {
      SkipSpace();
      items.emplace_back();
      if (!ParseValue(items.back(), depth)) return false;
      SkipSpace();
      if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input inside an array");
      const char c = text_[pos_++];
      if (c == ']') break;
      if (c != ',') return Fail(pos_ - 1, UnexpectedChar(c, "',' or ']'"));
    }
    out = Value::MakeArray(std::move(items));
    return true;
  }

  bool ParseObject(Value& out, int depth) {
    if (depth > max_depth_) {
      return Fail(pos_, absl::StrCat("nesting deeper than ", max_depth_, " levels"));
    }
    ++pos_;  // '{'
    Object members;
    std::vector<size_t> key_offsets;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      out = Value::MakeObject(std::move(members));
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input inside an object");
      if (text_[pos_] != '"') return Fail(pos_, UnexpectedChar(text_[pos_], "a string key"));
      key_offsets.push_back(pos_);
      members.emplace_back();
      if (!ParseString(members.back().first)) return false;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') {
        return Fail(pos_, "expected ':' after an object key");
      }
      ++pos_;
      SkipSpace();
      if (!ParseValue(members.back().second, depth)) return false;
      SkipSpace();
      if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input inside an object");
      const char c = text_[pos_++];
      if (c == '}') break;
      if (c != ',') return Fail(pos_ - 1, UnexpectedChar(c, "',' or '}'"));
    }
    if (!CheckUniqueKeys(members, key_offsets)) return false;
    out = Value::MakeObject(std::move(members));
    return true;
  }

  // Sorting views of the keys is O(n log n) without per-key allocation, which
  // matters for the 50k-entry vocabularies in tokenizer.json.
  bool CheckUniqueKeys(const Object& members, const std::vector<size_t>& offsets) {
    const size_t n = members.size();
    if (n < 2) return true;
    if (n <= 8) {
      for (size_t i = 1; i < n; ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (members[i].first == members[j].first) {
            return Fail(offsets[i], DuplicateKeyMessage(members[i].first));
          }
        }
      }
      return true;
    }
    std::vector<uint32_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const int cmp = members[a].first.compare(members[b].first);
      return cmp != 0 ? cmp < 0 : a < b;
    });
    size_t first_dup = n;
    for (size_t i = 1; i < n; ++i) {
      if (members[order[i]].first == members[order[i - 1]].first) {
        first_dup = std::min<size_t>(first_dup, order[i]);
      }
    }
    if (first_dup == n) return true;
    return Fail(offsets[first_dup], DuplicateKeyMessage(members[first_dup].first));
  }

  static std::string DuplicateKeyMessage(const std::string& key) {
    constexpr size_t kMaxShown = 64;
    std::string shown = key.size() > kMaxShown ? key.substr(0, kMaxShown) + "..." : key;
    return absl::StrCat("duplicate object key '", shown, "'");
  }

  // pos_ is at the opening quote. Runs of plain bytes are appended at once.
  bool ParseString(std::string& out) {
    const size_t open = pos_;
    ++pos_;
    const size_t n = text_.size();
    while (true) {
      const size_t run_start = pos_;
      while (pos_ < n) {
        const auto u = static_cast<unsigned char>(text_[pos_]);
        if (u == '"' || u == '\\' || u < 0x20 || u >= 0x80) break;
        ++pos_;
      }
      out.append(text_.data() + run_start, pos_ - run_start);
      if (pos_ >= n) return Fail(open, "unterminated string");
      const auto u = static_cast<unsigned char>(text_[pos_]);
      if (u == '"') {
        ++pos_;
        return true;
      }
      if (u < 0x20) {
        return Fail(pos_, absl::StrFormat("unescaped control character 0x%02x in a string", u));
      }
      if (u >= 0x80) {
        const utf8::Sequence s = utf8::DecodeAt(text_, pos_);
        if (!s.well_formed) return Fail(pos_, "invalid UTF-8 in a string");
        out.append(text_.data() + pos_, s.length);
        pos_ += s.length;
        continue;
      }
      if (!ParseEscape(out)) return false;
    }
  }

  // pos_ is at the backslash.
  bool ParseEscape(std::string& out) {
    const size_t start = pos_;
    if (pos_ + 1 >= text_.size()) return Fail(start, "unterminated escape sequence");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    if (e != 'u') {
      const size_t k = kEscapeLetters.find(e);
      if (k == std::string_view::npos) {
        return Fail(start, UnexpectedChar(e, "a valid escape character after '\\'"));
      }
      out.push_back(kEscapedChars[k]);
      return true;
    }
    uint32_t cp = 0;
    if (!ParseHex4(start, cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return Fail(start, "unpaired low surrogate in a \\u escape");
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (pos_ + 1 >= text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u') {
        return Fail(start, "high surrogate not followed by a low surrogate escape");
      }
      const size_t low_start = pos_;
      pos_ += 2;
      uint32_t low = 0;
      if (!ParseHex4(low_start, low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) {
        return Fail(low_start, "high surrogate not followed by a low surrogate escape");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    utf8::AppendUtf8(cp, &out);
    return true;
  }

  bool ParseHex4(size_t escape_start, uint32_t& cp) {
    if (pos_ + 4 > text_.size()) return Fail(escape_start, "truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = HexDigit(text_[pos_ + i]);
      if (d < 0) return Fail(escape_start, "\\u escape needs four hex digits");
      cp = cp * 16 + static_cast<uint32_t>(d);
    }
    pos_ += 4;
    return true;
  }

  bool ParseNumber(Value& out) {
    const size_t start = pos_;
    const size_t n = text_.size();
    bool negative = false;
    if (text_[pos_] == '-') {
      negative = true;
      ++pos_;
    }
    if (pos_ >= n || !IsDigit(text_[pos_])) return Fail(start, "a number needs digits");
    const size_t int_start = pos_;
    if (text_[pos_] == '0') {
      ++pos_;
      if (pos_ < n && IsDigit(text_[pos_]))
        return Fail(start, "numbers may not have leading zeros");
    } else {
      while (pos_ < n && IsDigit(text_[pos_])) ++pos_;
    }
    const size_t int_end = pos_;
    bool integral = true;
    if (pos_ < n && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= n || !IsDigit(text_[pos_]))
        return Fail(start, "a digit must follow the decimal point");
      while (pos_ < n && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < n && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < n && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= n || !IsDigit(text_[pos_]))
        return Fail(start, "a digit must follow the exponent");
      while (pos_ < n && IsDigit(text_[pos_])) ++pos_;
    }
    if (integral) {
      int64_t i = 0;
      if (ExactInt(text_.substr(int_start, int_end - int_start), negative, i)) {
        out = Value::Int(i);  // "-0" reads as the integer 0
        return true;
      }
    }
    return ParseDouble(start, out);
  }

  static bool ExactInt(std::string_view digits, bool negative, int64_t& result) {
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    uint64_t acc = 0;
    for (char c : digits) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (acc > (limit - d) / 10) return false;
      acc = acc * 10 + d;
    }
    result = negative ? static_cast<int64_t>(0 - acc) : static_cast<int64_t>(acc);
    return true;
  }

  bool ParseDouble(size_t start, Value& out) {
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    double d = 0;
    const auto [ptr, ec] = std::from_chars(first, last, d);
    if (ec == std::errc() && ptr == last) {
      out = Value::Number(d);
      return true;
    }
    if (ec == std::errc::result_out_of_range) {
      // from_chars reports underflow too; strtod tells the two apart.
      std::string copy(first, last);
      d = std::strtod(copy.c_str(), nullptr);
      if (std::isfinite(d)) {
        out = Value::Number(d);
        return true;
      }
      return Fail(start, "number is out of the range of a double");
    }
    return Fail(start, "malformed number");
  }

  std::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
  absl::Status error_;
};

// ---------------------------------------------------------------------------
// Writer

void WriteString(std::string_view s, std::string& out) {
  out.push_back('"');
  size_t run_start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u != '"' && u != '\\') continue;
    out.append(s.data() + run_start, i - run_start);
    run_start = i + 1;
    const size_t k = kEscapedChars.find(static_cast<char>(u));
    if (k != std::string_view::npos) {
      out.push_back('\\');
      out.push_back(kEscapeLetters[k]);
    } else {
      absl::StrAppendFormat(&out, "\\u%04x", u);
    }
  }
  out.append(s.data() + run_start, s.size() - run_start);
  out.push_back('"');
}

void WriteNumber(const Value& v, std::string& out) {
  if (v.is_int()) {
    absl::StrAppend(&out, v.as_int());
    return;
  }
  const double d = v.as_double();
  if (!std::isfinite(d)) {
    out.append("null");  // JSON has no NaN or Infinity.
    return;
  }
  // Shortest text that parses back to the same double; a ".0" keeps an
  // integral double from reading back as an integer literal.
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  if (ec != std::errc()) {
    absl::StrAppendFormat(&out, "%.17g", d);
    return;
  }
  const std::string_view text(buf, static_cast<size_t>(ptr - buf));
  out.append(text);
  if (text.find_first_of(".eE") == std::string_view::npos) out.append(".0");
}

void Indent(int level, std::string& out) { out.append(static_cast<size_t>(level) * 2, ' '); }

// Recursion depth is bounded by the depth of the value, which Parse limits;
// values built by hand are expected to be shallow.
void WriteValue(const Value& v, bool pretty, int level, std::string& out) {
  switch (v.type()) {
    case Type::kNull:
      out.append("null");
      return;
    case Type::kBool:
      out.append(v.as_bool() ? "true" : "false");
      return;
    case Type::kNumber:
      WriteNumber(v, out);
      return;
    case Type::kString:
      WriteString(v.as_string(), out);
      return;
    case Type::kArray: {
      const Array& items = v.as_array();
      if (items.empty()) {
        out.append("[]");
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out.push_back(',');
        if (pretty) {
          out.push_back('\n');
          Indent(level + 1, out);
        }
        WriteValue(items[i], pretty, level + 1, out);
      }
      if (pretty) {
        out.push_back('\n');
        Indent(level, out);
      }
      out.push_back(']');
      return;
    }
    case Type::kObject: {
      const Object& members = v.as_object();
      if (members.empty()) {
        out.append("{}");
        return;
      }
      out.push_back('{');
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out.push_back(',');
        if (pretty) {
          out.push_back('\n');
          Indent(level + 1, out);
        }
        WriteString(members[i].first, out);
        out.append(pretty ? ": " : ":");
        WriteValue(members[i].second, pretty, level + 1, out);
      }
      if (pretty) {
        out.push_back('\n');
        Indent(level, out);
      }
      out.push_back('}');
      return;
    }
  }
}

absl::StatusOr<const Value*> FindField(const Value& obj, std::string_view key) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot read field '%s': value is not an object", key));
  }
  const Value* v = obj.Find(key);
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' is missing", key));
  }
  return v;
}

}  // namespace

absl::StatusOr<Value> Parse(std::string_view text, const ParseOptions& options) {
  return Parser(text, options).ParseDocument();
}

std::string ToValidUtf8(std::string_view text) { return utf8::MarkIllFormedBytes(text); }

std::string Write(const Value& v, bool pretty) {
  std::string out;
  WriteValue(v, pretty, 0, out);
  return out;
}

absl::StatusOr<int64_t> GetInt(const Value& obj, std::string_view key) {
  FCA_ASSIGN_OR_RETURN(const Value* v, FindField(obj, key));
  if (!v->is_int()) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' must be an integer", key));
  }
  return v->as_int();
}

absl::StatusOr<double> GetDouble(const Value& obj, std::string_view key) {
  FCA_ASSIGN_OR_RETURN(const Value* v, FindField(obj, key));
  if (!v->is_number()) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' must be a number", key));
  }
  return v->as_double();
}

absl::StatusOr<std::string> GetString(const Value& obj, std::string_view key) {
  FCA_ASSIGN_OR_RETURN(const Value* v, FindField(obj, key));
  if (!v->is_string()) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' must be a string", key));
  }
  return v->as_string();
}

absl::StatusOr<bool> GetBool(const Value& obj, std::string_view key) {
  FCA_ASSIGN_OR_RETURN(const Value* v, FindField(obj, key));
  if (!v->is_bool()) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' must be a boolean", key));
  }
  return v->as_bool();
}

}  // namespace fca::json
