// tokenizer_normalize.cpp: see tokenizer_normalize.h.
#include "text/tokenizer_normalize.h"

#include "core/error.h"

namespace zt::tok {
namespace {

template <class Keep, class Map>
std::string filter_map(std::string_view s, Keep keep, Map map) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_next(s, i);
    if (c.cp == kInvalidCodePoint)
      out += s[i];
    else if (keep(c.cp))
      map(c.cp, out);
    i += c.len;
  }
  return out;
}

// The Replace steps check their output as they build it (`limit`): one step can multiply the
// text by its replacement's length.
void replace_literal(std::string& s, const std::string& from, const std::string& to, size_t limit, bool& over) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string r;
  r.reserve(std::min(limit, s.size() + s.size() / 4));
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    r.append(s, pos, hit - pos);
    r += to;
    if (r.size() > limit) {
      over = true;
      return;
    }
  }
  r.append(s, pos, std::string::npos);
  s.swap(r);
}

void replace_regex(std::string& s, const Regex& re, const std::string& to, size_t limit, bool& over) {
  std::string r;
  size_t prev = 0;
  re.for_each_match(s, [&](size_t start, size_t end) {
    if (over) return;  // (the matcher runs to the end; nothing more is built)
    r.append(s, prev, start - prev);
    r += to;
    prev = end;
    over = r.size() > limit;
  });
  if (over) return;
  r.append(s, prev, std::string::npos);
  s.swap(r);
}

void strip(std::string& s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end) {
      Utf8Char c = utf8_next(s, begin);
      if (!is_white_space(c.cp)) break;
      begin += c.len;
    }
  if (right) {
    size_t last_non_space = begin;
    for (size_t i = begin; i < end;) {
      Utf8Char c = utf8_next(s, i);
      i += c.len;
      if (!is_white_space(c.cp)) last_non_space = i;
    }
    end = last_non_space;
  }
  s = s.substr(begin, end - begin);
}

void bert_normalize(const NormalizeStep& st, std::string& s) {
  auto copy = [](uint32_t cp, std::string& out) { append_utf8(out, cp); };
  if (st.clean_text)
    s = filter_map(
        s,
        [](uint32_t cp) {
          return cp != 0 && cp != 0xFFFD && (cp == '\t' || cp == '\n' || cp == '\r' || !is_other(cp));
        },
        [](uint32_t cp, std::string& out) { append_utf8(out, is_white_space(cp) ? ' ' : cp); });
  if (st.chinese_chars)
    s = filter_map(
        s, [](uint32_t) { return true; },
        [](uint32_t cp, std::string& out) {
          if (is_cjk_ideograph(cp)) {
            out += ' ';
            append_utf8(out, cp);
            out += ' ';
          } else {
            append_utf8(out, cp);
          }
        });
  if (st.strip_accents)
    s = filter_map(
        normalize(s, NormalForm::nfd), [](uint32_t cp) { return !is_mark_nonspacing(cp); }, copy);
  if (st.lowercase) s = to_lowercase(s);
}

}  // namespace

void expansion_fail(const char* stage, const std::string& source, size_t input_bytes) {
  throw Error(str_cat(source.empty() ? "tokenizer" : source, ": the ", stage, " makes ", input_bytes,
                      " bytes of text longer than ", expansion_limit(input_bytes), " bytes (", kMaxExpansion,
                      " times + ", kExpansionSlack,
                      " bytes, the limit); a tokenizer.json whose steps grow text without bound is refused"));
}

void normalize_text(const std::vector<NormalizeStep>& steps, std::string& s, const std::string& source) {
  const size_t input = s.size(), limit = expansion_limit(input);
  bool over = false;
  for (const NormalizeStep& st : steps) {
    switch (st.kind) {
      case NormalizeStep::Kind::form:
        s = normalize(s, st.form);
        break;
      case NormalizeStep::Kind::lowercase:
        s = to_lowercase(s);
        break;
      case NormalizeStep::Kind::strip:
        strip(s, st.left, st.right);
        break;
      case NormalizeStep::Kind::strip_accents:
        s = filter_map(
            s, [](uint32_t cp) { return !is_mark(cp); }, [](uint32_t cp, std::string& out) { append_utf8(out, cp); });
        break;
      case NormalizeStep::Kind::replace:
        if (st.regex)
          replace_regex(s, *st.regex, st.to, limit, over);
        else
          replace_literal(s, st.from, st.to, limit, over);
        break;
      case NormalizeStep::Kind::prepend:
        if (!s.empty()) s.insert(0, st.to);
        break;
      case NormalizeStep::Kind::bert:
        bert_normalize(st, s);
        break;
      case NormalizeStep::Kind::precompiled:
        over = !st.charsmap->apply(s, limit);
        break;
    }
    if (over || s.size() > limit) expansion_fail("normalizer", source, input);
  }
}

}  // namespace zt::tok
