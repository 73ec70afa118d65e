// cmd_data.cpp: `ztrain tokenize`: text / JSONL / folders -> train.bin + validation.bin;
// `ztrain tokenizer-train`: a corpus -> a byte-level BPE tokenizer.json.
#include <omp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "commands.h"
#include "core/error.h"
#include "data/tokenize.h"
#include "data/tokenizer_train.h"
#include "flags.h"
#include "text/tokenizer.h"

namespace zt::app {
namespace {

// Comma-separated values, empty ones dropped.
void split_commas(const std::string& s, std::vector<std::string>& out) {
  for (size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
  }
}

}  // namespace

int cmd_tokenize(const Args& args) {
  TokenizeConfig cfg;
  std::string tokenizer, inputs;
  int threads = 0;
  FlagSet f("tokenize");
  f.add("tokenizer_name_or_path", &tokenizer,
        "folder with encoder.json + vocab.bpe (GPT-2), tokenizer.json (HF) or tokenizer.model (SentencePiece), or the "
        "file itself");
  f.add("input", &inputs, "comma-separated text files, .jsonl files or folders of them");
  f.add("text_field", &cfg.text_field, "JSONL field holding the text (text)");
  f.add("output_dir", &cfg.output_dir, "where train.bin and validation.bin are written");
  f.add("validation_split_percentage", &cfg.validation_split_percentage, "share of documents for validation (5)",
        range::below(0, 100));
  f.add("threads", &threads, "tokenizer threads, 0 = all cores (0)", range::closed(0, limits::kMaxThreads));
  f.add("split_special_tokens", &cfg.split_special_tokens,
        "special added tokens (<|endoftext|>) in the text stay text; false = matched as Hugging Face's "
        "tokenizer(text) does (true)");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(!tokenizer.empty(), "--tokenizer_name_or_path is required");
  ZT_CHECK(!inputs.empty(), "--input is required");
  split_commas(inputs, cfg.inputs);
  if (threads > 0) omp_set_num_threads(threads);
  auto tok = Tokenizer::load(tokenizer);
  TokenizeStats st = tokenize_corpus(*tok, cfg);
  std::printf(
      "tokenized %lld documents, %.1f MB of text in %.2f s (%.1f MB/s): %lld train tokens, %lld validation "
      "tokens -> %s/{train,validation}.bin\n",
      (long long)st.documents, st.bytes / 1e6, st.seconds, st.bytes / 1e6 / st.seconds, (long long)st.train_tokens,
      (long long)st.validation_tokens, cfg.output_dir.c_str());
  std::printf("unigram entropy of the training tokens: %.4f nats/token\n", st.unigram_entropy);
  nlohmann::json j = {{"documents", st.documents},       {"bytes", st.bytes},
                      {"train_tokens", st.train_tokens}, {"validation_tokens", st.validation_tokens},
                      {"seconds", st.seconds},           {"unigram_entropy", st.unigram_entropy},
                      {"tokenizer", tok->name()},        {"vocab_size", tok->vocab_size()},
                      {"eos_id", tok->eos_id()},         {"split_special_tokens", cfg.split_special_tokens}};
  write_file_atomic(cfg.output_dir + "/tokenize_stats.json", j.dump(2) + "\n");
  return 0;
}

int cmd_tokenizer_train(const Args& given) {
  BpeTrainConfig cfg;
  std::string inputs;
  int threads = 0;
  FlagSet f("tokenizer-train");
  f.add("vocab_size", &cfg.vocab_size, "tokens in the vocabulary: 256 bytes + merges + <|endoftext|>",
        range::closed(257, limits::kMaxVocab));
  f.add("input", &inputs,
        "text files, .jsonl files or folders of them: --input A B C or --input A,B,C (files read in order)");
  f.add("text_field", &cfg.text_field, "JSONL field holding the text (text)");
  f.add("output", &cfg.output_dir, "folder for tokenizer.json, vocab.json, merges.txt, tokenizer_config.json");
  f.add("threads", &threads, "threads counting the corpus, 0 = all cores (0)", range::closed(0, limits::kMaxThreads));
  if (wants_help(given, f.help())) return 0;
  // --input takes several values: the words after it up to the next flag.
  Args args;
  std::vector<std::string> extra;
  for (size_t i = 0; i < given.size(); ++i) {
    args.push_back(given[i]);
    if (given[i] != "--input") continue;
    if (i + 1 < given.size()) args.push_back(given[++i]);
    while (i + 1 < given.size() && given[i + 1].rfind("--", 0) != 0) extra.push_back(given[++i]);
  }
  f.parse(args);
  ZT_CHECK(f.given().count("vocab_size"), "--vocab_size is required (e.g. 8192)");
  split_commas(inputs, cfg.inputs);
  for (auto& e : extra) split_commas(e, cfg.inputs);
  ZT_CHECK(!cfg.inputs.empty(), "--input is required (text files, .jsonl files or folders)");
  ZT_CHECK(!cfg.output_dir.empty(), "--output is required (the folder tokenizer.json is written to)");
  if (threads > 0) omp_set_num_threads(threads);
  BpeTrainStats st = train_bpe_tokenizer(cfg);
  std::printf(
      "read %.1f MB: %lld pieces, %lld distinct (%.2f s); learned %d merges (%.2f s) -> %s/tokenizer.json "
      "(vocab %d%s)\n",
      st.bytes / 1e6, (long long)st.pieces, (long long)st.distinct_pieces, st.count_seconds, st.merges,
      st.merge_seconds, cfg.output_dir.c_str(), st.vocab_size,
      st.vocab_size < cfg.vocab_size ? ", fewer than asked: the corpus has no more pairs to merge" : "");
  return 0;
}

}  // namespace zt::app
