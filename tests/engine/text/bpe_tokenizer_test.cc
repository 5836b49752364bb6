// Long file: known-answer tests of each pre-tokenizer and merge rule.
#include "server/engine/text/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/file.h"
#include "common/json.h"
#include "server/engine/text/regex_split.h"
#include "server/engine/text/unicode.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using ::fca::test_util::Contains;

using ::fca::json::Value;

const char kDataDir[] = FCA_TEST_DATA_DIR "/tokenizer";

std::vector<int32_t> Ids(const Value& array) {
  std::vector<int32_t> ids;
  for (const Value& v : array.as_array()) ids.push_back(static_cast<int32_t>(v.as_int()));
  return ids;
}

// ---------------------------------------------------------------------------
// The GPT-NeoX-20B tokenizer against the reference cases (HF tokenizers 0.22).

class BpeNeoxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto start = std::chrono::steady_clock::now();
    auto loaded = BpeTokenizer::FromFile(std::string(kDataDir) + "/tokenizer.json");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::printf("[ info     ] tokenizer.json loaded in %.3f s\n", seconds);
    tokenizer_ = loaded->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }

  static std::vector<Value> Cases() {
    std::vector<Value> cases;
    std::ifstream in(std::string(kDataDir) + "/cases.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto parsed = json::Parse(line);
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      if (parsed.ok()) cases.push_back(*parsed);
    }
    return cases;
  }

  static std::vector<int32_t> Encode(std::string_view text) {
    auto ids = tokenizer_->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>();
  }

  static BpeTokenizer* tokenizer_;
};

BpeTokenizer* BpeNeoxTest::tokenizer_ = nullptr;

TEST_F(BpeNeoxTest, NameAndVocabSize) {
  EXPECT_EQ(tokenizer_->name(), "bpe");
  EXPECT_EQ(tokenizer_->vocab_size(), 50277);
}

TEST_F(BpeNeoxTest, ReferenceCases) {
  const std::vector<Value> cases = Cases();
  ASSERT_EQ(cases.size(), 40u);
  int passed = 0;
  for (const Value& c : cases) {
    const std::string& text = c.Find("text")->as_string();
    SCOPED_TRACE(text.substr(0, 60));
    const std::vector<int32_t> expected = Ids(*c.Find("ids"));
    const std::vector<int32_t> ids = Encode(text);
    EXPECT_EQ(ids, expected);

    const Value& tokens = *c.Find("tokens");
    ASSERT_EQ(tokens.as_array().size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      auto token = tokenizer_->IdToToken(expected[i]);
      ASSERT_TRUE(token.ok()) << token.status();
      EXPECT_EQ(*token, tokens.as_array()[i].as_string());
    }

    auto decoded = tokenizer_->Decode(expected);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c.Find("decoded")->as_string());
    auto skipped = tokenizer_->Decode(expected, BpeDecodeOptions{/*skip_special_tokens=*/true});
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_EQ(*skipped, c.Find("decoded_skip_special")->as_string());

    if (c.Find("roundtrip_exact")->as_bool()) {
      auto roundtrip = tokenizer_->Decode(ids);
      ASSERT_TRUE(roundtrip.ok());
      EXPECT_EQ(*roundtrip, text);
    }
    if (ids == expected) ++passed;
  }
  std::printf("[ info     ] %d of %zu reference cases encode exactly\n", passed, cases.size());
}

TEST_F(BpeNeoxTest, AddedWhitespaceTokensAreMatchedLongestFirst) {
  EXPECT_EQ(Encode("x" + std::string(30, ' ') + "y"), (std::vector<int32_t>{89, 50254, 50272, 90}));
  EXPECT_EQ(Encode("multiple   spaces"), (std::vector<int32_t>{34263, 50275, 31748}));
  EXPECT_EQ(Encode("a<|endoftext|>b<|padding|>"), (std::vector<int32_t>{66, 0, 67, 1}));
}

TEST_F(BpeNeoxTest, NormalizesToNfcBeforeEncoding) {
  EXPECT_EQ(Encode("cafe\xCC\x81"), Encode("caf\xC3\xA9"));               // e + U+0301
  EXPECT_EQ(Encode("\xE2\x84\xAB"), Encode("\xC3\x85"));                  // U+212B -> U+00C5
  EXPECT_EQ(Encode("\xE1\x84\x80\xE1\x85\xA1"), Encode("\xEA\xB0\x80"));  // jamo -> U+AC00
  auto decoded = tokenizer_->Decode(Encode("A\xCC\x8A"));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "\xC3\x85");
}

