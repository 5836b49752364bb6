// UTF-8 as the Unicode Standard defines it (chapter 3.9, table 3-7 of
// well-formed byte sequences): the one decoder of fca. Each caller keeps its
// own policy for what is ill-formed (the JSON parser refuses it, the CLI
// escapes it byte by byte, the tokenizer replaces each maximal subpart with
// U+FFFD); what is well-formed, and how far an ill-formed run reaches, is
// decided here only.
#ifndef FCA_COMMON_UTF8_H_
#define FCA_COMMON_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace fca::utf8 {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// What starts at one position of a text.
struct Sequence {
  // The code point of a well-formed sequence; kReplacementCharacter for an
  // ill-formed one.
  char32_t code_point = kReplacementCharacter;
  // Bytes of the well-formed sequence (1 to 4), or of the ill-formed one's
  // maximal subpart (1 to 3): the longest start of a well-formed sequence
  // there, or 1 byte when none starts there (Unicode Standard 3.9, "U+FFFD
  // Substitution of Maximal Subparts", table 3-8).
  size_t length = 1;
  bool well_formed = false;
};

// The sequence that starts at text[pos] (pos < text.size()). Never reads
// past the end: a sequence cut short by it is ill-formed.
Sequence DecodeAt(std::string_view text, size_t pos);

// Offset of the first byte that starts no well-formed sequence (overlong
// forms, surrogates, code points above U+10FFFF and truncated sequences are
// ill-formed), or std::string_view::npos when all of `text` is well-formed.
size_t FindIllFormed(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (a Unicode scalar value).
void AppendUtf8(char32_t code_point, std::string* out);

// `text` with each byte that starts no well-formed sequence replaced by '?',
// at most `max_bytes` long, cut between sequences: for text from elsewhere
// that must go out as valid UTF-8 (JSON, proto3 string fields).
std::string MarkIllFormedBytes(std::string_view text, size_t max_bytes = std::string_view::npos);

}  // namespace fca::utf8

#endif  // FCA_COMMON_UTF8_H_
