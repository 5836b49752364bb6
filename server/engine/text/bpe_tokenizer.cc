// Long file: GPT-NeoX/Qwen2 byte-level BPE: tokenizer.json, pre-tokenizers and merges.
#include "server/engine/text/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/text/unicode.h"

namespace fca::engine {
namespace {

// Ids at or above this are refused: the id tables are dense, and the largest
// real vocabularies have a few hundred thousand entries.
constexpr int64_t kMaxVocabSize = int64_t{1} << 21;
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
// The library caches words shorter than this many bytes.
constexpr size_t kMaxCachedWordBytes = 256;

constexpr uint8_t kIdPresent = 1;
constexpr uint8_t kIdSpecial = 2;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// others (controls, space, 0x7F-0xA0, 0xAD) for U+0100 onwards, in order.
struct ByteAlphabet {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 0x144> char_to_byte{};  // -1: not in the alphabet

  ByteAlphabet() {
    char_to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

// The ByteLevel decoder applied to one token: its characters' bytes when all
// are in the byte alphabet, else the token's own UTF-8.
std::string ByteLevelDecodeToken(std::string_view token) {
  const ByteAlphabet& alphabet = Alphabet();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = unicode::NextCodePoint(token, &pos);
    if (cp >= alphabet.char_to_byte.size() || alphabet.char_to_byte[cp] < 0) {
      return std::string(token);
    }
    bytes.push_back(static_cast<char>(alphabet.char_to_byte[cp]));
  }
  return bytes;
}

std::string ByteLevelEncode(std::string_view bytes) {
  const ByteAlphabet& alphabet = Alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::AppendUtf8(alphabet.byte_to_char[static_cast<uint8_t>(c)], &out);
  return out;
}

absl::Status Invalid(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("tokenizer.json: %s %s", field, problem));
}

// The member `key` of `object`, nullptr when absent or null.
const json::Value* Member(const json::Value& object, std::string_view key) {
  const json::Value* v = object.Find(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

absl::StatusOr<bool> OptionalBool(const json::Value& object, std::string_view key,
                                  std::string_view field, bool default_value) {
  const json::Value* v = Member(object, key);
  if (v == nullptr) return default_value;
  if (!v->is_bool()) return Invalid(field, "must be true or false");
  return v->as_bool();
}

// The "type" of a pipeline component, or "" when the component is null.
absl::StatusOr<std::string> ComponentType(const json::Value& root, std::string_view key) {
  const json::Value* v = Member(root, key);
  if (v == nullptr) return std::string();
  if (!v->is_object()) return Invalid(key, "must be an object or null");
  const json::Value* type = v->Find("type");
  if (type == nullptr || !type->is_string() || type->as_string().empty()) {
    return Invalid(absl::StrFormat("%s.type", key), "must be a non-empty string");
  }
  return type->as_string();
}

bool IsTokenId(const json::Value& v) {
  return v.is_int() && v.as_int() >= 0 && v.as_int() < kMaxVocabSize;
}

absl::Status BadTokenId(std::string_view field) {
  return Invalid(field, absl::StrFormat("must be an integer id in [0, %d)", kMaxVocabSize));
}

// Where the code point that ends text[0, end) starts (end > 0, valid UTF-8).
size_t PreviousCodePointStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

bool IsWhiteSpaceAt(std::string_view text, size_t pos) {
  return unicode::IsWhiteSpace(unicode::NextCodePoint(text, &pos));
}

bool IsWordCharAt(std::string_view text, size_t pos) {
  return unicode::IsWordChar(unicode::NextCodePoint(text, &pos));
}

}  // namespace

// Added-token contents, matched leftmost-longest and without overlaps as the
// library's Aho-Corasick automaton (MatchKind::LeftmostLongest) does. Patterns
// are valid UTF-8, so matches start and end on code point boundaries.
class BpeTokenizer::TokenTrie {
 public:
  struct Match {
    size_t start;
    size_t end;
    int32_t added_index;  // into BpeTokenizer::added_
  };

  TokenTrie() : nodes_(1) {}

  bool empty() const { return nodes_.size() == 1; }

  void Add(std::string_view pattern, int32_t added_index) {
    int32_t node = 0;
    for (char c : pattern) {
      const uint8_t byte = static_cast<uint8_t>(c);
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& children = nodes_[node].children;
        children.insert(
            std::upper_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
            {byte, child});
      }
      node = child;
    }
    if (nodes_[node].added_index < 0) nodes_[node].added_index = added_index;
    first_bytes_[static_cast<uint8_t>(pattern[0])] = true;
  }

  void FindAll(std::string_view text, std::vector<Match>* matches) const {
    size_t pos = 0;
    while (pos < text.size()) {
      if (!first_bytes_[static_cast<uint8_t>(text[pos])]) {
        ++pos;
        continue;
      }
      int32_t node = 0;
      size_t best_end = 0;
      int32_t best_index = -1;
      for (size_t i = pos; i < text.size(); ++i) {
        node = Child(node, static_cast<uint8_t>(text[i]));
        if (node < 0) break;
        if (nodes_[node].added_index >= 0) {
          best_end = i + 1;
          best_index = nodes_[node].added_index;
        }
      }
      if (best_index < 0) {
        ++pos;
        continue;
      }
      matches->push_back({pos, best_end, best_index});
      pos = best_end;
    }
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t added_index = -1;
  };

  int32_t Child(int32_t node, uint8_t byte) const {
    const auto& children = nodes_[node].children;
    for (const auto& [b, child] : children) {
      if (b == byte) return child;
      if (b > byte) break;
    }
    return -1;
  }

  std::vector<Node> nodes_;
  std::array<bool, 256> first_bytes_{};
};

// (left id, right id) -> (rank, merged id), open addressing with linear
// probing: the hot lookup of BPE.
class BpeTokenizer::MergeMap {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged_id;
  };

