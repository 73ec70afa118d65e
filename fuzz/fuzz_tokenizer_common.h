// fuzz_tokenizer_common.h: what the tokenizer-loading fuzz targets do with a tokenizer that
// loaded: encode a few fixed texts (ASCII, whitespace runs, contractions, non-ASCII, invalid
// UTF-8, special-token text) with and without special tokens, and decode the ids back. Ids
// that encode produced must decode without an error; encoding twice must give the same ids
// (the piece cache must not change results).
#pragma once
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "text/tokenizer.h"

namespace zt::fuzz {

inline void exercise(const zt::Tokenizer& t) {
  static const std::vector<std::string> texts = {
      "hello world, the thing's here!\n\n  x",
      " \t\r\n  leading and trailing   ",
      "I'm can't WE'LL 1234567 3.14",
      "na\xC3\xAFve caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
      std::string("\xFF\xFE\x00\x01 \xE2\x82 tail", 12),
      "<s>hi</s><|endoftext|> <|begin_of_text|>x<|end_of_text|>",
  };
  if (t.vocab_size() <= 0) finding("loaded tokenizer has vocab_size <= 0");
  for (const std::string& s : texts) {
    std::vector<int32_t> a = t.encode(s), b = t.encode(s);
    if (a != b) finding("encode gave different ids for the same text");
    for (int32_t id : a)
      if (id < 0 || id >= t.vocab_size()) finding("encode produced an id outside [0, vocab_size)");
    (void)t.decode(a);
    std::vector<int32_t> c = t.encode_with_special(s);
    (void)t.decode(c);
  }
}

}  // namespace zt::fuzz
