// tokenizer_unicode.cpp: see tokenizer_unicode.h. utf8proc answers categories and normalization;
// the few properties it lacks (White_Space, Join_Control, Other_Alphabetic outside the letter
// and mark categories) are listed here from the Unicode data files.
#include "text/tokenizer_unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace zt::tok {

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

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t grapheme_end(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  // ASCII before ASCII always breaks, except CR LF (no ASCII character extends or prepends).
  if (byte(pos) < 0x80 &&
      (pos + 1 == s.size() || (byte(pos + 1) < 0x80 && !(byte(pos) == '\r' && byte(pos + 1) == '\n'))))
    return pos + 1;
  Utf8Char c = utf8_next(s, pos);
  if (c.cp == kInvalidCodePoint) return pos + 1;
  utf8proc_int32_t state = 0;
  size_t end = pos + c.len;
  while (end < s.size()) {
    Utf8Char next = utf8_next(s, end);
    if (next.cp == kInvalidCodePoint ||
        utf8proc_grapheme_break_stateful(utf8proc_int32_t(c.cp), utf8proc_int32_t(next.cp), &state))
      break;
    c = next;
    end += next.len;
  }
  return end;
}

size_t utf8_char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_next(s, i).len) ++n;
  return n;
}

namespace {

utf8proc_category_t category(uint32_t cp) {
  return cp < kInvalidCodePoint ? utf8proc_category(utf8proc_int32_t(cp)) : UTF8PROC_CATEGORY_CN;
}

}  // namespace

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  auto c = category(cp);
  if ((c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
      c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC)
    return true;
  // Join_Control, and the Other_Alphabetic symbols (circled and squared letters).
  return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
         (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
}

bool is_mark_nonspacing(uint32_t cp) { return cp >= 0x80 && category(cp) == UTF8PROC_CATEGORY_MN; }

bool is_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF;
}

bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_mark(uint32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool is_other(uint32_t cp) {
  auto c = category(cp);
  // Not Cn: Hugging Face's BertNormalizer (unicode_categories' is_other) keeps unassigned code
  // points, e.g. U+1FAE9 (an emoji of Unicode 16, unassigned in utf8proc's 15) and U+FFFE.
  return c >= UTF8PROC_CATEGORY_CC && c <= UTF8PROC_CATEGORY_CO;
}

namespace {

void normalize_valid(std::string_view s, int options, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                    &result, utf8proc_option_t(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(result, &std::free);
  ZT_CHECK(n >= 0, "Unicode normalization failed (", utf8proc_errmsg(n), ")");
  out.append(reinterpret_cast<const char*>(result), size_t(n));
}

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is invariant under every form
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  std::string out;
  out.reserve(s.size());
  size_t run = 0;
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_next(s, i);
    if (c.cp == kInvalidCodePoint) {
      if (i > run) normalize_valid(s.substr(run, i - run), options, out);
      out += s[i];
      run = i + 1;
    }
    i += c.len;
  }
  if (run < s.size()) normalize_valid(s.substr(run), options, out);
  return out;
}

std::string to_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_next(s, i);
    if (c.cp < 0x80) {
      out += char(c.cp >= 'A' && c.cp <= 'Z' ? c.cp + 32 : c.cp);
    } else if (c.cp == kInvalidCodePoint) {
      out += s[i];
    } else if (c.cp == 0x130) {
      out += "i\xCC\x87";  // the one unconditional multi-character lowercase mapping
    } else {
      append_utf8(out, uint32_t(utf8proc_tolower(utf8proc_int32_t(c.cp))));
    }
    i += c.len;
  }
  return out;
}

}  // namespace zt::tok