TEST_F(BpeNeoxTest, DecodeRefusesUnknownIdsAndRepairsPartialUtf8) {
  for (int32_t bad : {-1, 50277, 1 << 30}) {
    auto decoded = tokenizer_->Decode({15, bad});
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(decoded.status().message(), "position 1"));
  }
  // "😀" is [14931, 235, 211]; without the last byte the rest is one U+FFFD.
  auto partial = tokenizer_->Decode({14931, 235});
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(*partial, "\xEF\xBF\xBD");
  auto empty = tokenizer_->Decode({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST_F(BpeNeoxTest, EncodeRefusesInvalidUtf8) {
  auto ids = tokenizer_->Encode("ok \xFF here");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ids.status().message(), "byte 3"));
}

TEST_F(BpeNeoxTest, ConcurrentEncodesAgree) {
  std::string text;
  for (const Value& c : Cases()) text += c.Find("text")->as_string() + "\n";
  const std::vector<int32_t> expected = Encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&text, &result] {
      for (int i = 0; i < 20; ++i) result = *tokenizer_->Encode(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// Reports throughput; the assertion is only a floor for broken builds.
TEST_F(BpeNeoxTest, EncodeThroughput) {
  std::string corpus;
  const std::vector<Value> cases = Cases();
  for (int round = 0; corpus.size() < (4u << 20); ++round) {
    for (const Value& c : cases) {
      // Vary the words so the cache does not see one text over and over.
      corpus += c.Find("text")->as_string() + " r" + std::to_string(round) + "\n";
    }
  }
  for (const bool warm : {false, true}) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = tokenizer_->Encode(corpus);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ids.ok());
    const double mb_per_s = corpus.size() / 1e6 / seconds;
    std::printf("[ info     ] encode (%s cache): %.1f MB/s, %zu bytes -> %zu ids\n",
                warm ? "warm" : "cold", mb_per_s, corpus.size(), ids->size());
    EXPECT_GT(mb_per_s, 0.2);
  }
}

// ---------------------------------------------------------------------------
// Hand-built tokenizers: merge order, added-token flags, refusals.

// GPT-2's byte -> character map, as UTF-8.
std::string ByteChar(int b) {
  int next = 0x100;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
    const int cp = printable ? x : next++;
    if (x == b) {
      std::string out;
      unicode::AppendUtf8(static_cast<char32_t>(cp), &out);
      return out;
    }
  }
  return "";
}

Value AddedToken(int id, const std::string& content, bool special = false) {
  Value t = Value::MakeObject();
  t.Set("id", Value::Int(id));
  t.Set("content", Value::String(content));
  t.Set("special", Value::Bool(special));
  t.Set("normalized", Value::Bool(!special));
  return t;
}

// Ids 0..255 are the bytes, then one token per merge, in order.
Value TinyTokenizer(const std::vector<std::string>& merges) {
  Value vocab = Value::MakeObject();
  for (int b = 0; b < 256; ++b) vocab.Set(ByteChar(b), Value::Int(b));
  Value merge_list = Value::MakeArray();
  int next_id = 256;
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    const std::string merged = merge.substr(0, space) + merge.substr(space + 1);
    if (vocab.Find(merged) == nullptr) vocab.Set(merged, Value::Int(next_id++));
    merge_list.mutable_array().push_back(Value::String(merge));
  }
  Value model = Value::MakeObject();
  model.Set("type", Value::String("BPE"));
  model.Set("vocab", vocab);
  model.Set("merges", merge_list);
  Value byte_level = Value::MakeObject();
  byte_level.Set("type", Value::String("ByteLevel"));
  byte_level.Set("add_prefix_space", Value::Bool(false));
  byte_level.Set("trim_offsets", Value::Bool(true));
  Value nfc = Value::MakeObject();
  nfc.Set("type", Value::String("NFC"));
  Value root = Value::MakeObject();
  root.Set("added_tokens", Value::MakeArray());
  root.Set("normalizer", nfc);
  root.Set("pre_tokenizer", byte_level);
  root.Set("post_processor", byte_level);
  root.Set("decoder", byte_level);
  root.Set("model", model);
  return root;
}

