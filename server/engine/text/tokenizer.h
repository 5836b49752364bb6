// Tokenizers: text <-> token ids. Torch-free.
#ifndef FCA_SERVER_ENGINE_TEXT_TOKENIZER_H_
#define FCA_SERVER_ENGINE_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::engine {

// A tokenizer maps text to ids in [0, vocab_size()). Implementations are
// immutable after construction and safe to use from several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "bpe", ...: recorded with results for reproducibility.
  virtual std::string name() const = 0;
  // Ids the tokenizer can produce are < vocab_size(). A model's embedding may
  // have more rows than this.
  virtual int64_t vocab_size() const = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text) const = 0;
  // INVALID_ARGUMENT naming the first id outside the vocabulary.
  [[nodiscard]] virtual absl::StatusOr<std::string> Decode(
      const std::vector<int32_t>& ids) const = 0;
};

// One id per byte (0..255); decoding is exact for any byte string.
class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  [[nodiscard]] absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  [[nodiscard]] absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_TEXT_TOKENIZER_H_
