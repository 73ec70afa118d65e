// tokenizer_normalize.h: the tokenizer.json normalizers, applied to text before it is cut into
// pieces: Unicode forms (NFC, NFD, NFKC, NFKD via utf8proc), Lowercase, Strip, StripAccents,
// Replace (literal or regex), Prepend, BertNormalizer; a Sequence is a list of these steps.
// Semantics follow Hugging Face tokenizers (e.g. Prepend skips empty text, Lowercase maps each
// character on its own). Internal to src/text.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer_regex.h"
#include "text/tokenizer_unicode.h"

namespace zt::tok {

struct NormalizeStep {
  enum class Kind { form, lowercase, strip, strip_accents, replace, prepend, bert };
  explicit NormalizeStep(Kind k = Kind::form) : kind(k) {}
  Kind kind;
  NormalForm form = NormalForm::nfc;
  bool left = false, right = false;    // strip
  std::shared_ptr<const Regex> regex;  // replace with a regex pattern
  std::string from, to;                // replace a literal (from -> to); prepend (to)
  bool clean_text = true, chinese_chars = true, strip_accents = false, lowercase = true;  // bert
};

// Applies the steps in order; `s` is replaced by the result.
void normalize_text(const std::vector<NormalizeStep>& steps, std::string& s);

}  // namespace zt::tok
