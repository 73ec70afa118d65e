// tokenizer_pipeline.h: the one Tokenizer class every format loads into, with Hugging Face
// tokenizers' pipeline: added tokens are cut out of the text first (those with normalized=false
// from the raw text, the others from the normalized text), then each remaining part is
// normalized (tokenizer_normalize.h), pre-tokenized into pieces (tokenizer_pretok.h) and each
// piece encoded by a subword model (WordModel: BPE, Unigram, WordPiece); the post-processor's
// template adds bos/eos when asked. Decoding maps ids to token strings and runs the decoder
// steps. The loaders (tokenizer.cpp, tokenizer_hf.cpp) only translate a file into
// PipelineParts. Internal to src/text.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_normalize.h"
#include "text/tokenizer_pretok.h"

namespace zt::tok {

// Thread-safe memo of piece -> ids. Sharded mutexes keep concurrent encoders from contending;
// a full shard is simply cleared (entries are cheap to recompute, results never change).
class PieceCache {
 public:
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;  // appends on a hit
  void store(std::string_view piece, const int32_t* ids, size_t n) const;
  static constexpr size_t kMaxPieceBytes = 128;  // longer pieces rarely repeat

 private:
  static constexpr size_t kShards = 64, kShardCapacity = 4096;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

// A subword model: one pre-tokenized piece to ids. Thread-safe.
class WordModel {
 public:
  virtual ~WordModel();
  virtual void encode(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual int32_t token_to_id(std::string_view token) const = 0;  // as the file writes it; -1 if absent
  virtual const std::string* id_to_token(int32_t id) const = 0;   // nullptr if absent
  virtual int vocab_size() const = 0;                             // 1 + the largest id
};

std::unique_ptr<WordModel> make_unigram(std::vector<std::pair<std::string, double>> vocab, int32_t unk_id,
                                        bool byte_fallback);
std::unique_ptr<WordModel> make_wordpiece(std::unordered_map<std::string, int32_t> vocab, std::string unk_token,
                                          std::string prefix, size_t max_chars);

struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = true;
};

struct DecodeStep {
  enum class Kind { byte_level, byte_fallback, fuse, strip, replace, metaspace, wordpiece };
  explicit DecodeStep(Kind k = Kind::fuse) : kind(k) {}
  Kind kind;
  std::string from, to;        // replace; metaspace replacement (from); wordpiece prefix (from)
  size_t start = 0, stop = 0;  // strip: characters of `from` removed at each end of a token
  bool prepend = true;         // metaspace: the first token's leading replacement is dropped
  bool cleanup = false;        // wordpiece: clean_up_tokenization
};

// The post-processor's single-sequence template: ids before and after the text.
struct PostTemplate {
  std::vector<int32_t> before, after;
};

struct PipelineParts {
  std::string name;    // "gpt2-bpe", "hf-bpe", "hf-unigram", "hf-wordpiece"
  std::string source;  // the file it was loaded from, for errors ("" = none)
  std::vector<NormalizeStep> normalizer;
  std::vector<PreTokStep> pre_tokenizer;
  std::unique_ptr<WordModel> model;
  std::vector<AddedToken> added;
  bool has_decoder = false;  // without one, decode joins tokens with spaces (as Hugging Face does)
  std::vector<DecodeStep> decoder;
  PostTemplate post;
  int32_t bos_id = -1, eos_id = -1;
};

// Added tokens' texts -> their index, for leftmost-longest matching (what Hugging Face's
// Aho-Corasick automaton with MatchKind::LeftmostLongest finds): a byte trie, so a text is scanned
// in O(bytes x longest token) however many tokens there are (Gemma 3 has 6,415, most starting "<").
class AddedTrie {
 public:
  void insert(std::string_view text, uint32_t index);  // the first insert of a text wins
  // The longest inserted text starting at text[at]: its index and length; false if none.
  bool longest_at(std::string_view text, size_t at, uint32_t* index, size_t* len) const;

 private:
  std::unordered_map<uint64_t, uint32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int64_t> value_{-1};                // per node: index, or -1; node 0 is the root
  std::array<bool, 256> first_{};                 // bytes that start some text
};

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(PipelineParts parts);
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text, EncodeOptions opt) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return vocab_size_; }
  int32_t eos_id() const override { return parts_.eos_id; }
  int32_t bos_id() const override { return parts_.bos_id; }
  std::string name() const override { return parts_.name; }
  bool splits_at_newlines() const override { return splits_at_newlines_; }

 private:
  // Normalizes, pre-tokenizes and encodes one part of the text (no raw added tokens in it),
  // cutting out the normalized added tokens first.
  void encode_part(std::string_view text, bool at_start, bool split_special, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  struct Part {
    size_t start, end;
    const AddedToken* token;
  };
  // Cuts the added tokens of one kind (normalized or raw) out of text; with split_special, special
  // ones are matched but left in as text (tokenizers' encode_special_tokens).
  void split_added(std::string_view text, bool normalized, bool split_special, std::vector<Part>& parts) const;
  // Whether a kind of added token can be emitted in a mode (else splitting can be skipped).
  bool any_added(bool normalized, bool split_special) const {
    return normalized ? (split_special ? normalized_plain_ : normalized_any_) : (split_special ? raw_plain_ : raw_any_);
  }

  PipelineParts parts_;
  int vocab_size_ = 0;
  bool splits_at_newlines_ = false;
  // Which added tokens exist: normalized / raw, any / non-special ("plain").
  bool normalized_any_ = false, normalized_plain_ = false, raw_any_ = false, raw_plain_ = false;
  AddedTrie raw_trie_, normalized_trie_;  // contents as written / as normalized
  std::unordered_map<int32_t, uint32_t> added_by_id_;
};

}  // namespace zt::tok
