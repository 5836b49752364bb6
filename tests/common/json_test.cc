#include "common/json.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace fca::json {
namespace {

using ::fca::test_util::Contains;

// absl::string_view is not std::string_view in Debian's Abseil build.
Value ParseOk(std::string_view text) {
  absl::StatusOr<Value> v = Parse(text);
  EXPECT_TRUE(v.ok()) << text << " -> " << v.status();
  return v.ok() ? *std::move(v) : Value();
}

void ExpectInvalid(std::string_view text, const std::string& fragment = "") {
  absl::StatusOr<Value> v = Parse(text);
  ASSERT_FALSE(v.ok()) << "accepted: " << text;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_TRUE(Contains(v.status().message(), "at byte")) << text;
  EXPECT_TRUE(Contains(v.status().message(), fragment)) << text;
}

TEST(JsonParseTest, Scalars) {
  EXPECT_TRUE(ParseOk("null").is_null());
  EXPECT_TRUE(ParseOk("true").as_bool());
  EXPECT_FALSE(ParseOk(" false ").as_bool());
  EXPECT_EQ(ParseOk("\"hi\"").as_string(), "hi");
  EXPECT_EQ(ParseOk("0").as_int(), 0);
  EXPECT_EQ(ParseOk("-0").as_int(), 0);
  EXPECT_EQ(ParseOk("42").as_int(), 42);
  EXPECT_EQ(ParseOk("-17").as_int(), -17);
  EXPECT_DOUBLE_EQ(ParseOk("1.5").as_double(), 1.5);
  EXPECT_DOUBLE_EQ(ParseOk("-2.5e3").as_double(), -2500.0);
  EXPECT_DOUBLE_EQ(ParseOk("1E-2").as_double(), 0.01);
  EXPECT_DOUBLE_EQ(ParseOk("0.0").as_double(), 0.0);
  EXPECT_DOUBLE_EQ(ParseOk("1e+2").as_double(), 100.0);
}

TEST(JsonParseTest, IntegerVersusDouble) {
  EXPECT_TRUE(ParseOk("7").is_int());
  EXPECT_FALSE(ParseOk("7.0").is_int());
  EXPECT_FALSE(ParseOk("7e0").is_int());
  EXPECT_TRUE(ParseOk("7.0").is_number());
}

TEST(JsonParseTest, ExactInt64) {
  // 2^53 + 1 is not representable as a double.
  Value v = ParseOk("9007199254740993");
  ASSERT_TRUE(v.is_int());
  EXPECT_EQ(v.as_int(), 9007199254740993LL);
  Value max = ParseOk("9223372036854775807");
  ASSERT_TRUE(max.is_int());
  EXPECT_EQ(max.as_int(), std::numeric_limits<int64_t>::max());
  Value min = ParseOk("-9223372036854775808");
  ASSERT_TRUE(min.is_int());
  EXPECT_EQ(min.as_int(), std::numeric_limits<int64_t>::min());
  // One past the int64 range stays a number, but not an integer.
  Value big = ParseOk("9223372036854775808");
  EXPECT_TRUE(big.is_number());
  EXPECT_FALSE(big.is_int());
  EXPECT_DOUBLE_EQ(big.as_double(), 9223372036854775808.0);
  EXPECT_FALSE(ParseOk("-9223372036854775809").is_int());
}

TEST(JsonParseTest, ExtremeDoubles) {
  EXPECT_DOUBLE_EQ(ParseOk("1e-400").as_double(), 0.0);
  EXPECT_DOUBLE_EQ(ParseOk("1.7976931348623157e308").as_double(),
                   std::numeric_limits<double>::max());
  ExpectInvalid("1e400", "out of the range");
  ExpectInvalid("-1e400", "out of the range");
}

TEST(JsonParseTest, ArraysAndObjects) {
  Value v = ParseOk(R"( { "a" : [1, 2.5, "x", null, true, {"b": []}], "c": {} } )");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.as_object().size(), 2u);
  EXPECT_EQ(v.as_object()[0].first, "a");
  EXPECT_EQ(v.as_object()[1].first, "c");
  const Value* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->is_array());
  const Array& items = a->as_array();
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[0].as_int(), 1);
  EXPECT_DOUBLE_EQ(items[1].as_double(), 2.5);
  EXPECT_EQ(items[2].as_string(), "x");
  EXPECT_TRUE(items[3].is_null());
  EXPECT_TRUE(items[4].as_bool());
  ASSERT_TRUE(items[5].is_object());
  EXPECT_TRUE(items[5].Find("b")->as_array().empty());
  EXPECT_TRUE(v.Find("c")->as_object().empty());
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(items[0].Find("a"), nullptr);  // not an object
  EXPECT_TRUE(ParseOk("[]").as_array().empty());
  EXPECT_TRUE(ParseOk("\t\r\n[ ]\n").is_array());
}

