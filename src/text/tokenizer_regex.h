// tokenizer_regex.h: the pre-tokenizer and normalizer regexes, compiled by PCRE2 (UTF mode, UCP,
// JIT). Patterns are written for another engine, so the few escapes whose meaning differs
// between engines are rewritten to explicit classes first:
//   onig (Hugging Face tokenizers, Oniguruma): \s = White_Space, \w = L M Nd Pc;
//   js   (gpt-3-encoder, JavaScript /u):       \s = JavaScript WhiteSpace + LineTerminator.
// Everything else (\p{..}, (?i:), lookahead, {m,n}) means the same in PCRE2. Internal to src/text
// (and data/tokenizer_train.cpp).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace zt::tok {

enum class RegexFlavor { onig, js };

class Regex {
 public:
  // Throws zt::Error naming the pattern and PCRE2's message when it does not compile.
  Regex(std::string_view pattern, RegexFlavor flavor);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The first match at or after `from`: [*start, *end). False when there is none.
  bool find(std::string_view subject, size_t from, size_t* start, size_t* end) const;
  // Calls f(start, end) for every match left to right; after an empty match the search moves on
  // by one character (Oniguruma's find_iter does the same).
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    size_t pos = 0, s, e;
    while (pos <= subject.size() && find(subject, pos, &s, &e)) {
      f(s, e);
      if (e > s) {
        pos = e;
      } else {
        if (e >= subject.size()) break;
        pos = e + 1;
        while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }
  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

// The rewrite described above (exposed for the unit test).
std::string translate_pattern(std::string_view pattern, RegexFlavor flavor);
// A regex matching `literal` exactly.
std::string escape_literal(std::string_view literal);

}  // namespace zt::tok
