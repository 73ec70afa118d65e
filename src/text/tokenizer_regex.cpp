// tokenizer_regex.cpp: see tokenizer_regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer_regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace zt::tok {

namespace {

// Oniguruma's \s (Unicode White_Space) and JavaScript's (WhiteSpace + LineTerminator: adds
// U+FEFF, lacks U+0085), as class contents.
constexpr std::string_view kOnigSpace =
    R"(\t-\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
constexpr std::string_view kJsSpace =
    R"(\t-\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff})";
constexpr std::string_view kOnigWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string translate_pattern(std::string_view p, RegexFlavor flavor) {
  std::string_view space = flavor == RegexFlavor::onig ? kOnigSpace : kJsSpace;
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      std::string_view set = n == 's' || n == 'S'                                      ? space
                             : (flavor == RegexFlavor::onig && (n == 'w' || n == 'W')) ? kOnigWord
                                                                                       : "";
      if (!set.empty() && (n == 's' || n == 'w')) {
        out += in_class ? std::string(set) : "[" + std::string(set) + "]";
      } else if (!set.empty() && !in_class) {
        out += "[^" + std::string(set) + "]";
      } else {
        out += '\\';
        out += n;        // a negated class inside a class keeps PCRE2's own meaning
        if (n == 'Q') {  // \Q...\E: copy the quoted text verbatim
          size_t e = p.find("\\E", i + 1);
          out += p.substr(i + 1, e == std::string_view::npos ? std::string_view::npos : e + 2 - (i + 1));
          i = e == std::string_view::npos ? p.size() : e + 1;
        }
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      size_t e = p.find(":]", i + 2);
      if (e != std::string_view::npos) {
        out += p.substr(i, e + 2 - i);
        i = e + 1;
        continue;
      }
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string escape_literal(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, RegexFlavor flavor) : impl_(std::make_unique<Impl>()), pattern_(pattern) {
  std::string translated = translate_pattern(pattern, flavor);
  int err = 0;
  PCRE2_SIZE offset = 0;
  // NO_UTF_CHECK is not used: the subject may hold invalid UTF-8, which MATCH_INVALID_UTF
  // handles (invalid bytes match nothing, so they fall between pieces).
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  ZT_CHECK(impl_->code, "regex ", quote(pattern), " does not compile (PCRE2: ", pcre2_message(err), " at offset ",
           offset, ")");
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

bool Regex::find(std::string_view subject, size_t from, size_t* start, size_t* end) const {
  struct Data {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    ~Data() { pcre2_match_data_free(md); }
  };
  thread_local Data data;
  auto s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = impl_->jit ? pcre2_jit_match(impl_->code, s, subject.size(), from, 0, data.md, nullptr)
                      : pcre2_match(impl_->code, s, subject.size(), from, 0, data.md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  ZT_CHECK(rc > 0, "regex ", quote(pattern_), ": matching failed (PCRE2: ", pcre2_message(rc), ")");
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
  *start = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace zt::tok