std::unique_ptr<BpeTokenizer> Load(const Value& root) {
  auto loaded = BpeTokenizer::FromJson(json::Write(root));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? std::move(*loaded) : nullptr;
}

std::vector<int32_t> EncodeWith(const BpeTokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

TEST(BpeTokenizerTest, MergesLowestRankFirstThenLeftmost) {
  // Ranks: "b c" 0 -> 256, "a b" 1 -> 257, "a bc" 2 -> 258, "x x" 3 -> 259.
  auto tokenizer = Load(TinyTokenizer({"b c", "a b", "a bc", "x x"}));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeWith(*tokenizer, "abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(EncodeWith(*tokenizer, "ab"), (std::vector<int32_t>{257}));
  EXPECT_EQ(EncodeWith(*tokenizer, "xxx"), (std::vector<int32_t>{259, 'x'}));
  EXPECT_EQ(EncodeWith(*tokenizer, "xxxx"), (std::vector<int32_t>{259, 259}));
  EXPECT_EQ(tokenizer->vocab_size(), 260);
}

TEST(BpeTokenizerTest, MergePairsAndStringsAreEquivalent) {
  Value root = TinyTokenizer({"b c", "a b", "a bc"});
  Value pairs = Value::MakeArray();
  for (const auto& [a, b] :
       std::vector<std::pair<std::string, std::string>>{{"b", "c"}, {"a", "b"}, {"a", "bc"}}) {
    pairs.mutable_array().push_back(Value::MakeArray({Value::String(a), Value::String(b)}));
  }
  Value model = *root.Find("model");
  model.Set("merges", pairs);
  root.Set("model", model);
  auto tokenizer = Load(root);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeWith(*tokenizer, "abc"), (std::vector<int32_t>{258}));
}

TEST(BpeTokenizerTest, AddedTokenFlags) {
  const int kSpace = ' ';
  Value root = TinyTokenizer({});
  auto with_flag = [&](const char* flag) {
    Value token = AddedToken(300, "<x>");
    if (flag != nullptr) token.Set(flag, Value::Bool(true));
    Value r = root;
    r.Set("added_tokens", Value::MakeArray({token}));
    return Load(r);
  };
  auto plain = with_flag(nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(EncodeWith(*plain, "a<x>b"), (std::vector<int32_t>{'a', 300, 'b'}));
  EXPECT_EQ(EncodeWith(*plain, "a <x> b"), (std::vector<int32_t>{'a', kSpace, 300, kSpace, 'b'}));

  auto single_word = with_flag("single_word");
  ASSERT_NE(single_word, nullptr);
  EXPECT_EQ(EncodeWith(*single_word, "a<x>b"), (std::vector<int32_t>{'a', '<', 'x', '>', 'b'}));
  EXPECT_EQ(EncodeWith(*single_word, "a <x>."), (std::vector<int32_t>{'a', kSpace, 300, '.'}));

  auto lstrip = with_flag("lstrip");
  ASSERT_NE(lstrip, nullptr);
  EXPECT_EQ(EncodeWith(*lstrip, "a \t<x> b"), (std::vector<int32_t>{'a', 300, kSpace, 'b'}));

  auto rstrip = with_flag("rstrip");
  ASSERT_NE(rstrip, nullptr);
  EXPECT_EQ(EncodeWith(*rstrip, "a <x> \nb"), (std::vector<int32_t>{'a', kSpace, 300, 'b'}));
  auto decoded = rstrip->Decode({'a', 300, 'b'});
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "a<x>b");
}

TEST(BpeTokenizerTest, StrippingAddedTokensStaysLinear) {
  // Every match of a stripping token used to rescan the white space around
  // it out to the text's ends: 40k tabs took ~7 s with a tab token.
  constexpr size_t kRun = 40000;
  const std::string text = std::string(kRun, ' ') + std::string(kRun, '\t') + "x";
  for (const char* flag : {"lstrip", "rstrip"}) {
    SCOPED_TRACE(flag);
    Value token = AddedToken(300, "\t", /*special=*/true);
    token.Set(flag, Value::Bool(true));
    Value root = TinyTokenizer({});
    root.Set("added_tokens", Value::MakeArray({token}));
    auto tokenizer = Load(root);
    ASSERT_NE(tokenizer, nullptr);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = EncodeWith(*tokenizer, text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // lstrip: the first tab takes the spaces. rstrip: the spaces stay, and as
    // in the library every tab still matches inside the run the first one
    // swallowed.
    const bool lstrip = std::string_view(flag) == "lstrip";
    std::vector<int32_t> expected(lstrip ? 0 : kRun, ' ');
    expected.insert(expected.end(), kRun, 300);
    expected.push_back('x');
    EXPECT_TRUE(ids == expected) << ids.size() << " ids";
    EXPECT_LT(seconds, 1.0);
  }
}

TEST(BpeTokenizerTest, NormalizedAddedTokensMatchTheNormalizedText) {
  Value root = TinyTokenizer({});
  Value composed = AddedToken(300, "\xC7\x98");                // U+01D8, normalized=true
  Value raw = AddedToken(301, "o\xCC\x88", /*special=*/true);  // o + U+0308, normalized=false
  Value latin = AddedToken(302, "\xC3\xA9!");                  // "é!"
  root.Set("added_tokens", Value::MakeArray({composed, raw, latin}));
  auto tokenizer = Load(root);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeWith(*tokenizer, "u\xCC\x88\xCC\x81"), (std::vector<int32_t>{300}));
  EXPECT_EQ(EncodeWith(*tokenizer, "\xC7\x98"), (std::vector<int32_t>{300}));
  // The raw token matches before normalization would have composed it to ö.
  EXPECT_EQ(EncodeWith(*tokenizer, "o\xCC\x88"), (std::vector<int32_t>{301}));
  EXPECT_EQ(EncodeWith(*tokenizer, "\xC3\xB6"), (std::vector<int32_t>{0xC3, 0xB6}));
  EXPECT_EQ(EncodeWith(*tokenizer, "\xC3\xA9!"), (std::vector<int32_t>{302}));

  auto skipped = tokenizer->Decode({'a', 301, 300}, BpeDecodeOptions{true});
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "a\xC7\x98");
  // Added tokens go through the ByteLevel decoder too (tokenizers 0.22): "é"
  // is the alphabet's stand-in for the lone byte 0xE9, which becomes U+FFFD.
  auto latin_decoded = tokenizer->Decode({302});
  ASSERT_TRUE(latin_decoded.ok());
  EXPECT_EQ(*latin_decoded, "\xEF\xBF\xBD!");
}

