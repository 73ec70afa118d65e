// fuzz_tokenizer_spm.cpp: libFuzzer target for SentencePiece tokenizer.model files
// (src/text/tokenizer_spm.cpp, which hands the bytes to Debian's libsentencepiece). The input is
// written as tokenizer.model and loaded; a loaded tokenizer must encode sample text to ids that
// decode without error. libsentencepiece is not instrumented, so this finds crashes and what
// ztrain does with what the library returns, not the library's own out-of-bounds reads. Seeds:
// small models from spm_train (unigram with a user-defined symbol; BPE with byte fallback).
#include "fuzz_tokenizer_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/false);
  static const auto dir = zt::fuzz::scratch_dir() / "spm_in";
  std::filesystem::create_directories(dir);
  zt::fuzz::write_file(dir / "tokenizer.model", zt::fuzz::as_view(data, size));
  zt::fuzz::expect_ok_or_error([&] { zt::fuzz::exercise(*zt::Tokenizer::load(dir.string())); });
  return 0;
}
