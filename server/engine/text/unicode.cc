#include "server/engine/text/unicode.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/utf8.h"
#include "server/engine/text/unicode_tables.h"

namespace fca::engine::unicode {
namespace {

using tables::Range;

const Range* FindRange(const Range* ranges, size_t size, char32_t code_point) {
  const Range* end = ranges + size;
  const Range* it = std::upper_bound(ranges, end, code_point,
                                     [](char32_t cp, const Range& r) { return cp < r.first; });
  if (it == ranges) return nullptr;
  --it;
  return code_point <= it->last ? it : nullptr;
}

// Hangul syllable arithmetic (Unicode Standard, section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool IsNfcUnsafe(char32_t cp) {
  return cp >= 0x300 && FindRange(tables::kNfcUnsafe, tables::kNfcUnsafeSize, cp) != nullptr;
}

void AppendDecomposition(char32_t cp, std::u32string* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const tables::Decomposition* begin = tables::kDecompositions;
  const tables::Decomposition* end = begin + tables::kDecompositionsSize;
  const tables::Decomposition* it = std::lower_bound(
      begin, end, cp, [](const tables::Decomposition& d, char32_t c) { return d.code_point < c; });
  if (it == end || it->code_point != cp) {
    out->push_back(cp);
    return;
  }
  out->append(tables::kDecompositionData + it->offset,
              tables::kDecompositionData + it->offset + it->length);
}

// Stable-sorts every run of non-starters by combining class. Nothing bounds
// a run (a text may be all combining marks), so the sort must be O(n log n):
// insertion sort took minutes on a crafted megabyte.
void CanonicalOrder(std::u32string* s) {
  std::vector<std::pair<uint8_t, char32_t>> run;  // (class, code point)
  size_t i = 0;
  while (i < s->size()) {
    if (CombiningClass((*s)[i]) == 0) {
      ++i;
      continue;
    }
    run.clear();
    size_t end = i;
    for (; end < s->size(); ++end) {
      const uint8_t ccc = CombiningClass((*s)[end]);
      if (ccc == 0) break;
      run.emplace_back(ccc, (*s)[end]);
    }
    std::stable_sort(run.begin(), run.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < run.size(); ++k) (*s)[i + k] = run[k].second;
    i = end;
  }
}

// The primary composite of (first, second), or 0 when there is none.
char32_t ComposePair(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const tables::Composition* begin = tables::kCompositions;
  const tables::Composition* end = begin + tables::kCompositionsSize;
  const tables::Composition* it =
      std::lower_bound(begin, end, std::make_pair(first, second),
                       [](const tables::Composition& c, const std::pair<char32_t, char32_t>& key) {
                         return c.first != key.first ? c.first < key.first : c.second < key.second;
                       });
  if (it == end || it->first != first || it->second != second) return 0;
  return it->composite;
}

// Canonical composition of a decomposed, canonically ordered string: each
// character joins the last starter unless a character between them blocks it.
void Compose(std::u32string* s) {
  if (s->empty()) return;
  size_t starter = 0;
  bool have_starter = CombiningClass((*s)[0]) == 0;
  int last_class = have_starter ? 0 : 256;
  size_t kept = 1;
  for (size_t i = 1; i < s->size(); ++i) {
    const char32_t c = (*s)[i];
    const int cc = CombiningClass(c);
    if (have_starter && (last_class < cc || last_class == 0)) {
      const char32_t composite = ComposePair((*s)[starter], c);
      if (composite != 0) {
        (*s)[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = kept;
      have_starter = true;
    }
    last_class = cc;
    (*s)[kept++] = c;
  }
  s->resize(kept);
}

// NFC of a segment that starts at a starter (or at the text start) and ends
// before a code point that cannot interact with it.
void AppendNfcOfSegment(std::string_view segment, std::string* out) {
  std::u32string buffer;
  size_t pos = 0;
  while (pos < segment.size()) AppendDecomposition(NextCodePoint(segment, &pos), &buffer);
  CanonicalOrder(&buffer);
  Compose(&buffer);
  for (char32_t cp : buffer) AppendUtf8(cp, out);
}

// The longest match of the pre-tokenizer pattern at `pos` (there always is
// one: every code point is a letter, a number, white space or other).
size_t Gpt2MatchEnd(std::string_view text, size_t pos) {
  const size_t n = text.size();
  if (text[pos] == '\'' && pos + 1 < n) {
    const char c1 = text[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
    if (pos + 2 < n) {
      const char c2 = text[pos + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return pos + 3;
      }
    }
  }
  size_t next = pos;
  const char32_t first = NextCodePoint(text, &next);
  CharClass body_class = ClassOf(first);
  size_t end = next;
  // " ?\p{L}+", " ?\p{N}+" and " ?[^\s\p{L}\p{N}]+": an optional space
  // followed by a run of one class that is not white space.
  if (first == ' ' && next < n) {
    size_t after = next;
    const CharClass second_class = ClassOf(NextCodePoint(text, &after));
    if (second_class != CharClass::kWhiteSpace) {
      body_class = second_class;
      end = after;
    }
  }
  if (body_class != CharClass::kWhiteSpace) {
    while (end < n) {
      size_t after = end;
      if (ClassOf(NextCodePoint(text, &after)) != body_class) break;
      end = after;
    }
    return end;
  }
  // "\s+(?!\S)|\s+": a white-space run, less its last character when a
  // non-space follows and the run is longer than one.
  size_t last_start = pos;
  while (end < n) {
    size_t after = end;
    if (!IsWhiteSpace(NextCodePoint(text, &after))) break;
    last_start = end;
    end = after;
  }
  if (end == n) return n;
  return last_start > pos ? last_start : end;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) { return utf8::FindIllFormed(text); }

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto lead = static_cast<uint8_t>(text[*pos]);
  if (lead < 0x80) {  // the common case, without a call
    ++*pos;
    return lead;
  }
  const utf8::Sequence s = utf8::DecodeAt(text, *pos);
  *pos += s.length;
  return s.code_point;
}

void AppendUtf8(char32_t cp, std::string* out) { utf8::AppendUtf8(cp, out); }

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const utf8::Sequence s = utf8::DecodeAt(bytes, pos);
    if (s.well_formed) {
      out.append(bytes.data() + pos, s.length);
    } else {
      // One U+FFFD per maximal subpart, as Hugging Face's decoder does.
      utf8::AppendUtf8(utf8::kReplacementCharacter, &out);
    }
    pos += s.length;
  }
  return out;
}

CharClass ClassOf(char32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) - 'a' < 26) return CharClass::kLetter;
    if (cp - '0' < 10) return CharClass::kNumber;
    if (cp == ' ' || cp - '\t' < 5) return CharClass::kWhiteSpace;
    return CharClass::kOther;
  }
  const Range* r = FindRange(tables::kCharClasses, tables::kCharClassesSize, cp);
  return r == nullptr ? CharClass::kOther : static_cast<CharClass>(r->value);
}

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) - 'a' < 26 || cp - '0' < 10 || cp == '_';
  return FindRange(tables::kWordChars, tables::kWordCharsSize, cp) != nullptr;
}