TEST(BpeTokenizerTest, PrefixSpaceIsAddedToEachPiece) {
  Value root = TinyTokenizer({});
  Value pre = *root.Find("pre_tokenizer");
  pre.Set("add_prefix_space", Value::Bool(true));
  root.Set("pre_tokenizer", pre);
  root.Set("added_tokens", Value::MakeArray({AddedToken(300, "<s>", true)}));
  auto tokenizer = Load(root);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeWith(*tokenizer, "hi"), (std::vector<int32_t>{' ', 'h', 'i'}));
  EXPECT_EQ(EncodeWith(*tokenizer, "<s>hi"), (std::vector<int32_t>{300, ' ', 'h', 'i'}));
  EXPECT_EQ(EncodeWith(*tokenizer, "<s>"), (std::vector<int32_t>{300}));
}

absl::Status LoadStatus(std::string_view json) { return BpeTokenizer::FromJson(json).status(); }

void ExpectInvalid(const Value& root, absl::string_view needle) {
  const absl::Status status = LoadStatus(json::Write(root));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(Contains(status.message(), needle));
}

Value WithModelField(const std::string& key, const Value& value) {
  Value root = TinyTokenizer({"a b"});
  Value model = *root.Find("model");
  model.Set(key, value);
  root.Set("model", model);
  return root;
}

