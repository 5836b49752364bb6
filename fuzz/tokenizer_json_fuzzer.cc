// Fuzzes BpeTokenizer::FromJson, the tokenizer.json loader. The input is the
// file, optionally followed by a NUL byte and a text (JSON text never holds a
// raw NUL). A tokenizer that loads encodes that text, or a few fixed samples
// and the file's own text, which is full of its tokens; every id must decode,
// and every id below vocab_size() must either name a token or be refused.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "fuzz/fuzz_check.h"
#include "server/engine/text/bpe_tokenizer.h"
#include "server/engine/text/unicode.h"

namespace {

using fca::engine::BpeTokenizer;

// Longer texts only slow the fuzzer down; the encoder is fuzzed on its own
// by bpe_encode_fuzzer.
constexpr size_t kMaxTextBytes = 4096;

const char* const kSamples[] = {
    "Hello, world! It's 2024.",
    "  two  spaces\n\ttab\r\n",
    "caf\xC3\xA9 cafe\xCC\x81 \xEA\xB0\x80\xE1\x86\xA8",  // NFC changes the second
    "<|endoftext|>x<|padding|> <s></s>[UNK]",
    "\xF0\x9F\x98\x80 emoji, \xE2\x80\x8B zero width",
};

void CheckEncode(const BpeTokenizer& tokenizer, std::string_view text) {
  const auto ids = tokenizer.Encode(text);
  if (fca::engine::unicode::FindInvalidUtf8(text) != std::string_view::npos) {
    FUZZ_CHECK(!ids.ok());
    FUZZ_CHECK(ids.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(ids.ok());
  for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  FUZZ_CHECK(tokenizer.Decode(*ids).ok());
  fca::engine::BpeDecodeOptions skip;
  skip.skip_special_tokens = true;
  FUZZ_CHECK(tokenizer.Decode(*ids, skip).ok());
}

void CheckIds(const BpeTokenizer& tokenizer) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto token = tokenizer.IdToToken(id);
    const auto decoded = tokenizer.Decode({id});
    FUZZ_CHECK(token.ok() == decoded.ok());
  }
  FUZZ_CHECK(!tokenizer.IdToToken(-1).ok());
  FUZZ_CHECK(!tokenizer.Decode({static_cast<int32_t>(tokenizer.vocab_size())}).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const auto tokenizer = BpeTokenizer::FromJson(json);
  if (!tokenizer.ok()) {
    FUZZ_CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK((*tokenizer)->vocab_size() > 0);
  // Dense id tables: the loader caps ids, so this loop is bounded too.
  if ((*tokenizer)->vocab_size() <= 4096) CheckIds(**tokenizer);
  if (nul != std::string_view::npos) {
    const std::string_view text = input.substr(nul + 1);
    CheckEncode(**tokenizer, text.substr(0, kMaxTextBytes));
    return 0;
  }
  for (const char* sample : kSamples) CheckEncode(**tokenizer, sample);
  CheckEncode(**tokenizer, json.substr(0, kMaxTextBytes));
  return 0;
}
