// fuzz_tokenize_jsonl.cpp: libFuzzer target for `ztrain tokenize` on JSONL input
// (src/data/tokenize.cpp). The input is a .jsonl file (one JSON object per line, text in
// "text"), tokenized with the tiny GPT-2 tokenizer (fuzz/tiny_tokenizers.h) in small batches
// into train.bin + validation.bin; the token counts must match the shards' sizes.
#include <filesystem>

#include "data/tokenize.h"
#include "fuzz_util.h"
#include "tiny_tokenizers.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<zt::Tokenizer> tok = zt::Tokenizer::load(zt::fuzz::write_tiny_gpt2());
  static const fs::path dir = zt::fuzz::scratch_dir() / "jsonl";
  fs::create_directories(dir);
  zt::fuzz::LeakCheck leaks(/*maps=*/false);
  zt::fuzz::write_file(dir / "in.jsonl", zt::fuzz::as_view(data, size));
  zt::TokenizeConfig cfg;
  cfg.inputs = {(dir / "in.jsonl").string()};
  cfg.output_dir = (dir / "out").string();
  cfg.validation_split_percentage = 50;
  cfg.batch_bytes = 64;  // several batches from a small input
  zt::fuzz::expect_ok_or_error([&] {
    zt::TokenizeStats st = zt::tokenize_corpus(*tok, cfg);
    if (st.train_tokens + st.validation_tokens < st.documents) zt::fuzz::finding("a document without its EOS token");
    if (fs::file_size(dir / "out" / "train.bin") != 64 + 2 * uint64_t(st.train_tokens) ||
        fs::file_size(dir / "out" / "validation.bin") != 64 + 2 * uint64_t(st.validation_tokens))
      zt::fuzz::finding("shard sizes do not match the token counts");
  });
  return 0;
}
