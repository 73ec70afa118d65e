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

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(PipelineParts parts);
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_with_special(std::string_view text, bool add_special_tokens = false) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return vocab_size_; }
  int32_t eos_id() const override { return p_.eos_id; }
  int32_t bos_id() const override { return p_.bos_id; }
  std::string name() const override { return p_.name; }
  bool splits_at_newlines() const override { return splits_at_newlines_; }

 private:
  // Normalizes, pre-tokenizes and encodes one part of the text (no added tokens in it).
  void encode_part(std::string_view text, bool at_start, bool normalized_added, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  struct Part {
    size_t start, end;
    const AddedToken* token;
  };
  void split_added(std::string_view text, bool normalized, std::vector<Part>& parts) const;

  PipelineParts p_;
  int vocab_size_ = 0;
  bool splits_at_newlines_ = false;
  bool any_normalized_added_ = false, any_raw_added_ = false;
  std::array<std::vector<uint32_t>, 256> added_by_first_byte_;  // indexes into p_.added
  std::vector<std::string> added_normalized_;                   // each added token's normalized text
  std::unordered_map<int32_t, uint32_t> added_by_id_;
};

}  // namespace zt::tok
