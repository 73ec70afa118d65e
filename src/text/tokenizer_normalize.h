// tokenizer_normalize.h: the tokenizer.json normalizers, applied to text before it is cut into
// pieces: Unicode forms (NFC, NFD, NFKC, NFKD via utf8proc), Lowercase, Strip, StripAccents,
// Replace (literal or regex), Prepend, BertNormalizer, Precompiled (SentencePiece's charsmap,
// tokenizer_charsmap.h); a Sequence is a list of these steps.
// Semantics follow Hugging Face tokenizers (e.g. Prepend skips empty text, Lowercase maps each
// character on its own). Internal to src/text.
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer_charsmap.h"
#include "text/tokenizer_regex.h"
#include "text/tokenizer_unicode.h"

namespace zt::tok {

struct NormalizeStep {
  enum class Kind { form, lowercase, strip, strip_accents, replace, prepend, bert, precompiled };
  explicit NormalizeStep(Kind k = Kind::form) : kind(k) {}
  Kind kind;
  NormalForm form = NormalForm::nfc;
  bool left = false, right = false;    // strip
  std::shared_ptr<const Regex> regex;  // replace with a regex pattern
  std::string from, to;                // replace a literal (from -> to); prepend (to)
  bool clean_text = true, chinese_chars = true, strip_accents = false, lowercase = true;  // bert
  std::shared_ptr<const CharsMap> charsmap;                                               // precompiled
};

// A tokenizer.json is untrusted, and its normalizer, pre-tokenizer and decoder may each make text at
// most kMaxExpansion times longer plus kExpansionSlack bytes (checked after every step, and while
// a step builds its output). Real ones stay far below: Replace " " -> "▁" is 3x, Prepend adds
// 3 bytes, NFKD's worst character (U+FDFA) is 11x; a chain of doubling Replace steps would
// otherwise grow without bound.
inline constexpr size_t kMaxExpansion = 32, kExpansionSlack = 4096;
inline size_t expansion_limit(size_t input_bytes) {
  return std::min<size_t>(input_bytes, size_t(1) << 40) * kMaxExpansion + kExpansionSlack;
}
// Throws the error for text that grew past its limit; `stage` is "normalizer", "pre-tokenizer" or
// "decoder", `source` the tokenizer file.
[[noreturn]] void expansion_fail(const char* stage, const std::string& source, size_t input_bytes);

// Applies the steps in order; `s` is replaced by the result. Throws zt::Error (naming `source`)
// when the text grows past expansion_limit.
void normalize_text(const std::vector<NormalizeStep>& steps, std::string& s, const std::string& source = "");

}  // namespace zt::tok
