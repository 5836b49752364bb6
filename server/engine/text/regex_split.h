// A regular-expression split as Hugging Face tokenizers' `Split`
// pre-tokenizer does it with behavior "Isolated" and invert false: every
// match is a piece and so is every stretch of text between two matches.
// PCRE2 in UTF mode with Unicode properties (\p{L}, \p{N}, and \s, \w over
// all of Unicode, as Oniguruma has them in the library); bytes that are not
// valid UTF-8 never match and end up in the pieces between matches.
// Torch-free.
#ifndef FCA_SERVER_ENGINE_TEXT_REGEX_SPLIT_H_
#define FCA_SERVER_ENGINE_TEXT_REGEX_SPLIT_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct pcre2_real_code_8;  // pcre2.h's pcre2_code_8

namespace fca::engine {

class RegexSplitter {
 public:
  // INVALID_ARGUMENT naming the offset and PCRE2's message for a pattern
  // that does not compile.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RegexSplitter>> Compile(
      std::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` in order (views into it; together they are
  // `text`). Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  explicit RegexSplitter(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_TEXT_REGEX_SPLIT_H_
