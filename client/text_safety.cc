#include "client/text_safety.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace fca::client {

namespace {

// Code points a terminal acts on instead of showing, or that reorder or
// break what follows them.
bool IsUnsafeForTerminal(char32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) ||  // C0, DEL, C1
         cp == 0x200E || cp == 0x200F ||                           // LRM, RLM
         (cp >= 0x202A && cp <= 0x202E) ||                         // embeddings, overrides
         (cp >= 0x2066 && cp <= 0x2069) ||                         // isolates
         cp == 0x2028 || cp == 0x2029;                             // line, paragraph separators
}

std::string EscapeCodePoint(char32_t cp) {
  switch (cp) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (cp < 0x80) return absl::StrFormat("\\x%02x", static_cast<unsigned>(cp));
  return absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
}

bool IsSha256Hex(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return absl::ascii_isxdigit(static_cast<unsigned char>(c));
         });
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  return utf8::FindIllFormed(text) == std::string_view::npos;
}

std::string SanitizeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Sequence s = utf8::DecodeAt(text, i);
    if (!s.well_formed) {
      // Byte by byte, not a maximal subpart at a time: each shows as it is.
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (IsUnsafeForTerminal(s.code_point)) {
      out += EscapeCodePoint(s.code_point);
    } else {
      out.append(text.data() + i, s.length);
    }
    i += s.length;
  }
  return out;
}

std::string SanitizeLinesForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    out += SanitizeForTerminal(text.substr(start, end - start));
    if (end == text.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string NormalizeSha256Hex(std::string_view text) {
  if (!IsSha256Hex(text)) return std::string(text);
  return absl::AsciiStrToLower(absl::string_view(text.data(), text.size()));
}

std::string NormalizeDatasetRef(std::string_view ref) {
  constexpr std::string_view kPrefix = "sha256:";
  const std::string_view hex = ref.substr(std::min(ref.size(), kPrefix.size()));
  const bool has_prefix =
      absl::EqualsIgnoreCase(absl::string_view(ref.data(), ref.size() - hex.size()),
                             absl::string_view(kPrefix.data(), kPrefix.size()));
  if (!has_prefix || !IsSha256Hex(hex)) return std::string(ref);
  return std::string(kPrefix) + NormalizeSha256Hex(hex);
}

}  // namespace fca::client
