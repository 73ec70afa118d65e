// tokenizer_bpe.h: the byte-pair-encoding engine (merges by rank with a heap) and BpeWordModel,
// the BPE subword model of the tokenizer pipeline (tokenizer_pipeline.h). Both file formats
// (tokenizer.cpp: GPT-2 files, tokenizer_hf.cpp: tokenizer.json BPE models) load into it.
// Symbols are handled as ids and their raw bytes (byte-level tokens are decoded from GPT-2's
// printable alphabet at load time), so encoding never builds the printable strings.
// Not here: training merges (data/tokenizer_train.cpp, which also uses this header), BPE dropout.
// Internal to src/text.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_pipeline.h"
#include "text/tokenizer_unicode.h"

namespace zt::tok {

// GPT-2's bytes_to_unicode(): byte b <-> a printable code point, so byte strings can be stored
// as JSON text. Printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143.
const std::array<uint32_t, 256>& byte_to_code_point();
// Decodes a byte-level token (UTF-8 of mapped code points) to raw bytes; false if some code
// point is outside the map (e.g. an added token written in plain text).
bool byte_level_decode(std::string_view token, std::string& out);
std::string byte_level_encode(std::string_view bytes);

// Which merge runs next. Both pick the lowest-ranked adjacent pair; they differ when a merge
// creates a pair ranked lower than itself (Hugging Face merge lists do this, GPT-2's does not):
//   all_occurrences: OpenAI encoder.py / gpt-3-encoder: merge every occurrence of the chosen
//                    pair, left to right, before looking at the pairs that creates.
//   leftmost_first:  Hugging Face / transformers.js: merge only the leftmost occurrence, then
//                    choose again.
enum class MergeOrder { all_occurrences, leftmost_first };

// Open-addressing map (left id, right id) -> (rank, result id); the BPE inner loop's lookup.
class PairTable {
 public:
  struct Merge {
    int32_t rank, result;
  };
  void reserve(size_t n);
  void insert_or_assign(int32_t left, int32_t right, Merge m);
  const Merge* find(int32_t left, int32_t right) const;
  size_t size() const { return size_; }

 private:
  static uint64_t key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  int shift_ = 64;
  size_t size_ = 0;
};

// A symbol of a word being merged: a vocab id (or -1: a character the vocab lacks) and the
// byte range of the word it covers.
struct Symbol {
  int32_t id;
  uint32_t start, len;
};

class BpeModel {
 public:
  // `bytes` is the token's raw text. Later duplicates of the same text keep the first id.
  void add_token(std::string_view bytes, int32_t id);
  // Appends a merge with the next rank. A pair listed twice keeps its later rank, as in
  // Hugging Face tokenizers, transformers.js and gpt-3-encoder (all build a map from the list).
  void add_merge(int32_t left, int32_t right, int32_t result);
  int32_t find(std::string_view bytes) const;  // -1 if absent
  const std::string& text(int32_t id) const { return text_[size_t(id)]; }
  const std::vector<int32_t>& merge_results() const { return results_; }
  // Applies the merges to `word` in place.
  void merge(std::vector<Symbol>& word, MergeOrder order) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::vector<std::string> text_;  // by id
  std::vector<int32_t> results_;   // by rank
  PairTable pairs_;
};

struct BpeOptions {
  bool byte_level = false;  // initial symbols are bytes (ByteLevel pre-tokenizer), not code points
  MergeOrder order = MergeOrder::leftmost_first;
  bool ignore_merges = false;  // a piece that is itself a token skips the merges
  bool byte_fallback = false;  // unknown characters become <0xNN> tokens
  bool fuse_unk = false;       // consecutive unknown characters give one unk token
  int32_t unk_id = -1;
};

// BPE as a WordModel: initial symbols, merges, unknown characters, and a piece cache. A piece
// longer than the cache limit is first cut between two units (bytes or code points) that no
// merged token contains side by side, which cannot change the result but gives short, cacheable
// pieces (SentencePiece-style tokenizers have no pre-tokenizer: the whole text is one piece).
class BpeWordModel final : public WordModel {
 public:
  // vocab_text[id]: the token as the file writes it (byte-level tokens in GPT-2's alphabet).
  BpeWordModel(BpeModel model, BpeOptions opt, std::vector<std::string> vocab_text);
  void encode(std::string_view piece, std::vector<int32_t>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int vocab_size() const override { return int(vocab_text_.size()); }
  const BpeModel& model() const { return model_; }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void emit_unknown(std::string_view bytes, std::vector<int32_t>& out, bool* last_unk) const;
  bool joinable(uint32_t a, uint32_t b) const;
  uint32_t next_unit(std::string_view s, size_t pos, uint32_t* len) const;  // byte or code point

  BpeModel model_;
  BpeOptions opt_;
  std::vector<std::string> vocab_text_;
  std::unordered_map<std::string, int32_t> by_text_;
  std::array<int32_t, 256> byte_token_{};   // the token of byte b: its own (byte-level) or <0xNN>
  std::array<int32_t, 128> ascii_token_{};  // code-point models: the token of each ASCII char
  std::vector<uint64_t> joinable_small_;    // 256x256 bits for units < 256
  std::vector<uint64_t> joinable_large_;    // sorted (a << 32 | b) for the other pairs
  PieceCache cache_;
};

// Loader helpers (tokenizer.cpp), shared by both formats; errors name the file.
std::string read_text_file(const std::string& path);
// Refuses JSON nested deeper than kMaxJsonDepth: serde_json's recursion limit, so every file
// Hugging Face tokenizers can load loads here, and nothing after parsing recurses deeper (a
// Sequence of Sequences of normalizers, pre-tokenizers, decoders or post-processors included).
inline constexpr int kMaxJsonDepth = 128;
nlohmann::json read_json_file(const std::string& path);
std::unique_ptr<Tokenizer> load_gpt2_files(const std::string& dir);          // tokenizer.cpp
std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::string& file);  // tokenizer_hf.cpp
std::unique_ptr<Tokenizer> load_spm_model(const std::string& file);          // tokenizer_spm.cpp

}  // namespace zt::tok
