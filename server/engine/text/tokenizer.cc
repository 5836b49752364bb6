#include "server/engine/text/tokenizer.h"

#include "absl/strings/str_format.h"

namespace fca::engine {

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255) {
      return absl::InvalidArgumentError(
          absl::StrFormat("byte tokenizer: id %d at position %d is outside [0, 256)", ids[i], i));
    }
    out[i] = static_cast<char>(ids[i]);
  }
  return out;
}

}  // namespace fca::engine
