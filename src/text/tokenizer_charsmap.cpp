// tokenizer_charsmap.cpp: see tokenizer_charsmap.h. The unit layout is darts-clone's (what
// SentencePiece's normalizer.cc and Hugging Face's spm_precompiled read): bit 8 has_leaf, bits
// 0-7 (with bit 31, so a value unit never matches a byte) the label, bits 10-31 the offset,
// shifted left 8 more when bit 9 is set; a leaf unit's low 31 bits are its value.
#include "text/tokenizer_charsmap.h"

#include <cstring>

#include "core/error.h"
#include "text/tokenizer_unicode.h"

namespace zt::tok {
namespace {

bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t value_of(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t label_of(uint32_t u) { return u & ((1u << 31) | 0xFF); }
uint64_t offset_of(uint32_t u) { return uint64_t(u >> 10) << ((u & (1u << 9)) >> 6); }

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_next(s, i);
    if (c.cp == kInvalidCodePoint) return false;
    i += c.len;
  }
  return true;
}

}  // namespace

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size() / 4 * 3);
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    int v = ch >= 'A' && ch <= 'Z'   ? ch - 'A'
            : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26
            : ch >= '0' && ch <= '9' ? ch - '0' + 52
            : ch == '+'              ? 62
            : ch == '/'              ? 63
                                     : -1;
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return bits < 6;  // one leftover base64 digit cannot end a valid encoding
}

std::shared_ptr<const CharsMap> CharsMap::parse(std::string_view bytes) {
  ZT_CHECK(bytes.size() >= 4, "is ", bytes.size(), " bytes, too short for its 4-byte header");
  uint32_t trie_bytes = 0;
  for (int k = 3; k >= 0; --k) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(bytes[size_t(k)]);
  ZT_CHECK(trie_bytes % 4 == 0 && trie_bytes > 0, "has a trie of ", trie_bytes,
           " bytes; it must be a positive multiple of 4");
  ZT_CHECK(trie_bytes <= bytes.size() - 4, "has a trie of ", trie_bytes, " bytes but only ", bytes.size() - 4,
           " bytes follow the header");
  auto m = std::make_shared<CharsMap>();
  m->units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < m->units_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + 4 + 4 * i;
    m->units_[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  m->blob_.assign(bytes.substr(4 + trie_bytes));
  // Hugging Face refuses a blob that is not UTF-8 too, and a replacement must not inject bad bytes.
  ZT_CHECK(valid_utf8(m->blob_), "has replacement strings that are not valid UTF-8");
  return m;
}

const char* CharsMap::lookup(std::string_view chunk, size_t* len) const {
  // darts-clone's commonPrefixSearch, stopped at the first (shortest) hit: Hugging Face takes
  // results[0]. A NUL byte ends the key, as in darts.
  uint64_t node = offset_of(units_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) return nullptr;
    node ^= c;
    if (node >= units_.size()) return nullptr;
    const uint32_t u = units_[node];
    if (label_of(u) != c) return nullptr;
    node ^= offset_of(u);
    if (has_leaf(u)) {
      if (node >= units_.size()) return nullptr;
      const size_t at = value_of(units_[node]);
      if (at > blob_.size()) return nullptr;
      const char* r = blob_.data() + at;
      *len = strnlen(r, blob_.size() - at);
      return r;
    }
  }
  return nullptr;
}

bool CharsMap::apply(std::string& s, size_t limit) const {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  size_t n = 0;
  for (size_t g = 0; g < s.size();) {
    const size_t g_end = grapheme_end(s, g);
    const std::string_view grapheme(s.data() + g, g_end - g);
    if (const char* r = grapheme.size() < 6 ? lookup(grapheme, &n) : nullptr) {
      out.append(r, n);
    } else {
      for (size_t i = 0; i < grapheme.size();) {
        const size_t len = utf8_next(grapheme, i).len;
        const std::string_view ch = grapheme.substr(i, len);
        if (const char* rc = lookup(ch, &n))
          out.append(rc, n);
        else
          out.append(ch);
        i += len;
      }
    }
    if (out.size() > limit) return false;
    g = g_end;
  }
  s.swap(out);
  return true;
}

}  // namespace zt::tok
