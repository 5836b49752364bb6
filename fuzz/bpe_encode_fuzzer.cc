// Fuzzes BpeTokenizer::Encode with the real GPT-NeoX tokenizer of
// tests/data/tokenizer (loaded once) on arbitrary bytes. Invalid UTF-8 must be
// an INVALID_ARGUMENT; valid text must encode to ids that decode, and back to
// the text itself whenever NFC leaves the text unchanged and no special token
// (matched before normalization) splits it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "fuzz/fuzz_check.h"
#include "server/engine/text/bpe_tokenizer.h"
#include "server/engine/text/unicode.h"

#ifndef FCA_FUZZ_TOKENIZER_JSON
#error "FCA_FUZZ_TOKENIZER_JSON must name tests/data/tokenizer/tokenizer.json"
#endif

namespace {

using fca::engine::BpeTokenizer;

const BpeTokenizer& Tokenizer() {
  static const BpeTokenizer* const tokenizer = [] {
    auto loaded = BpeTokenizer::FromFile(FCA_FUZZ_TOKENIZER_JSON);
    if (!loaded.ok()) {
      std::fprintf(stderr, "bpe_encode_fuzzer: %s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return loaded->release();  // lives for the whole process
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const BpeTokenizer& tokenizer = Tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto ids = tokenizer.Encode(text);
  if (fca::engine::unicode::FindInvalidUtf8(text) != std::string_view::npos) {
    FUZZ_CHECK(!ids.ok());
    FUZZ_CHECK(ids.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(ids.ok());
  for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  const auto decoded = tokenizer.Decode(*ids);
  FUZZ_CHECK(decoded.ok());
  // The tokenizer's special tokens, <|endoftext|> and <|padding|>, both
  // start with "<|".
  if (text.find("<|") == std::string_view::npos &&
      fca::engine::unicode::NfcNormalize(text) == text) {
    FUZZ_CHECK(*decoded == text);
  }
  return 0;
}
