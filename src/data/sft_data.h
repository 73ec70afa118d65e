// sft_data.h: supervised fine-tuning data from JSONL (chat_format.h says which record shapes
// and how they become text), tokenized once and cached, then cut into training rows.
//
// Tokenization streams the file (batches of lines, encoded in parallel, tokens written to the
// cache file as they come) and stops at the first bad line with one error naming the file and
// the line; the cache is written under a temporary name and renamed, so nothing half-written
// is ever read. The cache file is named by a hash of what determines its contents: the JSONL
// bytes, the tokenizer files, the chat template and special tokens, the loss options and the
// format version; a second run with the same inputs reads it and starts at once. A cache is not
// trusted: its header records that key and a checksum of its contents, and every load checks both,
// the structure and every id's range (0 <= id < the tokenizer's vocab_size); a cache failing any
// check (damaged, planted, copied under another name) is rebuilt, with a one-line note.
//
// Rows (SftRows, a loader SequenceSource). An example of n tokens gives n-1 (input, target)
// pairs; a target carries loss when its token is trained (completion / assistant, or every
// token), else it is kIgnoreIndex (-100). Examples longer than T+1 tokens are truncated (TRL's
// max_length truncation, keep_start). Without packing each row holds one example, padded with
// ignored targets (positions 0..T-1 are then right as they are). With packing, whole examples
// are packed into rows best-fit-decreasing (TRL's "bfd"), and each row gets position ids that
// restart at 0 at every example, so attention never crosses examples (docs/data.md).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "data/loader.h"
#include "text/chat_format.h"
#include "text/tokenizer.h"

namespace zt {

struct SftTokens {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;  // per token: 1 when it is a target that carries loss
  std::vector<int64_t> offsets;  // example e is tokens[offsets[e], offsets[e + 1])
  int64_t examples() const { return int64_t(offsets.size()) - 1; }
  // How it was obtained, for the log.
  bool from_cache = false;
  std::string cache_path;
  double seconds = 0;
  int64_t lines = 0;
};

struct SftSource {
  std::string jsonl;           // the JSONL file
  std::string flag;            // "--train_file" / "--validation_file", for messages
  std::string tokenizer_path;  // the tokenizer's folder or file (its files key the cache)
  std::string cache_dir;       // where caches live (created if missing)
};

// Tokenizes `src.jsonl` (or reads its cache). Throws zt::Error "FLAG F line N: ..." on the first
// bad line, leaving no cache file behind.
SftTokens sft_tokenize(const SftSource& src, const Tokenizer& tok, const ChatFormatter& fmt,
                       const ChatTemplateConfig& tpl, const SftOptions& opt);

// The default cache folder: $ZT_CACHE_DIR, else $XDG_CACHE_HOME/ztrain, else ~/.cache/ztrain.
std::string sft_default_cache_dir();

class SftRows final : public SequenceSource {
 public:
  SftRows(const SftTokens& data, int T, bool packing, bool shuffle, uint64_t seed);
  int64_t num_sequences() const override { return int64_t(row_start_.size()) - 1; }
  int length() const override { return T_; }
  bool has_positions() const override { return packing_; }
  void fill(int32_t* inputs, int32_t* targets, int32_t* positions, int64_t g, int count) override;
  int64_t count_targets(int64_t g, int64_t count) const override;
  int64_t total_targets() const { return total_targets_; }
  int64_t truncated() const { return truncated_; }  // examples cut to T+1 tokens
  int64_t skipped() const { return skipped_; }      // examples of fewer than 2 tokens (no target)

 private:
  struct Item {
    int64_t example;
    int32_t pairs;  // (input, target) pairs taken from it
  };
  const SftTokens& d_;
  int T_;
  bool packing_;
  std::vector<Item> items_;  // rows' examples, row r = items_[row_start_[r], row_start_[r + 1])
  std::vector<int64_t> row_start_;
  std::vector<int32_t> row_targets_;
  int64_t total_targets_ = 0, truncated_ = 0, skipped_ = 0;
  EpochOrder order_;
  mutable std::mutex count_mu_;
  mutable EpochOrder count_order_;
};

}  // namespace zt
