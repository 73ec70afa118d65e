// tokenizer_pretok.cpp: see tokenizer_pretok.h. The behaviours follow Hugging Face's
// NormalizedString::split: matches and the text between them tile the piece, then each
// behaviour folds that list, and empty pieces are dropped.
#include "text/tokenizer_pretok.h"

#include <cstdint>

#include "text/tokenizer_normalize.h"

#include <algorithm>

namespace zt::tok {
namespace {

struct Match {
  size_t start, end;
  bool is_match;
};

// The piece as alternating (text, match) ranges covering it, as Pattern::find_matches does.
void find_matches(const PreTokStep& step, std::string_view s, std::vector<Match>& out) {
  out.clear();
  size_t prev = 0;
  auto add = [&](size_t start, size_t end) {
    if (prev != start) out.push_back({prev, start, false});
    out.push_back({start, end, true});
    prev = end;
  };
  if (step.kind == PreTokStep::Kind::split_regex || step.kind == PreTokStep::Kind::byte_level) {
    step.regex->for_each_match(s, add);
  } else if (step.kind == PreTokStep::Kind::split_literal) {
    if (!step.literal.empty())
      for (size_t p = 0; (p = s.find(step.literal, p)) != std::string_view::npos; p += step.literal.size())
        add(p, p + step.literal.size());
  } else {
    for (size_t i = 0; i < s.size();) {
      Utf8Char c = utf8_next(s, i);
      if (step.pred(c.cp)) add(i, i + c.len);
      i += c.len;
    }
  }
  if (prev != s.size()) out.push_back({prev, s.size(), false});
}

// Folds the matches by behaviour into pieces; `keep[i]` false for removed ones.
void apply_behavior(SplitBehavior b, bool invert, std::vector<Match>& m, std::vector<Match>& out) {
  if (invert)
    for (Match& x : m) x.is_match = !x.is_match;
  out.clear();
  bool previous_match = false;
  switch (b) {
    case SplitBehavior::isolated:
      for (const Match& x : m) out.push_back({x.start, x.end, false});
      break;
    case SplitBehavior::removed:
      out = m;  // is_match now means "remove"
      break;
    case SplitBehavior::contiguous:
      for (const Match& x : m) {
        if (x.is_match == previous_match && !out.empty())
          out.back().end = x.end;
        else
          out.push_back({x.start, x.end, false});
        previous_match = x.is_match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const Match& x : m) {
        if (x.is_match && !previous_match && !out.empty())
          out.back().end = x.end;
        else
          out.push_back({x.start, x.end, false});
        previous_match = x.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t k = m.size(); k-- > 0;) {
        const Match& x = m[k];
        if (x.is_match && !previous_match && !out.empty())
          out.back().start = x.start;
        else
          out.push_back({x.start, x.end, false});
        previous_match = x.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
}

void split_one(const PreTokStep& step, std::string_view s, bool at_start, Splits& out) {
  thread_local std::vector<Match> matches, pieces;
  find_matches(step, s, matches);
  if (s.empty()) return;
  apply_behavior(step.behavior, step.invert, matches, pieces);
  for (const Match& p : pieces)
    if (!p.is_match && p.end > p.start) out.add(s.substr(p.start, p.end - p.start), at_start && p.start == 0);
}

// False (nothing added) when the replaced text would pass `limit`.
bool metaspace_one(const PreTokStep& step, std::string_view s, bool at_start, Splits& out, size_t limit) {
  thread_local std::string t;
  t.clear();
  for (char c : s) {
    if (c == ' ')
      t += step.replacement;
    else
      t += c;
    if (t.size() > limit) return false;
  }
  bool prepend =
      step.prepend == PreTokStep::Prepend::always || (step.prepend == PreTokStep::Prepend::first && at_start);
  if (prepend && !std::string_view(t).starts_with(step.replacement)) t.insert(0, step.replacement);
  if (!step.split) {
    out.add(t, at_start);
    return true;
  }
  PreTokStep cut;
  cut.kind = PreTokStep::Kind::split_literal;
  cut.literal = step.replacement;
  cut.behavior = SplitBehavior::merged_with_next;
  split_one(cut, t, at_start, out);
  return true;
}

}  // namespace

void pre_tokenize(const std::vector<PreTokStep>& steps, Splits& a, Splits& tmp, const std::string& source) {
  const size_t input = a.buf.size();
  // Also within Splits' 32-bit offsets.
  const size_t limit = std::min<size_t>(expansion_limit(input), UINT32_MAX);
  for (const PreTokStep& step : steps) {
    tmp.clear();
    for (size_t i = 0; i < a.spans.size(); ++i) {
      std::string_view s = a.piece(i);
      bool at_start = a.spans[i].at_start;
      if (tmp.buf.size() > limit) expansion_fail("pre-tokenizer", source, input);
      if (step.kind == PreTokStep::Kind::metaspace) {
        if (!metaspace_one(step, s, at_start, tmp, limit - tmp.buf.size())) expansion_fail("pre-tokenizer", source, input);
      } else if (step.kind == PreTokStep::Kind::byte_level) {
        std::string prefixed;
        if (step.add_prefix_space && !s.starts_with(' ')) {
          prefixed.assign(1, ' ').append(s);
          s = prefixed;
        }
        if (step.regex)
          split_one(step, s, at_start, tmp);
        else
          tmp.add(s, at_start);
      } else {
        split_one(step, s, at_start, tmp);
      }
    }
    if (tmp.buf.size() > limit) expansion_fail("pre-tokenizer", source, input);
    std::swap(a, tmp);
  }
}

std::vector<std::string> split_pieces(const PreTokStep& step, std::string_view s) {
  Splits a, tmp;
  a.add(s, true);
  pre_tokenize({step}, a, tmp);
  std::vector<std::string> out;
  for (size_t i = 0; i < a.spans.size(); ++i) out.emplace_back(a.piece(i));
  return out;
}

}  // namespace zt::tok
