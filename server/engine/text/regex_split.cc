#include "server/engine/text/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_format.h"

namespace fca::engine {
namespace {

// The offset after the UTF-8 character (or stray byte) at `at`.
size_t NextChar(std::string_view text, size_t at) {
  ++at;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return at;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrFormat("regular expression does not compile at offset %d: %s", offset,
                        reinterpret_cast<const char*>(message)));
  }
  // Faster matching where the JIT is available; the interpreter otherwise.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(code));
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(code_); }

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0, from = 0;
  while (from < text.size() &&
         pcre2_match(code_, subject, text.size(), from, 0, match, nullptr) > 0) {
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    const size_t start = span[0], end = span[1];
    if (end == start) {  // an empty match splits nothing: look further on
      from = NextChar(text, start);
      continue;
    }
    if (start > done) pieces->push_back(text.substr(done, start - done));
    pieces->push_back(text.substr(start, end - start));
    done = from = end;
  }
  if (done < text.size()) pieces->push_back(text.substr(done));
  pcre2_match_data_free(match);
}

}  // namespace fca::engine
