// fuzz_tokenizer_gpt2.cpp: libFuzzer target for the GPT-2 tokenizer files loader
// (src/text/tokenizer.cpp: encoder.json + vocab.bpe). The input is encoder.json, a line
// "=====", then vocab.bpe; both are written into a folder loaded by Tokenizer::load. A loaded
// tokenizer must encode sample text to ids that decode without error.
#include "fuzz_tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/false);
  auto parts = zt::fuzz::split(zt::fuzz::as_view(data, size), "\n=====\n", 2);
  static const auto dir = zt::fuzz::scratch_dir() / "gpt2_in";
  std::filesystem::create_directories(dir);
  zt::fuzz::write_file(dir / "encoder.json", parts[0]);
  zt::fuzz::write_file(dir / "vocab.bpe", parts.size() > 1 ? parts[1] : std::string_view());
  zt::fuzz::expect_ok_or_error([&] { zt::fuzz::exercise(*zt::Tokenizer::load(dir.string())); });
  return 0;
}
