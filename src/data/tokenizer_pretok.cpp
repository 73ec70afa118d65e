// tokenizer_pretok.cpp: see tokenizer_pretok.h. The scanners follow the regex alternatives in
// order, with the backtracking worked out by hand (noted at each step), so a piece is exactly
// what the first matching alternative returns in JavaScript.
#include "data/tokenizer_pretok.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace zt::tok {
namespace {

#include "data/tokenizer_unicode_tables.inc"

bool in_ranges(const CodePointRange* begin, const CodePointRange* end, uint32_t cp) {
  auto it = std::upper_bound(begin, end, cp, [](uint32_t c, const CodePointRange& r) { return c < r.lo; });
  return it != begin && cp <= std::prev(it)->hi;
}

constexpr CharClass ascii_class(unsigned c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
  if (c >= '0' && c <= '9') return CharClass::number;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::space;  // \t \n \v \f \r
  return CharClass::other;
}

constexpr std::array<CharClass, 128> make_ascii_table() {
  std::array<CharClass, 128> t{};
  for (unsigned c = 0; c < 128; ++c) t[c] = ascii_class(c);
  return t;
}

CharClass class_at(std::string_view s, size_t pos, uint32_t* len = nullptr) {
  Utf8Char c = utf8_next(s, pos);
  if (len) *len = c.len;
  return char_class(c.cp);
}

// End of the run of characters of class k starting at pos.
size_t run_end(std::string_view s, size_t pos, CharClass k) {
  while (pos < s.size()) {
    uint32_t len;
    if (class_at(s, pos, &len) != k) break;
    pos += len;
  }
  return pos;
}

// Length after the apostrophe of a contraction starting at s[p] (s, t, re, ve, m, ll, d), or 0.
// The Llama-3 pattern is case-insensitive; transformers.js rewrites (?i:...) into ASCII
// character classes ([sS] ...), so only ASCII letters fold.
size_t contraction_len(std::string_view s, size_t p, bool fold_case) {
  auto at = [&](size_t i) -> char {
    if (i >= s.size()) return 0;
    char c = s[i];
    return fold_case && c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
  };
  char a = at(p), b = at(p + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 2;
  return 0;
}

// The whitespace alternatives shared by both patterns, at a whitespace character:
//   \s+(?!\S) : the whole run if it ends the text; otherwise backtracking gives back one
//               character so the run's last space can prefix the next word (fails on a run
//               of one character followed by non-space)
//   \s+       : then the whole run.
// With newline_rule (Llama-3) \s*[\r\n]+ comes first: \s* backtracks from the run's end to the
// last \r or \n in it, so the piece ends just after that character.
size_t whitespace_end(std::string_view s, size_t pos, bool newline_rule) {
  size_t i = pos, last_start = pos, after_newline = 0;
  int count = 0;
  while (i < s.size()) {
    uint32_t len;
    if (class_at(s, i, &len) != CharClass::space) break;
    if (s[i] == '\n' || s[i] == '\r') after_newline = i + 1;
    last_start = i;
    i += len;
    ++count;
  }
  if (newline_rule && after_newline > 0) return after_newline;
  if (i == s.size() || count == 1) return i;
  return last_start;
}

}  // namespace

const std::array<CharClass, 128> kAsciiClass = make_ascii_table();

Utf8Char utf8_decode_multibyte(std::string_view s, size_t pos) {
  auto byte = [&](size_t i) -> unsigned { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  unsigned b0 = byte(pos);
  uint32_t len, cp, min;
  if (b0 >= 0xC2 && b0 <= 0xDF)
    len = 2, cp = b0 & 0x1F, min = 0x80;
  else if (b0 >= 0xE0 && b0 <= 0xEF)
    len = 3, cp = b0 & 0x0F, min = 0x800;
  else if (b0 >= 0xF0 && b0 <= 0xF4)
    len = 4, cp = b0 & 0x07, min = 0x10000;
  else
    return {kInvalidCodePoint, 1};
  for (uint32_t k = 1; k < len; ++k) {
    unsigned b = byte(pos + k);
    if ((b & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodePoint, 1};
  return {cp, len};
}

CharClass char_class_slow(uint32_t cp) {
  if (in_ranges(std::begin(kLetterRanges), std::end(kLetterRanges), cp)) return CharClass::letter;
  if (in_ranges(std::begin(kNumberRanges), std::end(kNumberRanges), cp)) return CharClass::number;
  if (in_ranges(std::begin(kSpaceRanges), std::end(kSpaceRanges), cp)) return CharClass::space;
  return CharClass::other;
}

size_t gpt2_piece_end(std::string_view s, size_t pos) {
  Utf8Char c = utf8_next(s, pos);
  if (c.cp == '\'') {
    if (size_t n = contraction_len(s, pos + 1, false)) return pos + 1 + n;
  }
  CharClass k = char_class(c.cp);
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional leading ASCII space.
  if (c.cp == ' ' && pos + 1 < s.size()) {
    CharClass next = class_at(s, pos + 1);
    if (next != CharClass::space) return run_end(s, pos + 1, next);
  }
  if (k != CharClass::space) return run_end(s, pos, k);
  return whitespace_end(s, pos, false);
}

size_t llama3_piece_end(std::string_view s, size_t pos) {
  Utf8Char c = utf8_next(s, pos);
  if (c.cp == '\'') {
    if (size_t n = contraction_len(s, pos + 1, true)) return pos + 1 + n;
  }
  CharClass k = char_class(c.cp);
  // [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, optionally led by one non-letter, non-number,
  // non-newline character (a space, a tab, punctuation...).
  if (k == CharClass::letter) return run_end(s, pos, k);
  if (k != CharClass::number && c.cp != '\r' && c.cp != '\n' && pos + c.len < s.size() &&
      class_at(s, pos + c.len) == CharClass::letter)
    return run_end(s, pos + c.len, CharClass::letter);
  // \p{N}{1,3}
  if (k == CharClass::number) {
    size_t end = pos + c.len;
    for (int n = 1; n < 3 && end < s.size(); ++n) {
      uint32_t len;
      if (class_at(s, end, &len) != CharClass::number) break;
      end += len;
    }
    return end;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t run = std::string_view::npos;
  if (k == CharClass::other)
    run = pos;
  else if (c.cp == ' ' && pos + 1 < s.size() && class_at(s, pos + 1) == CharClass::other)
    run = pos + 1;
  if (run != std::string_view::npos) {
    size_t end = run_end(s, run, CharClass::other);
    while (end < s.size() && (s[end] == '\r' || s[end] == '\n')) ++end;
    return end;
  }
  return whitespace_end(s, pos, true);
}

}  // namespace zt::tok
