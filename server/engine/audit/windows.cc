#include "server/engine/audit/windows.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fca::engine {

std::string WindowHash(const int32_t* ids, int64_t length) {
  Sha256 h;
  uint8_t le[4];
  for (int64_t i = 0; i < length; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    le[0] = v & 0xff;
    le[1] = (v >> 8) & 0xff;
    le[2] = (v >> 16) & 0xff;
    le[3] = (v >> 24) & 0xff;
    h.Update(le, 4);
  }
  return h.FinishHex();
}

absl::StatusOr<WindowSet> MakeWindows(const std::vector<int32_t>& stream, int64_t window_length,
                                      int64_t max_windows, const std::string& dataset_name) {
  if (window_length < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window length %d is too short; it must be at least 2", window_length));
  }
  if (max_windows < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("max_windows %d is negative", max_windows));
  }
  int64_t n = static_cast<int64_t>(stream.size()) / window_length;
  if (max_windows > 0) n = std::min(n, max_windows);
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset '%s' has %d tokens: not one window of %d", dataset_name,
                        stream.size(), window_length));
  }
  WindowSet w;
  w.window_length = window_length;
  w.ids.assign(stream.begin(), stream.begin() + n * window_length);
  for (int64_t k = 0; k < n; ++k) {
    w.hashes.push_back(WindowHash(w.ids.data() + k * window_length, window_length));
  }
  return w;
}

namespace {

bool IsAsciiAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// The first safe cut (see TokenStream) at or after `from`; npos when none.
size_t SafeCut(const std::string& text, size_t from) {
  for (size_t i = std::max<size_t>(from, 2); i < text.size(); ++i) {
    if (text[i - 1] == '\n' && !IsAsciiSpace(text[i - 2]) && IsAsciiAlnum(text[i])) return i;
  }
  return std::string::npos;
}

// Encodes growing prefixes (doubling) until one yields max_tokens ids.
absl::StatusOr<std::vector<int32_t>> EncodePrefix(const std::string& text,
                                                  const Tokenizer& tokenizer, int64_t max_tokens) {
  // Bytes per token is 1 for bytes and ~4 for BPE on English text.
  size_t want = static_cast<size_t>(max_tokens) * 2 + 1024;
  while (want < text.size()) {
    const size_t cut = SafeCut(text, want);
    if (cut == std::string::npos) break;
    FCA_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                         tokenizer.Encode(std::string_view(text).substr(0, cut)));
    if (static_cast<int64_t>(ids.size()) >= max_tokens) return ids;
    want = cut * 2;
  }
  return tokenizer.Encode(text);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> TokenStream(const Dataset& dataset, const Tokenizer& tokenizer,
                                                 int64_t max_tokens) {
  if (dataset.kind == Dataset::Kind::kText) {
    if (max_tokens <= 0) return tokenizer.Encode(dataset.text);
    return EncodePrefix(dataset.text, tokenizer, max_tokens);
  }
  for (size_t i = 0; i < dataset.tokens.size(); ++i) {
    if (dataset.tokens[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dataset '%s': token %d at position %d is negative", dataset.name, dataset.tokens[i], i));
    }
  }
  return dataset.tokens;
}

absl::Status CheckNoOverlap(const WindowSet& eval, const WindowSet& calib, bool allow_overlap) {
  if (allow_overlap) return absl::OkStatus();
  std::unordered_map<std::string, int64_t> calib_index;
  for (int64_t k = 0; k < calib.count(); ++k) calib_index.emplace(calib.hashes[k], k);
  int64_t shared = 0, first_eval = -1, first_calib = -1;
  for (int64_t k = 0; k < eval.count(); ++k) {
    auto it = calib_index.find(eval.hashes[k]);
    if (it == calib_index.end()) continue;
    if (shared++ == 0) {
      first_eval = k;
      first_calib = it->second;
    }
  }
  if (shared == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "calibration and evaluation share %d window(s) (first: evaluation window %d = "
      "calibration window %d); static profiles must come from independent data "
      "(set allow_overlap to override)",
      shared, first_eval, first_calib));
}

}  // namespace fca::engine
