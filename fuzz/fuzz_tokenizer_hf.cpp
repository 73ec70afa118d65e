// fuzz_tokenizer_hf.cpp: libFuzzer target for the Hugging Face tokenizer.json loader
// (src/text/tokenizer_hf.cpp). The input is tokenizer.json, optionally followed by a line
// "=====" and a tokenizer_config.json placed beside it (bos/eos names). A loaded tokenizer
// must encode sample text to ids that decode without error.
#include "fuzz_tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/false);
  auto parts = zt::fuzz::split(zt::fuzz::as_view(data, size), "\n=====\n", 2);
  static const auto dir = zt::fuzz::scratch_dir() / "hf_in";
  std::filesystem::create_directories(dir);
  zt::fuzz::write_file(dir / "tokenizer.json", parts[0]);
  std::error_code ec;
  if (parts.size() > 1)
    zt::fuzz::write_file(dir / "tokenizer_config.json", parts[1]);
  else
    std::filesystem::remove(dir / "tokenizer_config.json", ec);
  zt::fuzz::expect_ok_or_error([&] { zt::fuzz::exercise(*zt::Tokenizer::load((dir / "tokenizer.json").string())); });
  return 0;
}
