// fuzz_tokenizer_encode.cpp: libFuzzer target for encoding and decoding arbitrary bytes with
// three small valid tokenizers (fuzz/tiny_tokenizers.h: GPT-2 files, SentencePiece-style and
// Llama-3-style tokenizer.json). Input byte 0 picks the tokenizer (mod 3) and the operation
// (/3 mod 3): encode (ids in range, deterministic, decode(encode(x)) == x), encode_with_special
// (decodes), or decode of the rest read as int32 ids (invalid ids must be a zt::Error).
#include <cstring>

#include "fuzz_util.h"
#include "tiny_tokenizers.h"

namespace {

struct Tokenizers {
  std::unique_ptr<zt::Tokenizer> t[3];
  Tokenizers() {
    t[0] = zt::Tokenizer::load(zt::fuzz::write_tiny_gpt2());
    t[1] = zt::Tokenizer::load(zt::fuzz::write_tiny_spm());
    t[2] = zt::Tokenizer::load(zt::fuzz::write_tiny_llama3());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizers toks;
  if (size == 0) return 0;
  const int which = data[0] % 3, op = (data[0] / 3) % 3;
  const zt::Tokenizer& t = *toks.t[which];
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (op == 0) {
    std::vector<int32_t> ids = t.encode(text);
    if (ids != t.encode(text)) zt::fuzz::finding("encode is not deterministic");
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) zt::fuzz::finding("encode produced an id outside the vocab");
    std::string back = t.decode(ids);
    // SentencePiece-style text that already holds U+2581 decodes it to a space, by design.
    bool exact = which != 1 || text.find("\xE2\x96\x81") == std::string::npos;
    if (exact && back != text) zt::fuzz::finding("decode(encode(text)) != text");
  } else if (op == 1) {
    std::vector<int32_t> ids = t.encode_with_special(text);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) zt::fuzz::finding("encode_with_special produced an id outside the vocab");
    (void)t.decode(ids);
  } else {
    std::vector<int32_t> ids(text.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), text.data(), ids.size() * 4);
    zt::fuzz::expect_ok_or_error([&] { (void)t.decode(ids); });
  }
  return 0;
}