  explicit MergeMap(size_t expected) {
    size_t capacity = 16;
    while (capacity < expected * 2) capacity *= 2;
    slots_.assign(capacity, Entry{kEmpty, 0, 0});
    mask_ = capacity - 1;
  }

  // A later merge of the same pair replaces the earlier one, as in the
  // library (its merge map is built by collecting into a HashMap).
  void Insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
    const uint64_t key = Key(left, right);
    size_t i = Hash(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Entry{key, rank, merged_id};
  }

  const Entry* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static size_t Hash(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(key ^ (key >> 29));
  }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

// Encoded words, sharded to keep lock contention low. A full shard is
// cleared rather than evicting entry by entry: the cache only saves time.
class BpeTokenizer::WordCache {
 public:
  bool Lookup(std::string_view word, std::vector<int32_t>* ids) const {
    Shard& shard = ShardFor(word);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.words.find(std::string(word));
    if (it == shard.words.end()) return false;
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(std::string_view word, const int32_t* ids, size_t count) const {
    Shard& shard = ShardFor(word);
    absl::MutexLock lock(&shard.mu);
    if (shard.words.size() >= kMaxWordsPerShard) shard.words.clear();
    shard.words.emplace(std::string(word), std::vector<int32_t>(ids, ids + count));
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxWordsPerShard = 4096;
  struct Shard {
    absl::Mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> words ABSL_GUARDED_BY(mu);
  };

  Shard& ShardFor(std::string_view word) const {
    return shards_[std::hash<std::string_view>()(word) % kShards];
  }

  mutable std::array<Shard, kShards> shards_;
};

BpeTokenizer::BpeTokenizer()
    : raw_trie_(std::make_unique<TokenTrie>()),
      normalized_trie_(std::make_unique<TokenTrie>()),
      cache_(std::make_unique<WordCache>()) {
  byte_ids_.fill(-1);
}

BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path, "tokenizer file", kMaxFileBytes);
  if (!contents.ok()) return WithBaseName(contents.status(), path);
  return FromJson(*contents);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(std::string_view json) {
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer());
  FCA_RETURN_IF_ERROR(tokenizer->Load(json));
  return tokenizer;
}

absl::Status BpeTokenizer::Load(std::string_view text) {
  absl::StatusOr<json::Value> parsed = json::Parse(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tokenizer.json: %s", parsed.status().message()));
  }
  const json::Value& root = *parsed;
  if (!root.is_object()) return Invalid("the document", "must be a JSON object");
  const json::Value* model = Member(root, "model");
  if (model == nullptr) return Invalid("model", "is missing");
  FCA_RETURN_IF_ERROR(LoadModel(*model));
  if (const json::Value* added = Member(root, "added_tokens")) {
    FCA_RETURN_IF_ERROR(LoadAddedTokens(*added));
  }
  FCA_RETURN_IF_ERROR(LoadPipeline(root));
  return BuildIdTables();
}

absl::Status BpeTokenizer::LoadModel(const json::Value& model) {
  if (!model.is_object()) return Invalid("model", "must be an object");
  const json::Value* type = Member(model, "type");
  if (type == nullptr || !type->is_string()) return Invalid("model.type", "must be a string");
  if (type->as_string() != "BPE") {
    return Invalid("model.type",
                   absl::StrFormat("'%s' is not supported (only BPE)", type->as_string()));
  }
  if (const json::Value* dropout = Member(model, "dropout")) {
    if (!dropout->is_number() || dropout->as_double() != 0) {
      return Invalid("model.dropout", "is not supported (must be null or 0)");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json::Value* v = Member(model, key);
    if (v != nullptr && !(v->is_string() && v->as_string().empty())) {
      return Invalid(absl::StrFormat("model.%s", key), "is not supported (must be null)");
    }
  }
  FCA_ASSIGN_OR_RETURN(const bool byte_fallback,
                       OptionalBool(model, "byte_fallback", "model.byte_fallback", false));
  if (byte_fallback) return Invalid("model.byte_fallback", "is not supported (must be false)");
  FCA_ASSIGN_OR_RETURN(fuse_unk_, OptionalBool(model, "fuse_unk", "model.fuse_unk", false));
  FCA_ASSIGN_OR_RETURN(ignore_merges_,
                       OptionalBool(model, "ignore_merges", "model.ignore_merges", false));

  const json::Value* vocab = Member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return Invalid("model.vocab", "must be an object of token -> id");
  }
  vocab_.reserve(vocab->as_object().size());
  for (const auto& [token, id_value] : vocab->as_object()) {
    if (!IsTokenId(id_value)) return BadTokenId(absl::StrFormat("model.vocab['%s']", token));
    vocab_.emplace(token, static_cast<int32_t>(id_value.as_int()));
  }
  if (const json::Value* unk = Member(model, "unk_token")) {
    if (!unk->is_string()) return Invalid("model.unk_token", "must be a string or null");
    auto it = vocab_.find(unk->as_string());
    if (it == vocab_.end()) return Invalid("model.unk_token", "is not in model.vocab");
    unk_id_ = it->second;
  }
  const json::Value* merges = Member(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return Invalid("model.merges", "must be an array");
  }
  return LoadMerges(*merges);
}

absl::Status BpeTokenizer::LoadMerges(const json::Value& merges) {
  merges_ = std::make_unique<MergeMap>(merges.as_array().size());
  int32_t rank = 0;
  std::string merged;
  for (size_t i = 0; i < merges.as_array().size(); ++i) {
    const json::Value& entry = merges.as_array()[i];
    const auto field = [i] { return absl::StrFormat("model.merges[%d]", i); };
    std::string_view left, right;
    if (entry.is_string()) {
      // The legacy "a b" form; the library skips "#version" lines.
      const std::string& line = entry.as_string();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return Invalid(field(), "must be two tokens separated by one space");
      }
      left = std::string_view(line).substr(0, space);
      right = std::string_view(line).substr(space + 1);
    } else if (entry.is_array() && entry.as_array().size() == 2 &&
               entry.as_array()[0].is_string() && entry.as_array()[1].is_string()) {
      left = entry.as_array()[0].as_string();
      right = entry.as_array()[1].as_string();
    } else {
      return Invalid(field(), "must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    merged.assign(left.data(), left.size()).append(right.data(), right.size());
    const auto left_it = vocab_.find(std::string(left));
    const auto right_it = vocab_.find(std::string(right));
    const auto merged_it = vocab_.find(merged);
    for (const auto& [it, token] : {std::make_pair(left_it, std::string_view(left)),
                                    std::make_pair(right_it, std::string_view(right)),
                                    std::make_pair(merged_it, std::string_view(merged))}) {
      if (it == vocab_.end()) {
        return Invalid(field(), absl::StrFormat("uses '%s', which is not in model.vocab", token));
      }
    }
    merges_->Insert(left_it->second, right_it->second, rank++, merged_it->second);
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::LoadAddedTokens(const json::Value& added_tokens) {
  if (!added_tokens.is_array()) return Invalid("added_tokens", "must be an array");
  std::unordered_set<std::string> contents;
  for (size_t i = 0; i < added_tokens.as_array().size(); ++i) {
    const json::Value& entry = added_tokens.as_array()[i];
    const std::string field = absl::StrFormat("added_tokens[%d]", i);
    if (!entry.is_object()) return Invalid(field, "must be an object");
    AddedToken token;
    const json::Value* content = Member(entry, "content");
    if (content == nullptr || !content->is_string() || content->as_string().empty()) {
      return Invalid(field + ".content", "must be a non-empty string");
    }
    token.content = content->as_string();
    if (unicode::FindInvalidUtf8(token.content) != std::string_view::npos) {
      return Invalid(field + ".content", "is not valid UTF-8");
    }
    if (!contents.insert(token.content).second) {
      return Invalid(field + ".content", "repeats an earlier added token");
    }
    const json::Value* id = Member(entry, "id");
    if (id == nullptr || !IsTokenId(*id)) return BadTokenId(field + ".id");
    token.id = static_cast<int32_t>(id->as_int());
    // As in the library, a content already in the vocabulary keeps its id.
    if (auto it = vocab_.find(token.content); it != vocab_.end()) token.id = it->second;
    FCA_ASSIGN_OR_RETURN(token.special, OptionalBool(entry, "special", field + ".special", false));
    FCA_ASSIGN_OR_RETURN(token.single_word,
                         OptionalBool(entry, "single_word", field + ".single_word", false));
    FCA_ASSIGN_OR_RETURN(token.lstrip, OptionalBool(entry, "lstrip", field + ".lstrip", false));
    FCA_ASSIGN_OR_RETURN(token.rstrip, OptionalBool(entry, "rstrip", field + ".rstrip", false));
    FCA_ASSIGN_OR_RETURN(token.normalized,
                         OptionalBool(entry, "normalized", field + ".normalized", !token.special));
    added_.push_back(std::move(token));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::LoadPipeline(const json::Value& root) {
  FCA_ASSIGN_OR_RETURN(const std::string normalizer, ComponentType(root, "normalizer"));
  if (normalizer == "NFC") {
    nfc_ = true;
  } else if (!normalizer.empty()) {
    return Invalid("normalizer.type",
                   absl::StrFormat("'%s' is not supported (null or NFC)", normalizer));
  }

  FCA_ASSIGN_OR_RETURN(const std::string pre_tokenizer, ComponentType(root, "pre_tokenizer"));
  if (pre_tokenizer == "Sequence") {
    FCA_RETURN_IF_ERROR(LoadSplitSequence(*Member(root, "pre_tokenizer")));
  } else if (pre_tokenizer == "ByteLevel") {
    const json::Value& byte_level = *Member(root, "pre_tokenizer");
    FCA_ASSIGN_OR_RETURN(add_prefix_space_, OptionalBool(byte_level, "add_prefix_space",
                                                         "pre_tokenizer.add_prefix_space", true));
    FCA_ASSIGN_OR_RETURN(use_regex_,
                         OptionalBool(byte_level, "use_regex", "pre_tokenizer.use_regex", true));
  } else {
    return Invalid("pre_tokenizer.type",
                   absl::StrFormat("'%s' is not supported (ByteLevel, or a Sequence of a regex "
                                   "Split and a ByteLevel)",
                                   pre_tokenizer));
  }

  FCA_ASSIGN_OR_RETURN(const std::string decoder, ComponentType(root, "decoder"));
  if (decoder != "ByteLevel") {
    return Invalid("decoder.type",
                   absl::StrFormat("'%s' is not supported (only ByteLevel)", decoder));
  }
  FCA_ASSIGN_OR_RETURN(const std::string post, ComponentType(root, "post_processor"));
  if (!post.empty() && post != "ByteLevel") {
    return Invalid("post_processor.type",
                   absl::StrFormat("'%s' is not supported (null or ByteLevel)", post));
  }
  return absl::OkStatus();
}

// Qwen2's pre-tokenizer: Sequence[Split(Regex, "Isolated", invert false),
// ByteLevel(add_prefix_space false, use_regex false)]: the regex split, then
// each piece's bytes mapped to the byte-level alphabet.
absl::Status BpeTokenizer::LoadSplitSequence(const json::Value& sequence) {
  const std::string field = "pre_tokenizer.pretokenizers";
  const json::Value* list = Member(sequence, "pretokenizers");
  if (list == nullptr || !list->is_array() || list->as_array().size() != 2) {
    return Invalid(field, "must be [Split, ByteLevel] (the only Sequence supported)");
  }
  const json::Value& split = list->as_array()[0];
  const json::Value& byte_level = list->as_array()[1];
  auto type_is = [](const json::Value& v, const char* type) {
    const json::Value* t = v.is_object() ? v.Find("type") : nullptr;
    return t != nullptr && t->is_string() && t->as_string() == type;
  };
  if (!type_is(split, "Split") || !type_is(byte_level, "ByteLevel")) {
    return Invalid(field, "must be [Split, ByteLevel] (the only Sequence supported)");
  }
  const json::Value* pattern = Member(split, "pattern");
  const json::Value* regex =
      pattern != nullptr && pattern->is_object() ? pattern->Find("Regex") : nullptr;
  if (regex == nullptr || !regex->is_string()) {
    return Invalid(field + "[0].pattern", "must be {\"Regex\": <pattern>}");
  }
  const json::Value* behavior = Member(split, "behavior");
  if (behavior == nullptr || !behavior->is_string() || behavior->as_string() != "Isolated") {
    return Invalid(field + "[0].behavior", "is not supported (only Isolated)");
  }
  FCA_ASSIGN_OR_RETURN(const bool invert,
                       OptionalBool(split, "invert", field + "[0].invert", false));
  FCA_ASSIGN_OR_RETURN(const bool prefix, OptionalBool(byte_level, "add_prefix_space",
                                                       field + "[1].add_prefix_space", true));
  FCA_ASSIGN_OR_RETURN(const bool regex_too,
                       OptionalBool(byte_level, "use_regex", field + "[1].use_regex", true));
  if (invert) return Invalid(field + "[0].invert", "is not supported (only false)");
  if (prefix) return Invalid(field + "[1].add_prefix_space", "is not supported (only false)");
  if (regex_too) return Invalid(field + "[1].use_regex", "is not supported (only false)");
  auto compiled = RegexSplitter::Compile(regex->as_string());
  if (!compiled.ok()) {
    return Invalid(field + "[0].pattern.Regex", std::string(compiled.status().message()));
  }
  split_ = std::move(*compiled);
  add_prefix_space_ = false;
  use_regex_ = false;
  return absl::OkStatus();
}

absl::Status BpeTokenizer::BuildIdTables() {
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab_) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken& token : added_) max_id = std::max<int64_t>(max_id, token.id);
  if (max_id < 0) return Invalid("model.vocab", "is empty");
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  id_flags_.assign(tokens_.size(), 0);
  for (const auto& [token, id] : vocab_) {
    if (id_flags_[id] & kIdPresent) {
      return Invalid("model.vocab", absl::StrFormat("gives id %d to two tokens", id));
    }
    tokens_[id] = token;
    id_flags_[id] = kIdPresent;
  }
  std::unordered_set<std::string> special_contents;
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& token = added_[i];
    if ((id_flags_[token.id] & kIdPresent) && tokens_[token.id] != token.content) {
      return Invalid(absl::StrFormat("added_tokens[%d].id", i),
                     absl::StrFormat("%d is already used", token.id));
    }
    tokens_[token.id] = token.content;
    id_flags_[token.id] |= kIdPresent;
    if (token.special) special_contents.insert(token.content);
    // The normalized-token trie holds normalized contents, as the library's.
    if (token.normalized) {
      normalized_trie_->Add(nfc_ ? unicode::NfcNormalize(token.content) : token.content,
                            static_cast<int32_t>(i));
    } else {
      raw_trie_->Add(token.content, static_cast<int32_t>(i));
    }
  }
  decoded_.resize(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!(id_flags_[id] & kIdPresent)) continue;
    // Decoding skips special tokens by content, as the library does.
    if (special_contents.count(tokens_[id]) != 0) id_flags_[id] |= kIdSpecial;
    decoded_[id] = ByteLevelDecodeToken(tokens_[id]);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(ByteLevelEncode(std::string(1, static_cast<char>(b))));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  if (const size_t bad = unicode::FindInvalidUtf8(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bpe tokenizer: text is not valid UTF-8 at byte %d", bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  SplitOnAddedTokens(text, *raw_trie_, &ids, [&](std::string_view piece) {
    const std::string normalized = nfc_ ? unicode::NfcNormalize(piece) : std::string(piece);
    SplitOnAddedTokens(normalized, *normalized_trie_, &ids,
                       [&](std::string_view rest) { EncodePiece(rest, &ids); });
  });
  return ids;
}

template <typename OnText>
void BpeTokenizer::SplitOnAddedTokens(std::string_view text, const TokenTrie& trie,
                                      std::vector<int32_t>* ids, OnText on_text) const {
  if (text.empty()) return;
  if (trie.empty()) {
    on_text(text);
    return;
  }
  std::vector<TokenTrie::Match> matches;
  trie.FindAll(text, &matches);
  size_t done = 0;  // the library's start_offset
  for (const TokenTrie::Match& match : matches) {
    const AddedToken& token = added_[match.added_index];
    size_t start = match.start;
    size_t stop = match.end;
    if (token.single_word) {
      // The library's \w$ before and ^\w after the match.
      const bool word_before = start > 0 && IsWordCharAt(text, PreviousCodePointStart(text, start));
      const bool word_after = stop < text.size() && IsWordCharAt(text, stop);
      if (word_before || word_after) continue;
    }
    // The strips never rescan text an earlier match covered, so a run of
    // matches (an added token of white space, say) stays linear.
    if (token.lstrip) {  // \s*$ before the match, not reaching into the last one
      while (start > done) {
        const size_t previous = PreviousCodePointStart(text, start);
        if (!IsWhiteSpaceAt(text, previous)) break;
        start = previous;
      }
      start = std::max(start, done);
    }
    if (token.rstrip) {  // ^\s* after the match
      if (stop <= done) {
        // The match lies inside white space an earlier rstrip swallowed, and
        // that run ended at `done`.
        stop = done;
      }
      while (stop < text.size() && IsWhiteSpaceAt(text, stop)) {
        unicode::NextCodePoint(text, &stop);
      }
    }
    // The library would fail on this slice (an earlier rstrip swallowed the
    // whole match and lstrip moved the start past it); drop the match.
    if (start > stop) continue;
    if (start > done) on_text(text.substr(done, start - done));
    ids->push_back(token.id);
    done = stop;
  }
  if (done < text.size()) on_text(text.substr(done));
}

void BpeTokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const {
  std::string prefixed;
  if (add_prefix_space_ && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed.append(1, ' ').append(piece.data(), piece.size());
    piece = prefixed;
  }
  if (!use_regex_ && split_ == nullptr) {
    EncodeWord(piece, ids);
    return;
  }
  std::vector<std::string_view> words;
  if (split_ != nullptr) {
    split_->Split(piece, &words);
  } else {
    unicode::SplitGpt2Pattern(piece, &words);
  }
  for (std::string_view word : words) EncodeWord(word, ids);
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() == 1 && byte_ids_[static_cast<uint8_t>(word[0])] >= 0) {
    ids->push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto it = vocab_.find(ByteLevelEncode(word)); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable && cache_->Lookup(word, ids)) return;
  const size_t first = ids->size();
  MergeWord(word, ids);
  if (cacheable) cache_->Insert(word, ids->data() + first, ids->size() - first);
}

void BpeTokenizer::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged_id;
  };
  // A max-heap on "later" gives the lowest rank, then the leftmost position.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();

