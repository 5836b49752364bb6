// Fuzzes common/json: Parse on arbitrary bytes. Every parsed document must
// write back to text that parses to the same document (the writer's output
// is a fixed point after one round), the typed getters must not misbehave on
// any member, and a depth limit may only turn a success into an error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/json.h"
#include "fuzz/fuzz_check.h"

namespace {

using fca::json::Value;

// Calls every accessor the value's type allows, recursively.
void Walk(const Value& v) {
  switch (v.type()) {
    case fca::json::Type::kNull:
      break;
    case fca::json::Type::kBool:
      (void)v.as_bool();
      break;
    case fca::json::Type::kNumber:
      (void)v.as_double();
      (void)v.as_int();
      break;
    case fca::json::Type::kString:
      (void)v.as_string().size();
      break;
    case fca::json::Type::kArray:
      for (const Value& item : v.as_array()) Walk(item);
      break;
    case fca::json::Type::kObject:
      for (const auto& [key, member] : v.as_object()) {
        FUZZ_CHECK(v.Find(key) == &member);  // keys are unique
        (void)fca::json::GetInt(v, key);
        (void)fca::json::GetDouble(v, key);
        (void)fca::json::GetString(v, key);
        (void)fca::json::GetBool(v, key);
        Walk(member);
      }
      break;
  }
}

void CheckRoundTrip(const Value& v, bool pretty) {
  const std::string text = fca::json::Write(v, pretty);
  const auto again = fca::json::Parse(text);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(fca::json::Write(*again, pretty) == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = fca::json::Parse(text);
  fca::json::ParseOptions shallow;
  shallow.max_depth = 8;  // what safetensors headers use
  const auto parsed_shallow = fca::json::Parse(text, shallow);
  if (parsed_shallow.ok()) FUZZ_CHECK(parsed.ok());
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  if (parsed_shallow.ok()) {
    FUZZ_CHECK(fca::json::Write(*parsed_shallow) == fca::json::Write(*parsed));
  }
  Walk(*parsed);
  CheckRoundTrip(*parsed, /*pretty=*/false);
  CheckRoundTrip(*parsed, /*pretty=*/true);
  return 0;
}