uint8_t CombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const Range* r = FindRange(tables::kCombiningClasses, tables::kCombiningClassesSize, cp);
  return r == nullptr ? 0 : r->value;
}

std::string NfcNormalize(std::string_view text) {
  // Lead bytes below 0xCC start code points below U+0300, none of which NFC
  // changes or combines (the generator checks this).
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<uint8_t>(c) < 0xCC; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  const size_t npos = std::string_view::npos;
  size_t copied = 0;        // text[0, copied) is in `out`
  size_t last_safe = npos;  // the latest safe code point after `copied`
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    if (!IsNfcUnsafe(NextCodePoint(text, &pos))) {
      last_safe = start;
      continue;
    }
    // A safe code point is a starter nothing before it can join, so the
    // segment [last safe, next safe) normalizes on its own.
    const size_t segment_begin = last_safe != npos ? last_safe : start;
    size_t segment_end = pos;
    while (segment_end < text.size()) {
      size_t after = segment_end;
      if (!IsNfcUnsafe(NextCodePoint(text, &after))) break;
      segment_end = after;
    }
    out.append(text.substr(copied, segment_begin - copied));
    AppendNfcOfSegment(text.substr(segment_begin, segment_end - segment_begin), &out);
    copied = pos = segment_end;
    last_safe = npos;
  }
  out.append(text.substr(copied));
  return out;
}

void SplitGpt2Pattern(std::string_view text, std::vector<std::string_view>* pieces) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = Gpt2MatchEnd(text, pos);
    pieces->push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace fca::engine::unicode
