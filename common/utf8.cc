#include "common/utf8.h"

#include <algorithm>
#include <cstdint>

namespace fca::utf8 {
namespace {

// A lead byte's row of table 3-7: how many bytes follow it and the range of
// the first of them (narrower after E0, ED, F0 and F4: that is what rules
// out overlong forms, surrogates and code points above U+10FFFF; the others
// take 80..BF).
struct LeadRow {
  size_t trailing = 0;  // 0: the byte starts no well-formed sequence
  uint8_t first_lo = 0x80;
  uint8_t first_hi = 0xBF;
};

LeadRow RowOf(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {1, 0x80, 0xBF};
  if (lead == 0xE0) return {2, 0xA0, 0xBF};
  if (lead == 0xED) return {2, 0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {2, 0x80, 0xBF};
  if (lead == 0xF0) return {3, 0x90, 0xBF};
  if (lead == 0xF4) return {3, 0x80, 0x8F};
  if (lead >= 0xF1 && lead <= 0xF3) return {3, 0x80, 0xBF};
  return {};  // 80..C1 and F5..FF
}

}  // namespace

Sequence DecodeAt(std::string_view text, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  const size_t avail = text.size() - pos;
  if (p[0] < 0x80) return {p[0], 1, true};
  const LeadRow row = RowOf(p[0]);
  if (row.trailing == 0) return {};
  // The lead's payload: 5, 4 or 3 bits before 1, 2 or 3 trailing bytes.
  char32_t code_point = p[0] & (0x7Fu >> (row.trailing + 1));
  uint8_t lo = row.first_lo, hi = row.first_hi;
  for (size_t i = 1; i <= row.trailing; ++i) {
    // Bytes up to here are the maximal subpart: each could still have
    // begun a well-formed sequence.
    if (i >= avail || p[i] < lo || p[i] > hi) return {kReplacementCharacter, i, false};
    code_point = (code_point << 6) | (p[i] & 0x3Fu);
    lo = 0x80, hi = 0xBF;
  }
  return {code_point, row.trailing + 1, true};
}

size_t FindIllFormed(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {  // the common case, without a call
      ++pos;
      continue;
    }
    const Sequence s = DecodeAt(text, pos);
    if (!s.well_formed) return pos;
    pos += s.length;
  }
  return std::string_view::npos;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string MarkIllFormedBytes(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  size_t pos = 0;
  while (pos < text.size()) {
    const Sequence s = DecodeAt(text, pos);
    // One '?' a byte, not one a maximal subpart: the mark keeps the count.
    const size_t length = s.well_formed ? s.length : 1;
    if (out.size() + length > max_bytes) break;
    if (s.well_formed) {
      out.append(text.data() + pos, length);
    } else {
      out += '?';
    }
    pos += length;
  }
  return out;
}

}  // namespace fca::utf8