TEST(BpeTokenizerTest, RefusesMalformedJson) {
  for (const char* text : {"", "{", "[]", "{\"model\": ", "null", "{\"model\": 3}"}) {
    const absl::Status status = LoadStatus(text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text << ": " << status;
  }
  std::string truncated = ReadFileOrEmpty(std::string(kDataDir) + "/tokenizer.json");
  ASSERT_GT(truncated.size(), 1000u);
  truncated.resize(truncated.size() / 2);
  EXPECT_EQ(LoadStatus(truncated).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BpeTokenizerTest, RefusesOtherModelTypes) {
  ExpectInvalid(WithModelField("type", Value::String("WordPiece")), "model.type");
  ExpectInvalid(WithModelField("type", Value::Int(1)), "model.type");
}

TEST(BpeTokenizerTest, RefusesBadMerges) {
  Value bad = Value::MakeArray({Value::String("a b c")});
  ExpectInvalid(WithModelField("merges", bad), "model.merges[0]");
  ExpectInvalid(WithModelField("merges", Value::MakeArray({Value::String("ab")})),
                "model.merges[0]");
  ExpectInvalid(WithModelField("merges", Value::MakeArray({Value::String("a Z\xC3\xA9")})),
                "not in model.vocab");
  ExpectInvalid(WithModelField("merges", Value::MakeArray({Value::Int(7)})), "model.merges[0]");
  ExpectInvalid(WithModelField("merges", Value::String("a b")), "model.merges");
  // The merged token must exist too.
  Value root = TinyTokenizer({});
  Value model = *root.Find("model");
  model.Set("merges", Value::MakeArray({Value::String("q r")}));
  root.Set("model", model);
  ExpectInvalid(root, "'qr'");
}

TEST(BpeTokenizerTest, RefusesBadVocabAndAddedTokens) {
  Value vocab = Value::MakeObject();
  vocab.Set("a", Value::Int(-4));
  ExpectInvalid(WithModelField("vocab", vocab), "model.vocab['a']");
  ExpectInvalid(WithModelField("vocab", Value::MakeArray()), "model.vocab");
  ExpectInvalid(WithModelField("dropout", Value::Number(0.1)), "model.dropout");
  ExpectInvalid(WithModelField("byte_fallback", Value::Bool(true)), "model.byte_fallback");
  ExpectInvalid(WithModelField("unk_token", Value::String("<unk>")), "model.unk_token");

  Value root = TinyTokenizer({});
  root.Set("added_tokens", Value::MakeArray({AddedToken(300, "")}));
  ExpectInvalid(root, "added_tokens[0].content");
  root.Set("added_tokens", Value::MakeArray({AddedToken(300, "<a>"), AddedToken(300, "<b>")}));
  ExpectInvalid(root, "added_tokens[1].id");
  root.Set("added_tokens", Value::MakeArray({AddedToken(7, "<a>")}));  // 7 is a byte token
  ExpectInvalid(root, "added_tokens[0].id");
}

TEST(BpeTokenizerTest, RefusesUnsupportedPipelines) {
  Value component = Value::MakeObject();
  component.Set("type", Value::String("NFKC"));
  Value root = TinyTokenizer({});
  root.Set("normalizer", component);
  ExpectInvalid(root, "normalizer");

  root = TinyTokenizer({});
  component.Set("type", Value::String("Whitespace"));
  root.Set("pre_tokenizer", component);
  ExpectInvalid(root, "pre_tokenizer");
  root.Set("pre_tokenizer", Value::Null());
  ExpectInvalid(root, "pre_tokenizer");

  root = TinyTokenizer({});
  component.Set("type", Value::String("WordPiece"));
  root.Set("decoder", component);
  ExpectInvalid(root, "decoder");

  root = TinyTokenizer({});
  component.Set("type", Value::String("TemplateProcessing"));
  root.Set("post_processor", component);
  ExpectInvalid(root, "post_processor");
}

// Qwen2's pre-tokenizer regex as published (transformers' Qwen2 tokenizer,
// PRETOKENIZE_REGEX; the Split pattern of Qwen2 tokenizer.json files).
const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> QwenSplit(std::string_view text) {
  auto splitter = RegexSplitter::Compile(kQwen2Pattern);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  if (!splitter.ok()) return {};
  std::vector<std::string_view> pieces;
  (*splitter)->Split(text, &pieces);
  std::string joined;
  for (std::string_view p : pieces) joined.append(p.data(), p.size());
  EXPECT_EQ(joined, text) << "the pieces are the text";
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

using Pieces = std::vector<std::string>;

TEST(RegexSplitTest, Qwen2PatternSplitsAsDocumented) {
  EXPECT_EQ(QwenSplit("Hello world"), (Pieces{"Hello", " world"}));
  // Digits one by one.
  EXPECT_EQ(QwenSplit("abc123"), (Pieces{"abc", "1", "2", "3"}));
  EXPECT_EQ(QwenSplit("2024 \u5e74"), (Pieces{"2", "0", "2", "4", " \u5e74"}));
  // English contractions, in any case.
  EXPECT_EQ(QwenSplit("I'm here"), (Pieces{"I", "'m", " here"}));
  EXPECT_EQ(QwenSplit("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(QwenSplit("THEY'LL"), (Pieces{"THEY", "'LL"}));
  // Other scripts are letters too: Chinese, Cyrillic, Arabic.
  EXPECT_EQ(QwenSplit("\u4f60\u597d\u4e16\u754c"), (Pieces{"\u4f60\u597d\u4e16\u754c"}));
  EXPECT_EQ(QwenSplit("\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440"),
            (Pieces{"\u041f\u0440\u0438\u0432\u0435\u0442", ",", " \u043c\u0438\u0440"}));
  EXPECT_EQ(QwenSplit("\u0645\u0631\u062d\u0628\u0627 \u0628\u0643"),
            (Pieces{"\u0645\u0631\u062d\u0628\u0627", " \u0628\u0643"}));
  // One non-letter joins the letters after it; punctuation runs keep the
  // newlines after them.
  EXPECT_EQ(QwenSplit("(abc)"), (Pieces{"(abc", ")"}));
  EXPECT_EQ(QwenSplit("hi!!! ok"), (Pieces{"hi", "!!!", " ok"}));
  EXPECT_EQ(QwenSplit("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  // Whitespace runs leave their last space to the next word.
  EXPECT_EQ(QwenSplit("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(QwenSplit("a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(QwenSplit("x  "), (Pieces{"x", "  "}));
  // Bytes that are not UTF-8 match nothing: a piece between matches.
  EXPECT_EQ(QwenSplit("a\xff"
                      "b"),
            (Pieces{"a", "\xff", "b"}));
  EXPECT_EQ(QwenSplit(""), Pieces{});
}

TEST(RegexSplitTest, ABadPatternIsInvalidArgument) {
  auto splitter = RegexSplitter::Compile("(a");
  EXPECT_EQ(splitter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(splitter.status().message(), "offset")) << splitter.status();
}

// Qwen2's tokenizer.json pre-tokenizer: Sequence[Split(Regex, Isolated),
// ByteLevel(use_regex false)].
Value QwenPreTokenizer() {
  Value pattern = Value::MakeObject();
  pattern.Set("Regex", Value::String(kQwen2Pattern));
  Value split = Value::MakeObject();
  split.Set("type", Value::String("Split"));
  split.Set("pattern", pattern);
  split.Set("behavior", Value::String("Isolated"));
  split.Set("invert", Value::Bool(false));
  Value byte_level = Value::MakeObject();
  byte_level.Set("type", Value::String("ByteLevel"));
  byte_level.Set("add_prefix_space", Value::Bool(false));
  byte_level.Set("trim_offsets", Value::Bool(false));
  byte_level.Set("use_regex", Value::Bool(false));
  Value sequence = Value::MakeObject();
  sequence.Set("type", Value::String("Sequence"));
  sequence.Set("pretokenizers", Value::MakeArray({split, byte_level}));
  return sequence;
}

TEST(BpeTokenizerTest, Qwen2PreTokenizerSplitsDigits) {
  // "1 2" -> 256, "a b" -> 257, "Ġ a" -> 258 (a space then "a").
  Value root = TinyTokenizer({"1 2", "a b", "\xc4\xa0 a"});
  auto gpt2 = Load(root);
  root.Set("pre_tokenizer", QwenPreTokenizer());
  auto qwen = Load(root);
  ASSERT_NE(gpt2, nullptr);
  ASSERT_NE(qwen, nullptr);
  // The GPT-2 split keeps "12" one word (merged); Qwen's splits the digits.
  EXPECT_EQ(EncodeWith(*gpt2, "12ab"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(EncodeWith(*qwen, "12ab"), (std::vector<int32_t>{'1', '2', 257}));
  EXPECT_EQ(EncodeWith(*qwen, "ab a"), (std::vector<int32_t>{257, 258}));
  const std::string text = "It's 42 \u4f60\u597d!\n";
  auto ids = qwen->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto decoded = qwen->Decode(*ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

TEST(BpeTokenizerTest, RefusesOtherSequences) {
  auto with = [](const std::function<void(Value*, Value*)>& change) {
    Value root = TinyTokenizer({});
    Value pre = QwenPreTokenizer();
    Value split = pre.Find("pretokenizers")->as_array()[0];
    Value byte_level = pre.Find("pretokenizers")->as_array()[1];
    change(&split, &byte_level);
    pre.Set("pretokenizers", Value::MakeArray({split, byte_level}));
    root.Set("pre_tokenizer", pre);
    return root;
  };
  ExpectInvalid(with([](Value* s, Value*) { s->Set("behavior", Value::String("Removed")); }),
                "pretokenizers[0].behavior");
  ExpectInvalid(with([](Value* s, Value*) { s->Set("invert", Value::Bool(true)); }),
                "pretokenizers[0].invert");
  Value bad = Value::MakeObject();
  bad.Set("Regex", Value::String("(unclosed"));
  ExpectInvalid(with([&](Value* s, Value*) { s->Set("pattern", bad); }),
                "pretokenizers[0].pattern.Regex");
  Value plain = Value::MakeObject();
  plain.Set("String", Value::String(" "));
  ExpectInvalid(with([&](Value* s, Value*) { s->Set("pattern", plain); }),
                "pretokenizers[0].pattern");
  ExpectInvalid(with([](Value*, Value* b) { b->Set("add_prefix_space", Value::Bool(true)); }),
                "pretokenizers[1].add_prefix_space");
  ExpectInvalid(with([](Value*, Value* b) { b->Set("use_regex", Value::Bool(true)); }),
                "pretokenizers[1].use_regex");
  ExpectInvalid(with([](Value* s, Value*) { s->Set("type", Value::String("Whitespace")); }),
                "pretokenizers");
}

TEST(BpeTokenizerTest, FromFileReportsMissingFiles) {
  auto missing = BpeTokenizer::FromFile(std::string(kDataDir) + "/no_such_tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------
// Unicode helpers behind the tokenizer.

TEST(UnicodeTest, NfcComposesOrdersAndExcludes) {
  using unicode::NfcNormalize;
  EXPECT_EQ(NfcNormalize("e\xCC\x81"), "\xC3\xA9");                                 // e + acute
  EXPECT_EQ(NfcNormalize("\xE2\x84\xAB"), "\xC3\x85");                              // ANGSTROM SIGN
  EXPECT_EQ(NfcNormalize("A\xCC\x8A"), "\xC3\x85");                                 // A + ring
  EXPECT_EQ(NfcNormalize("\xE2\x84\xA6"), "\xCE\xA9");                              // OHM SIGN
  EXPECT_EQ(NfcNormalize("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");              // L + V jamo
  EXPECT_EQ(NfcNormalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // L+V+T
  EXPECT_EQ(NfcNormalize("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");              // LV + T
  // Canonical ordering: dot below (220) before dot above (230).
  EXPECT_EQ(NfcNormalize("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  EXPECT_EQ(NfcNormalize("\xE1\xB8\x8B\xCC\xA3"), "\xE1\xB8\x8D\xCC\x87");  // ḋ + dot below
  // Composition exclusions stay decomposed; blocked marks stay separate.
  EXPECT_EQ(NfcNormalize("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958
  EXPECT_EQ(NfcNormalize("a\xCC\x81\xCC\x81"), "\xC3\xA1\xCC\x81");
  EXPECT_EQ(NfcNormalize("\xCC\x81x"), "\xCC\x81x");  // a leading mark has no starter
  // Already NFC: unchanged.
  for (const char* text : {"", "plain ASCII", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC",
                           "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "\xF0\x9F\x98\x80"}) {
    EXPECT_EQ(NfcNormalize(text), text);
  }
}

TEST(UnicodeTest, NfcOfLongMarkRunsIsFast) {
  // Canonical ordering was an insertion sort over the run of marks: 50k
  // alternating acutes (class 230) and dots below (220) took ~5 s.
  constexpr int kPairs = 50000;
  std::string text = "a";
  for (int i = 0; i < kPairs; ++i) text += "\xCC\x81\xCC\xA3";
  const auto start = std::chrono::steady_clock::now();
  const std::string nfc = unicode::NfcNormalize(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // a + the first dot below compose to U+1EA1; the other marks are sorted
  // by class, dots below first, and compose with nothing.
  std::string expected = "\xE1\xBA\xA1";
  for (int i = 1; i < kPairs; ++i) expected += "\xCC\xA3";
  for (int i = 0; i < kPairs; ++i) expected += "\xCC\x81";
  EXPECT_TRUE(nfc == expected);  // not EXPECT_EQ: 200 KB of diff
  EXPECT_LT(seconds, 1.0);
}

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string_view> pieces;
  unicode::SplitGpt2Pattern(text, &pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

using Pieces = std::vector<std::string>;

TEST(UnicodeTest, Gpt2PatternSplit) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(Split("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(Split("  \n\nx"), (Pieces{"  \n", "\n", "x"}));
  EXPECT_EQ(Split("it's we're I'M"), (Pieces{"it", "'s", " we", "'re", " I", "'", "M"}));
  EXPECT_EQ(Split("3.14 -42"), (Pieces{"3", ".", "14", " -", "42"}));
  EXPECT_EQ(Split("hi!!! ?"), (Pieces{"hi", "!!!", " ?"}));
  // NBSP and U+3000 are white space; ZWSP and U+FEFF are not.
  EXPECT_EQ(Split("a\xC2\xA0\xC2\xA0q"), (Pieces{"a", "\xC2\xA0", "\xC2\xA0", "q"}));
  EXPECT_EQ(Split("a\xE3\x80\x80"), (Pieces{"a", "\xE3\x80\x80"}));
  EXPECT_EQ(Split("a\xE2\x80\x8Bq"), (Pieces{"a", "\xE2\x80\x8B", "q"}));
  EXPECT_EQ(Split(" \xEF\xBB\xBFx"), (Pieces{" \xEF\xBB\xBF", "x"}));
  // Letters and numbers beyond ASCII: Cyrillic, Arabic-Indic digits, Roman numeral XII.
  EXPECT_EQ(Split("\xD0\xBC\xD0\xB8\xD1\x80 \xD9\xA1\xD9\xA2\xE2\x85\xAB"),
            (Pieces{"\xD0\xBC\xD0\xB8\xD1\x80", " \xD9\xA1\xD9\xA2\xE2\x85\xAB"}));
  EXPECT_EQ(Split(""), Pieces{});
}

TEST(UnicodeTest, Utf8ValidationAndLossyDecoding) {
  using unicode::FindInvalidUtf8;
  using unicode::Utf8Lossy;
  EXPECT_EQ(FindInvalidUtf8("ok \xC3\xA9 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("\xC0\x80"), 0u);             // overlong
  EXPECT_EQ(FindInvalidUtf8("ab\xED\xA0\x80"), 2u);       // surrogate
  EXPECT_EQ(FindInvalidUtf8("abc\xF4\x90\x80\x80"), 3u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xE2\x82"), 0u);             // truncated
  // One U+FFFD per maximal ill-formed subpart, as Rust's from_utf8_lossy.
  const std::string kFffd = "\xEF\xBF\xBD";
  EXPECT_EQ(Utf8Lossy("a\xF0\x9F\x98"), "a" + kFffd);
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(Utf8Lossy("\xE0\x80\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(Utf8Lossy("\xE2\x82x"), kFffd + "x");
}

TEST(UnicodeTest, CharacterClasses) {
  using unicode::CharClass;
  EXPECT_EQ(unicode::ClassOf(U'a'), CharClass::kLetter);
  EXPECT_EQ(unicode::ClassOf(U'\u00E9'), CharClass::kLetter);
  EXPECT_EQ(unicode::ClassOf(U'\u65E5'), CharClass::kLetter);
  EXPECT_EQ(unicode::ClassOf(U'7'), CharClass::kNumber);
  EXPECT_EQ(unicode::ClassOf(U'\u2460'), CharClass::kNumber);  // circled digit one (No)
  EXPECT_EQ(unicode::ClassOf(U'\u0085'), CharClass::kWhiteSpace);
  EXPECT_EQ(unicode::ClassOf(U'\u001C'), CharClass::kOther);  // not White_Space
  EXPECT_EQ(unicode::ClassOf(U'\U0001F600'), CharClass::kOther);
  EXPECT_TRUE(unicode::IsWordChar(U'_'));
  EXPECT_TRUE(unicode::IsWordChar(U'\u0301'));  // a mark
  EXPECT_TRUE(unicode::IsWordChar(U'\u24B6'));  // circled A: Other_Alphabetic
  EXPECT_FALSE(unicode::IsWordChar(U'-'));
  EXPECT_EQ(unicode::CombiningClass(U'\u0301'), 230);
  EXPECT_EQ(unicode::CombiningClass(U'a'), 0);
}

}  // namespace
}  // namespace fca::engine
