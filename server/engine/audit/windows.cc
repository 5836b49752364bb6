#include "server/engine/audit/windows.h"

#include <unordered_map>

#include "absl/strings/str_format.h"
#include "common/sha256.h"

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
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset '%s' has %d tokens: not one window of %d", dataset_name, stream.size(),
        window_length));
  }
  WindowSet w;
  w.window_length = window_length;
  w.ids.assign(stream.begin(), stream.begin() + n * window_length);
  for (int64_t k = 0; k < n; ++k) {
    w.hashes.push_back(WindowHash(w.ids.data() + k * window_length, window_length));
  }
  return w;
}

absl::StatusOr<std::vector<int32_t>> TokenStream(const Dataset& dataset,
                                                 const Tokenizer& tokenizer) {
  if (dataset.kind == Dataset::Kind::kTokens) {
    for (size_t i = 0; i < dataset.tokens.size(); ++i) {
      if (dataset.tokens[i] < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dataset '%s': token %d at position %d is negative", dataset.name,
            dataset.tokens[i], i));
      }
    }
    return dataset.tokens;
  }
  return tokenizer.Encode(dataset.text);
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
