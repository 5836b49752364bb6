// Unicode text processing for tokenizers: UTF-8, character classes, NFC and
// the GPT-2 pre-tokenizer split. Torch-free, no ICU; the data comes from
// server/engine/unicode_tables.cc (generated, Unicode 14.0).
//
// Every function here is pure and thread-safe. Functions taking UTF-8 text
// require it to be valid (see FindInvalidUtf8); they never read out of bounds
// on invalid input, but their output is then unspecified.
#ifndef FCA_SERVER_ENGINE_TEXT_UNICODE_H_
#define FCA_SERVER_ENGINE_TEXT_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fca::engine::unicode {

// ---------------------------------------------------------------------------
// UTF-8

// The decoding itself is common/utf8.h's; these are the tokenizers' names for it.

// Byte offset of the first byte that does not start a well-formed UTF-8
// sequence (overlong forms, surrogates and code points above U+10FFFF are
// ill-formed), or std::string_view::npos when `text` is valid.
size_t FindInvalidUtf8(std::string_view text);

// Decodes the code point at `*pos` of valid UTF-8 and advances `*pos` past it
// (an ill-formed sequence reads as U+FFFD, passed over a maximal subpart at a
// time, as in Utf8Lossy).
char32_t NextCodePoint(std::string_view text, size_t* pos);

// Appends the UTF-8 encoding of `code_point` (must be a Unicode scalar value).
void AppendUtf8(char32_t code_point, std::string* out);

// `bytes` as valid UTF-8: each maximal ill-formed subpart becomes U+FFFD, the
// Unicode-recommended practice that Rust's String::from_utf8_lossy follows.
std::string Utf8Lossy(std::string_view bytes);

// ---------------------------------------------------------------------------
// Character properties

enum class CharClass : uint8_t {
  kOther = 0,
  kLetter = 1,      // General_Category L (Lu, Ll, Lt, Lm, Lo): regex \p{L}.
  kNumber = 2,      // General_Category N (Nd, Nl, No): regex \p{N}.
  kWhiteSpace = 3,  // The White_Space property: regex \s.
};
CharClass ClassOf(char32_t code_point);
inline bool IsWhiteSpace(char32_t code_point) {
  return ClassOf(code_point) == CharClass::kWhiteSpace;
}
// Regex \w in its Unicode form: Alphabetic, M, Nd, Pc and Join_Control.
bool IsWordChar(char32_t code_point);
// Canonical_Combining_Class (0 for starters).
uint8_t CombiningClass(char32_t code_point);

// ---------------------------------------------------------------------------
// Normalization

// Normalization Form C (UAX #15): canonical decomposition, canonical ordering,
// canonical composition (Hangul by arithmetic). Text that is already NFC comes
// back unchanged; text below U+0300 takes a copy-only fast path.
std::string NfcNormalize(std::string_view text);

// ---------------------------------------------------------------------------
// Pre-tokenization

// Splits `text` as the GPT-2 / ByteLevel pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (leftmost-first alternation, as Oniguruma and Rust's regex crate):
// appends to `pieces` the consecutive matches, which cover all of `text`.
// The pieces are views into `text`.
void SplitGpt2Pattern(std::string_view text, std::vector<std::string_view>* pieces);

}  // namespace fca::engine::unicode

#endif  // FCA_SERVER_ENGINE_TEXT_UNICODE_H_
