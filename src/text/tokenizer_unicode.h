// tokenizer_unicode.h: the Unicode pieces tokenizers need, on UTF-8 text: decoding one code point
// (invalid bytes are single characters of their own, so any bytes round-trip), general
// categories and the character predicates Hugging Face tokenizers use (Rust's
// char::is_whitespace, is_numeric, is_punctuation, regex \w), normalization forms and
// lowercasing. Categories and normalization come from utf8proc (docs/tokenizers.md says why
// utf8proc and not ICU). Internal to src/text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zt::tok {

// A byte that does not start a valid UTF-8 sequence decodes as kInvalidCodePoint, length 1.
inline constexpr uint32_t kInvalidCodePoint = 0x110000;

struct Utf8Char {
  uint32_t cp;
  uint32_t len;  // bytes, >= 1
};

Utf8Char utf8_decode_multibyte(std::string_view s, size_t pos);
inline Utf8Char utf8_next(std::string_view s, size_t pos) {
  auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return {b, 1};
  return utf8_decode_multibyte(s, pos);
}
void append_utf8(std::string& out, uint32_t cp);
size_t utf8_char_count(std::string_view s);
// Where the extended grapheme cluster starting at s[pos] ends (Unicode's UAX #29 rules, as Rust's
// unicode-segmentation graphemes(true)); an invalid byte is a cluster of its own.
size_t grapheme_end(std::string_view s, size_t pos);

// Rust char predicates (what the Hugging Face pre-tokenizers call).
bool is_white_space(uint32_t cp);      // Unicode White_Space (char::is_whitespace)
bool is_numeric(uint32_t cp);          // Nd, Nl, No (char::is_numeric)
bool is_punctuation(uint32_t cp);      // ASCII punctuation or a P* category
bool is_word_char(uint32_t cp);        // regex \w: Alphabetic, M, Nd, Pc, Join_Control
bool is_mark_nonspacing(uint32_t cp);  // Mn
bool is_control(uint32_t cp);          // Cc or Cf, not \t \n \r
bool is_other(uint32_t cp);            // Cc Cf Cs Co, not Cn (HF BertNormalizer's clean_text)
bool is_cjk_ideograph(uint32_t cp);    // the CJK blocks BERT pads with spaces
bool is_mark(uint32_t cp);             // Mn, Mc, Me

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// Normalizes valid UTF-8 runs; invalid bytes pass through unchanged and break runs.
std::string normalize(std::string_view s, NormalForm form);
// char::to_lowercase applied to each character: full mappings (U+0130 -> "i\u0307"), no
// final-sigma context (Hugging Face lowercases character by character).
std::string to_lowercase(std::string_view s);

}  // namespace zt::tok
