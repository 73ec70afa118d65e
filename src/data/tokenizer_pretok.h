// tokenizer_pretok.h: UTF-8 decoding, Unicode character classes and the pre-tokenizers that cut
// text into the pieces BPE runs on. Each pre-tokenizer is a hand-written scanner that returns
// exactly what its regex returns under JavaScript /u semantics (the reference tokenizers run
// the regexes in node; the class tables are generated from node, see
// tokenizer_unicode_tables.js):
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Not a regex engine: other patterns are rejected by the loader. Internal to src/data.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zt::tok {

struct CodePointRange {
  uint32_t lo, hi;  // inclusive
};

// Every code point is in exactly one class (the generator checks the tables are disjoint).
enum class CharClass : uint8_t { letter, number, space, other };

// A byte that does not start a valid UTF-8 sequence decodes as kInvalidCodePoint, length 1,
// class other: the bytes still reach byte-level BPE unchanged, so encode/decode round-trips.
inline constexpr uint32_t kInvalidCodePoint = 0x110000;

struct Utf8Char {
  uint32_t cp;
  uint32_t len;  // bytes, >= 1
};

Utf8Char utf8_decode_multibyte(std::string_view s, size_t pos);
CharClass char_class_slow(uint32_t cp);

// 128-entry class table for ASCII, the hot path for English text.
extern const std::array<CharClass, 128> kAsciiClass;

inline Utf8Char utf8_next(std::string_view s, size_t pos) {
  auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return {b, 1};
  return utf8_decode_multibyte(s, pos);
}

inline CharClass char_class(uint32_t cp) { return cp < 128 ? kAsciiClass[cp] : char_class_slow(cp); }

enum class PreSplit { none, gpt2, llama3 };

// End (exclusive byte offset) of the piece that starts at `pos` (< s.size()).
size_t gpt2_piece_end(std::string_view s, size_t pos);
size_t llama3_piece_end(std::string_view s, size_t pos);

// Calls f(piece) for every piece of `s`, in order; the pieces tile `s` exactly (`none`: one piece).
template <class F>
void for_each_piece(PreSplit kind, std::string_view s, F&& f) {
  if (kind == PreSplit::none) {
    if (!s.empty()) f(s);
    return;
  }
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = kind == PreSplit::gpt2 ? gpt2_piece_end(s, pos) : llama3_piece_end(s, pos);
    f(s.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace zt::tok