TEST(JsonParseTest, StringEscapes) {
  EXPECT_EQ(ParseOk(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(ParseOk(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(ParseOk(R"("\u0000")").as_string(), std::string(1, '\0'));
  // U+1F600 as a surrogate pair becomes four UTF-8 bytes.
  EXPECT_EQ(ParseOk(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ParseOk(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");
  // Raw UTF-8 passes through unchanged.
  EXPECT_EQ(ParseOk("\"\xC4\xA0hello \xF0\x9F\x98\x80\"").as_string(),
            "\xC4\xA0hello \xF0\x9F\x98\x80");
}

TEST(JsonParseTest, RejectsBadEscapes) {
  ExpectInvalid(R"("\x")", "escape");
  ExpectInvalid(R"("\a")", "escape");
  ExpectInvalid(R"("\u12")", "\\u escape");
  ExpectInvalid(R"("\u12G4")", "hex");
  ExpectInvalid(R"("\ud83d")", "surrogate");
  ExpectInvalid(R"("\ud83dx")", "surrogate");
  ExpectInvalid(R"("\ud83d\u0041")", "surrogate");
  ExpectInvalid(R"("\ude00")", "surrogate");
  ExpectInvalid("\"\\", "escape");
}

TEST(JsonParseTest, RejectsControlCharsAndBadUtf8) {
  ExpectInvalid("\"a\nb\"", "control character");
  ExpectInvalid(std::string("\"a\0b\"", 5), "control character");
  ExpectInvalid("\"\x1f\"", "control character");
  ExpectInvalid("\"\xC3\"", "UTF-8");              // truncated sequence
  ExpectInvalid("\"\xC0\xAF\"", "UTF-8");          // overlong '/'
  ExpectInvalid("\"\xED\xA0\x80\"", "UTF-8");      // encoded surrogate
  ExpectInvalid("\"\xF4\x90\x80\x80\"", "UTF-8");  // beyond U+10FFFF
  ExpectInvalid("\"\xFF\"", "UTF-8");
  ExpectInvalid("\"abc", "unterminated");
}

TEST(JsonParseTest, RejectsMalformedNumbers) {
  ExpectInvalid("01", "leading zeros");
  ExpectInvalid("-01", "leading zeros");
  ExpectInvalid("00");
  ExpectInvalid("1.", "decimal point");
  ExpectInvalid(".5");
  ExpectInvalid("1e", "exponent");
  ExpectInvalid("1e+", "exponent");
  ExpectInvalid("-");
  ExpectInvalid("+1");
  ExpectInvalid("0x10");
  ExpectInvalid("NaN");
  ExpectInvalid("Infinity");
  ExpectInvalid("-Infinity");
  ExpectInvalid("[nan]");
}

TEST(JsonParseTest, RejectsStructuralErrors) {
  ExpectInvalid("", "end of input");
  ExpectInvalid("   ", "end of input");
  ExpectInvalid("[1, 2", "end of input");
  ExpectInvalid("[1 2]", "expected ',' or ']'");
  ExpectInvalid("[1,]");
  ExpectInvalid("[,1]");
  ExpectInvalid("{\"a\" 1}", "':'");
  ExpectInvalid("{\"a\": 1,}", "string key");
  ExpectInvalid("{a: 1}", "string key");
  ExpectInvalid("{\"a\": 1", "end of input");
  ExpectInvalid("{'a': 1}");
  ExpectInvalid("tru", "literal");
  ExpectInvalid("nul");
  ExpectInvalid("True");
  ExpectInvalid("[1] x", "trailing");
  ExpectInvalid("{} {}", "trailing");
  ExpectInvalid("1 2", "trailing");
  ExpectInvalid("\"a\" \"b\"", "trailing");
}

TEST(JsonParseTest, ErrorNamesByteOffset) {
  absl::StatusOr<Value> v = Parse("[1, 2, x]");
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(Contains(v.status().message(), "at byte 7"));
}

TEST(JsonParseTest, RejectsDuplicateKeys) {
  ExpectInvalid(R"({"a": 1, "a": 2})", "duplicate object key 'a'");
  ExpectInvalid(R"({"a": 1, "b": {"x": 1, "x": 1}})", "duplicate object key 'x'");
  // The large-object path (sorted check) too, with escaped spellings of a key.
  std::string big = "{";
  for (int i = 0; i < 100; ++i) absl::StrAppend(&big, "\"k", i, "\": ", i, ", ");
  std::string dup = big + R"("\u006b42": 0})";
  absl::StatusOr<Value> v = Parse(dup);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(Contains(v.status().message(), "duplicate object key 'k42'"));
  EXPECT_TRUE(Contains(v.status().message(), absl::StrCat("at byte ", big.size())));
  big += "\"last\": 1}";
  EXPECT_EQ(ParseOk(big).as_object().size(), 101u);
}

TEST(JsonParseTest, DepthLimit) {
  ParseOptions options;
  options.max_depth = 3;
  EXPECT_TRUE(Parse("[[[1]]]", options).ok());
  EXPECT_TRUE(Parse(R"({"a":[{}]})", options).ok());
  absl::StatusOr<Value> v = Parse("[[[[1]]]]", options);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(v.status().message(), "nesting deeper than 3"));
  EXPECT_FALSE(Parse(R"({"a":{"b":{"c":{}}}})", options).ok());
}

TEST(JsonParseTest, DeepNestingDoesNotOverflowStack) {
  const std::string arrays(100000, '[');
  absl::StatusOr<Value> v = Parse(arrays);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(v.status().message(), "nesting deeper than 128"));
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  EXPECT_EQ(Parse(objects).status().code(), absl::StatusCode::kInvalidArgument);
  // Exactly at the default limit is fine.
  EXPECT_TRUE(Parse(std::string(128, '[') + std::string(128, ']')).ok());
  EXPECT_FALSE(Parse(std::string(129, '[') + std::string(129, ']')).ok());
}

TEST(ToValidUtf8Test, KeepsWellFormedTextAndMarksEachBadByte) {
  EXPECT_EQ(ToValidUtf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(ToValidUtf8(std::string("a\xFF") + "b"), "a?b");
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), "??");            // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), "???");       // a UTF-16 surrogate
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), "????");  // past U+10FFFF
  EXPECT_EQ(ToValidUtf8("end\xE2\x82"), "end??");      // truncated
  const std::string written = Write(Value::String(ToValidUtf8("x\x80y")));
  EXPECT_EQ(written, "\"x?y\"");
  EXPECT_TRUE(Parse(written).ok());
}

TEST(JsonWriteTest, CompactAndPretty) {
  Value v = Value::MakeObject();
  v.Set("name", Value::String("a\"b\\c\n\x01"));
  v.Set("n", Value::Int(-5));
  v.Set("list", Value::MakeArray({Value::Bool(true), Value::Null(), Value::Number(0.5)}));
  v.Set("empty", Value::MakeObject());
  EXPECT_EQ(Write(v), R"({"name":"a\"b\\c\n\u0001","n":-5,"list":[true,null,0.5],"empty":{}})");
  EXPECT_EQ(Write(v, /*pretty=*/true),
            "{\n  \"name\": \"a\\\"b\\\\c\\n\\u0001\",\n  \"n\": -5,\n  \"list\": [\n"
            "    true,\n    null,\n    0.5\n  ],\n  \"empty\": {}\n}");
  // Set replaces an existing member in place.
  v.Set("n", Value::Int(6));
  EXPECT_EQ(v.as_object()[1].second.as_int(), 6);
  EXPECT_EQ(v.as_object().size(), 4u);
}

TEST(JsonWriteTest, Numbers) {
  EXPECT_EQ(Write(Value::Int(9007199254740993LL)), "9007199254740993");
  EXPECT_EQ(Write(Value::Int(std::numeric_limits<int64_t>::min())), "-9223372036854775808");
  EXPECT_EQ(Write(Value::Number(std::nan(""))), "null");
  EXPECT_EQ(Write(Value::Number(std::numeric_limits<double>::infinity())), "null");
  EXPECT_EQ(Write(Value::Number(-std::numeric_limits<double>::infinity())), "null");
  // An integral double stays a double when read back.
  EXPECT_EQ(Write(Value::Number(2.0)), "2.0");
  EXPECT_FALSE(ParseOk(Write(Value::Number(2.0))).is_int());
  for (double d : {0.1, 1.0 / 3.0, 6.02214076e23, -1e-300, 123456789.123456789,
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
                   std::numeric_limits<double>::denorm_min()}) {
    const Value back = ParseOk(Write(Value::Number(d)));
    EXPECT_EQ(back.as_double(), d) << Write(Value::Number(d));
  }
}

TEST(JsonWriteTest, RoundTrip) {
  const std::string text =
      R"({"s":"\u00e9\ud83d\ude00 tab\t","i":9007199254740993,"neg":-1,"d":-0.125,)"
      R"("arr":[[],{},[1,[2,[3]]]],"t":true,"f":false,"z":null,"ctl":"\u001f"})";
  Value v = ParseOk(text);
  const std::string compact = Write(v);
  Value again = ParseOk(compact);
  EXPECT_EQ(Write(again), compact);
  EXPECT_EQ(Write(ParseOk(Write(v, /*pretty=*/true))), compact);
  EXPECT_EQ(again.Find("i")->as_int(), 9007199254740993LL);
  EXPECT_EQ(again.Find("s")->as_string(), "\xC3\xA9\xF0\x9F\x98\x80 tab\t");
  EXPECT_EQ(again.Find("ctl")->as_string(), "\x1f");
  EXPECT_DOUBLE_EQ(again.Find("d")->as_double(), -0.125);
}

TEST(JsonValueTest, CopiesDoNotShareMutations) {
  Value a = Value::MakeArray({Value::Int(1)});
  Value b = a;
  b.mutable_array().push_back(Value::Int(2));
  EXPECT_EQ(a.as_array().size(), 1u);
  EXPECT_EQ(b.as_array().size(), 2u);
  Value o = Value::MakeObject();
  o.Set("x", Value::Int(1));
  Value p = o;
  p.Set("x", Value::Int(2));
  EXPECT_EQ(o.Find("x")->as_int(), 1);
  EXPECT_EQ(p.Find("x")->as_int(), 2);
}

TEST(JsonGetterTest, TypedGetters) {
  Value v = ParseOk(R"({"i": 3, "d": 2.5, "s": "x", "b": true, "di": 4.0, "n": null})");
  EXPECT_EQ(*GetInt(v, "i"), 3);
  EXPECT_DOUBLE_EQ(*GetDouble(v, "d"), 2.5);
  EXPECT_DOUBLE_EQ(*GetDouble(v, "i"), 3.0);  // an integer is a number
  EXPECT_EQ(*GetString(v, "s"), "x");
  EXPECT_TRUE(*GetBool(v, "b"));

  auto expect_error = [](const absl::Status& s, absl::string_view message) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), message);
  };
  expect_error(GetInt(v, "missing").status(), "field 'missing' is missing");
  expect_error(GetDouble(v, "missing").status(), "field 'missing' is missing");
  expect_error(GetString(v, "missing").status(), "field 'missing' is missing");
  expect_error(GetBool(v, "missing").status(), "field 'missing' is missing");
  expect_error(GetInt(v, "d").status(), "field 'd' must be an integer");
  expect_error(GetInt(v, "di").status(), "field 'di' must be an integer");
  expect_error(GetInt(v, "s").status(), "field 's' must be an integer");
  expect_error(GetDouble(v, "s").status(), "field 's' must be a number");
  expect_error(GetString(v, "i").status(), "field 'i' must be a string");
  expect_error(GetBool(v, "n").status(), "field 'n' must be a boolean");
  EXPECT_EQ(GetInt(Value::MakeArray(), "i").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonParseTest, LargeDocumentIsFast) {
  // Shaped like tokenizer.json: a large vocab object plus a merges array.
  std::string text = R"({"model":{"vocab":{)";
  for (int i = 0; i < 60000; ++i) {
    if (i > 0) text += ",";
    absl::StrAppend(&text, "\"\\u0120tok", i, "_\xC4\xA0\": ", i);
  }
  text += R"(},"merges":[)";
  for (int i = 0; i < 50000; ++i) {
    if (i > 0) text += ",";
    absl::StrAppend(&text, "\"a", i, " b", i, "\"");
  }
  text += "]}}";
  ASSERT_GT(text.size(), 2000000u);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Value> v = Parse(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Find("model")->Find("vocab")->as_object().size(), 60000u);
  EXPECT_LT(seconds, 1.0);
}

}  // namespace
}  // namespace fca::json
