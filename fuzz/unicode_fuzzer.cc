// Fuzzes server/engine/text/unicode on arbitrary bytes: UTF-8 validation,
// lossy repair, NFC and the GPT-2 pre-tokenizer split. Invalid input may give
// unspecified output but must stay in bounds; valid input must re-encode
// exactly, normalize to valid UTF-8 that NFC leaves unchanged (NFC is
// idempotent), and split into non-empty pieces that cover the text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "server/engine/text/unicode.h"

namespace {

namespace unicode = fca::engine::unicode;

bool IsValid(std::string_view text) {
  return unicode::FindInvalidUtf8(text) == std::string_view::npos;
}

void CheckSplit(std::string_view text) {
  std::vector<std::string_view> pieces;
  unicode::SplitGpt2Pattern(text, &pieces);
  size_t pos = 0;
  for (std::string_view piece : pieces) {
    FUZZ_CHECK(!piece.empty());
    FUZZ_CHECK(piece.data() == text.data() + pos);
    pos += piece.size();
  }
  FUZZ_CHECK(pos == text.size());
}

// Decodes every code point, queries its properties and re-encodes it.
void CheckCodePoints(std::string_view text) {
  std::string encoded;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t before = pos;
    const char32_t cp = unicode::NextCodePoint(text, &pos);
    FUZZ_CHECK(pos > before && pos <= text.size());
    FUZZ_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF));
    (void)unicode::ClassOf(cp);
    (void)unicode::IsWordChar(cp);
    (void)unicode::CombiningClass(cp);
    unicode::AppendUtf8(cp, &encoded);
  }
  FUZZ_CHECK(encoded == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string repaired = unicode::Utf8Lossy(text);
  FUZZ_CHECK(IsValid(repaired));
  CheckSplit(text);
  if (!IsValid(text)) {
    (void)unicode::NfcNormalize(text);  // unspecified output, in bounds
    return 0;
  }
  FUZZ_CHECK(repaired == text);
  CheckCodePoints(text);
  const std::string nfc = unicode::NfcNormalize(text);
  FUZZ_CHECK(IsValid(nfc));
  FUZZ_CHECK(unicode::NfcNormalize(nfc) == nfc);
  CheckSplit(nfc);
  return 0;
}
