// tokenizer_train.h: learning a byte-level BPE tokenizer from a corpus (`ztrain tokenizer-train`),
// GPT-2 style: the text is cut into pieces by GPT-2's pre-tokenizer regex (ByteLevel), each piece
// starts as its UTF-8 bytes (256 initial tokens), and the most frequent adjacent pair of tokens
// is merged into a new token until the vocabulary is full; the last id is <|endoftext|>.
// Ties (equal counts) go to the pair of smaller (left id, right id), so a corpus always gives the
// same tokenizer whatever the thread count. The corpus is streamed: only the distinct pieces and
// their counts are held, plus one batch of text. Output: tokenizer.json (Hugging Face format),
// vocab.json + merges.txt (GPT-2's format) and tokenizer_config.json, written atomically.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zt {

struct BpeTrainConfig {
  std::vector<std::string> inputs;  // text files, .jsonl files or folders of them (as `ztrain tokenize`)
  std::string text_field = "text";  // JSONL field holding the text
  std::string output_dir;
  int vocab_size = 0;                     // including the 256 bytes and <|endoftext|>: at least 257
  size_t batch_bytes = size_t(16) << 20;  // text held in memory at once
};

struct BpeTrainStats {
  uint64_t bytes = 0;
  int64_t pieces = 0, distinct_pieces = 0;
  int merges = 0, vocab_size = 0;  // vocab_size < the requested one when the corpus ran out of pairs
  double count_seconds = 0, merge_seconds = 0;
};

// Reads the corpus, learns the merges and writes the files. Throws zt::Error (one line naming the
// problem) on a vocab_size below 257, a missing input, an empty corpus or an unwritable output.
BpeTrainStats train_bpe_tokenizer(const BpeTrainConfig& cfg);

namespace tok {

// The two steps, exposed for the unit tests.
using PieceCounts = std::unordered_map<std::string, int64_t>;
// Adds the GPT-2 pre-tokenizer pieces of `text` to `counts`.
void count_pieces(std::string_view text, PieceCounts& counts);

struct LearnedBpe {
  std::vector<std::string> tokens;                  // raw bytes by id: 256 bytes, merges' results
  std::vector<std::pair<int32_t, int32_t>> merges;  // by rank
};
// Learns merges until there are `max_tokens` tokens (or no pair is left).
LearnedBpe learn_bpe(const PieceCounts& counts, int max_tokens);

}  // namespace tok
}  // namespace zt