  // One symbol per byte. A byte missing from the vocabulary becomes the
  // unknown token (runs fused when fuse_unk) or, without one, is dropped.
  bool pending_unk = false;
  const auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, true});
  };
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      add(id);
    } else if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) add(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(unk_id_);

  const auto push = [&](int32_t pos) {
    const Symbol& left = symbols[pos];
    if (left.next < 0) return;
    if (const MergeMap::Entry* m = merges_->Find(left.id, symbols[left.next].id)) {
      heap.push_back({m->rank, pos, m->merged_id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push(pos);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip stale candidates: the pair at this position has changed.
    const MergeMap::Entry* m = merges_->Find(left.id, right.id);
    if (m == nullptr || m->merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids->push_back(s.id);
  }
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  return Decode(ids, BpeDecodeOptions());
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids,
                                                 const BpeDecodeOptions& options) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !(id_flags_[id] & kIdPresent)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bpe tokenizer: id %d at position %d is not in the vocabulary", id, i));
    }
    if (options.skip_special_tokens && (id_flags_[id] & kIdSpecial)) continue;
    bytes.append(decoded_[id]);
  }
  return unicode::Utf8Lossy(bytes);
}

absl::StatusOr<std::string> BpeTokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !(id_flags_[id] & kIdPresent)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bpe tokenizer: id %d is not in the vocabulary", id));
  }
  return tokens_[id];
}

}  // namespace fca::engine
