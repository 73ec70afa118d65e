// tokenize.h: raw text -> token shards (`ztrain tokenize`). Inputs are text files,
// JSONL files (one JSON object per line, text in `text_field`) or folders of them,
// read in sorted order and streamed in bounded batches, so a corpus larger than RAM
// works. Each text file or JSONL record is one document, followed by the tokenizer's
// EOS id. Documents are split deterministically between train.bin and validation.bin.
// Batches are tokenized on all threads; output order is input order.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace zt {

struct TokenizeConfig {
  std::vector<std::string> inputs;
  std::string text_field = "text";
  std::string output_dir;
  double validation_split_percentage = 5.0;  // HF run_clm's name and default
  size_t batch_bytes = size_t(32) << 20;     // text held in memory at once
  // transformers' flag: true = special added tokens ("<|endoftext|>") are ordinary text, so a
  // document cannot inject a boundary; false = Hugging Face's tokenizer(text). Non-special added
  // tokens are matched either way (docs/tokenizers.md#added-tokens).
  bool split_special_tokens = true;
};

struct TokenizeStats {
  int64_t documents = 0, train_tokens = 0, validation_tokens = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  // Entropy (nats) of the training tokens' unigram distribution: the loss of the best
  // model that ignores context, a yardstick for validation loss.
  double unigram_entropy = 0;
};

TokenizeStats tokenize_corpus(const Tokenizer& tok, const TokenizeConfig& cfg);

// The files `inputs` name, folders expanded (recursively, sorted; names without an extension or
// ending .txt, .text, .jsonl, .json; hidden files skipped). Also read by tokenizer-train.
// Throws zt::Error on a missing input or when no file is found.
std::vector<std::filesystem::path> list_corpus_files(const std::vector<std::string>& inputs);
// True for a corpus file read as JSONL records (.jsonl or .json), false for plain text.
inline bool is_jsonl_corpus_file(const std::filesystem::path& p) {
  return p.extension() == ".jsonl" || p.extension() == ".json";
}
// The next line of a JSONL text corpus: false at its end; true with *text its record's string
// `field`, or *blank set for a blank line. A line that is not JSON or lacks the field throws,
// naming file and line.
bool next_jsonl_text(std::istream& in, const std::string& name, const std::string& field, int64_t* line_no,
                     std::string* text, bool* blank);

}  // namespace zt
