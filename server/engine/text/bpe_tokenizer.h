// Byte-level BPE (GPT-2, GPT-NeoX, Pythia) read from a Hugging Face
// `tokenizer.json`. Torch-free.
#ifndef FCA_SERVER_ENGINE_TEXT_BPE_TOKENIZER_H_
#define FCA_SERVER_ENGINE_TEXT_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/text/regex_split.h"
#include "server/engine/text/tokenizer.h"

namespace fca::json {
class Value;
}  // namespace fca::json

namespace fca::engine {

struct BpeDecodeOptions {
  // Drop the ids of added tokens marked "special" (e.g. <|endoftext|>).
  bool skip_special_tokens = false;
};

// Encodes exactly as the Hugging Face `tokenizers` library (Rust crate 0.22)
// does with add_special_tokens=false, for the configurations it accepts:
//   - model: "BPE" with vocab and merges ("a b" strings or ["a", "b"] pairs);
//     unk_token / fuse_unk / ignore_merges are honoured; dropout (other than
//     0), byte_fallback, continuing_subword_prefix and end_of_word_suffix are
//     refused;
//   - normalizer: null or "NFC";
//   - pre_tokenizer: "ByteLevel" (add_prefix_space, use_regex);
//   - decoder: "ByteLevel"; post_processor: null or "ByteLevel" (neither adds
//     tokens to an encoding);
//   - added_tokens with their single_word / lstrip / rstrip / normalized /
//     special flags. As in the library, an added token whose content is in
//     model.vocab takes the vocabulary's id.
// Anything else is refused with INVALID_ARGUMENT naming the field, as is an
// id at or above 2^21. `truncation` and `padding` are ignored: Encode returns
// every token.
//
// Character properties and NFC use Unicode 14.0 (server/engine/unicode.h).
//
// Encode pipeline, as in the library: added tokens with normalized=false are
// matched on the raw text (leftmost, longest first); the rest is normalized
// piece by piece, and added tokens with normalized=true are matched on the
// normalized text; what remains is split by the pre-tokenizer, mapped to the
// byte-level alphabet and merged by BPE rank.
//
// Immutable after construction apart from an internal, mutex-protected cache
// of encoded words: safe to use from several threads.
class BpeTokenizer : public Tokenizer {
 public:
  // Reads and parses a tokenizer.json. NOT_FOUND / PERMISSION_DENIED when the
  // file cannot be opened, INVALID_ARGUMENT when its content is malformed or
  // unsupported.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromFile(
      const std::string& path);
  // Parses the content of a tokenizer.json; INVALID_ARGUMENT naming the
  // offending field when it is malformed or unsupported.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(
      std::string_view json);

  ~BpeTokenizer() override;
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  std::string name() const override { return "bpe"; }
  // One more than the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }

  // INVALID_ARGUMENT when `text` is not valid UTF-8 (naming the byte offset).
  [[nodiscard]] absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // Decode with special tokens kept.
  [[nodiscard]] absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  // The ByteLevel decoder: the bytes of every token, concatenated, with each
  // ill-formed UTF-8 subpart replaced by U+FFFD (no clean-up of spaces).
  // Added tokens decode to their content, which, as in the library, also
  // passes through the byte-level map: content made only of byte-alphabet
  // characters (e.g. "é", the stand-in for byte 0xE9) decodes to those bytes.
  // INVALID_ARGUMENT naming the first id that has no token (the library
  // would skip it silently).
  [[nodiscard]] absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                                   const BpeDecodeOptions& options) const;

  // The token string of `id` as tokenizer.json spells it (byte-level
  // alphabet, e.g. "Ġworld"); INVALID_ARGUMENT when `id` has no token.
  [[nodiscard]] absl::StatusOr<std::string> IdToToken(int32_t id) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
  };
  class TokenTrie;
  class MergeMap;
  class WordCache;

  BpeTokenizer();

  [[nodiscard]] absl::Status Load(std::string_view json);
  [[nodiscard]] absl::Status LoadModel(const json::Value& model);
  [[nodiscard]] absl::Status LoadMerges(const json::Value& merges);
  [[nodiscard]] absl::Status LoadAddedTokens(const json::Value& added_tokens);
  [[nodiscard]] absl::Status LoadPipeline(const json::Value& root);
  [[nodiscard]] absl::Status LoadSplitSequence(const json::Value& sequence);
  [[nodiscard]] absl::Status BuildIdTables();

  // Splits `text` around the added tokens of `trie` as the library's
  // find_matches does (single_word, lstrip, rstrip): calls `on_text` for each
  // non-empty piece between matches and appends matched ids to `ids`, all in
  // text order.
  template <typename OnText>
  void SplitOnAddedTokens(std::string_view text, const TokenTrie& trie, std::vector<int32_t>* ids,
                          OnText on_text) const;
  // Pre-tokenizes and encodes a normalized piece free of added tokens.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const;
  // BPE of one pre-token (raw bytes), through the cache.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  // The library's Word::merge_all: merges the lowest-ranked adjacent pair,
  // leftmost first, until no pair has a merge.
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // Vocabulary: token string (byte-level alphabet) -> id, model vocab only.
  std::unordered_map<std::string, int32_t> vocab_;
  // Per id: token string ("" where the id has no token) and what it decodes
  // to; tokens_.size() is vocab_size().
  std::vector<std::string> tokens_;
  std::vector<std::string> decoded_;
  std::vector<uint8_t> id_flags_;  // kIdPresent | kIdSpecial
  std::vector<AddedToken> added_;
  std::unique_ptr<TokenTrie> raw_trie_;         // added tokens, normalized=false
  std::unique_ptr<TokenTrie> normalized_trie_;  // added tokens, normalized=true
  std::unique_ptr<MergeMap> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single byte, -1 if none
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  // A Sequence pre-tokenizer's regex Split (Qwen2): replaces the GPT-2 split.
  std::unique_ptr<RegexSplitter> split_;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_TEXT_BPE_TOKENIZER_H_
