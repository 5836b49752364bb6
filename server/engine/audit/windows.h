// Datasets and their windows (fca.md "Objects"). Torch-free.
#ifndef FCA_SERVER_ENGINE_AUDIT_WINDOWS_H_
#define FCA_SERVER_ENGINE_AUDIT_WINDOWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/text/tokenizer.h"

namespace fca::engine {

// One dataset: text (tokenized with each model's tokenizer) or a
// pre-tokenized id stream (taken as is).
struct Dataset {
  enum class Kind { kText, kTokens };
  std::string name;
  Kind kind = Kind::kText;
  std::string text;             // kText
  std::vector<int32_t> tokens;  // kTokens
  std::string sha256;           // content hash, recorded with results
};

// The consecutive, non-overlapping windows of one token stream.
struct WindowSet {
  int64_t window_length = 0;        // T
  std::vector<int32_t> ids;         // count() * T ids, row-major
  std::vector<std::string> hashes;  // WindowHash of each window
  int64_t count() const { return static_cast<int64_t>(hashes.size()); }
};

// SHA-256 (hex) of a window's ids as little-endian int32.
std::string WindowHash(const int32_t* ids, int64_t length);

// Windows of `stream`: slices [k*T, (k+1)*T) from the start, the remainder
// dropped, at most `max_windows` (0 = all). INVALID_ARGUMENT when T < 2 or
// the stream holds no complete window.
[[nodiscard]] absl::StatusOr<WindowSet> MakeWindows(const std::vector<int32_t>& stream,
                                                    int64_t window_length, int64_t max_windows,
                                                    const std::string& dataset_name);

// Tokenizes (kText) or copies (kTokens) a dataset into one id stream. With
// max_tokens > 0 the stream may stop once it holds max_tokens ids (it may
// hold more): text is then tokenized in growing prefixes, each cut right
// after a single '\n' that follows a non-space character and precedes an
// ASCII letter or digit. No tokenizer of this engine (bytes, or GPT-NeoX BPE
// with NFC and the GPT-2 split) lets a token or a pre-token cross such a
// cut, so a prefix's ids are exactly the first ids of the whole text's.
[[nodiscard]] absl::StatusOr<std::vector<int32_t>> TokenStream(const Dataset& dataset,
                                                               const Tokenizer& tokenizer,
                                                               int64_t max_tokens = 0);

// INVALID_ARGUMENT when the sets share a window (by hash), with the count
// and the first shared pair, unless allow_overlap.
[[nodiscard]] absl::Status CheckNoOverlap(const WindowSet& eval, const WindowSet& calib,
                                          bool allow_overlap);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_WINDOWS_H_
