// cmd_data.cpp: `ztrain tokenize`: text / JSONL / folders -> train.bin + validation.bin.
#include <omp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "commands.h"
#include "core/error.h"
#include "data/tokenize.h"
#include "data/tokenizer.h"
#include "flags.h"

namespace zt::app {

int cmd_tokenize(const Args& args) {
  TokenizeConfig cfg;
  std::string tokenizer, inputs;
  int threads = 0;
  FlagSet f("tokenize");
  f.add("tokenizer_name_or_path", &tokenizer,
        "folder with encoder.json + vocab.bpe (GPT-2) or tokenizer.json (HF), or the tokenizer.json itself");
  f.add("input", &inputs, "comma-separated text files, .jsonl files or folders of them");
  f.add("text_field", &cfg.text_field, "JSONL field holding the text (text)");
  f.add("output_dir", &cfg.output_dir, "where train.bin and validation.bin are written");
  f.add("validation_split_percentage", &cfg.validation_split_percentage, "share of documents for validation (5)",
        range::below(0, 100));
  f.add("threads", &threads, "tokenizer threads, 0 = all cores (0)", range::closed(0, limits::kMaxThreads));
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(!tokenizer.empty(), "--tokenizer_name_or_path is required");
  ZT_CHECK(!inputs.empty(), "--input is required");
  for (size_t s = 0, e; s <= inputs.size(); s = e + 1) {
    e = inputs.find(',', s);
    if (e == std::string::npos) e = inputs.size();
    if (e > s) cfg.inputs.push_back(inputs.substr(s, e - s));
  }
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
                      {"eos_id", tok->eos_id()}};
  write_file_atomic(cfg.output_dir + "/tokenize_stats.json", j.dump(2) + "\n");
  return 0;
}

}  // namespace zt::app
