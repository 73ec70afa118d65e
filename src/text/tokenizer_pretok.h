// tokenizer_pretok.h: pre-tokenization, the step that cuts normalized text into the pieces a
// subword model encodes one by one, with Hugging Face tokenizers' semantics: a pattern (a regex
// run by PCRE2, a literal string, or a character predicate) finds matches, and a behaviour
// (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; optionally inverted) says
// what becomes of matches and the text between them. The tokenizer.json pre-tokenizers
// (Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer,
// Sequence) are lists of these steps (tokenizer_hf.cpp builds them). Internal to src/text (and
// data/tokenizer_train.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer_regex.h"
#include "text/tokenizer_unicode.h"

namespace zt::tok {

// GPT-2's pattern (also ByteLevel's use_regex) and the ones Llama-3 and Qwen use.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Pieces of text held in one buffer. at_start: the piece begins where the input text began
// (Metaspace's prepend_scheme "first" asks).
struct Splits {
  struct Span {
    uint32_t off, len;
    bool at_start;
  };
  std::string buf;
  std::vector<Span> spans;
  void clear() {
    buf.clear();
    spans.clear();
  }
  void add(std::string_view s, bool at_start) {
    if (s.empty()) return;
    spans.push_back({uint32_t(buf.size()), uint32_t(s.size()), at_start});
    buf.append(s);
  }
  std::string_view piece(size_t i) const { return std::string_view(buf).substr(spans[i].off, spans[i].len); }
};

struct PreTokStep {
  enum class Kind { split_regex, split_literal, split_chars, byte_level, metaspace };
  explicit PreTokStep(Kind k = Kind::split_regex) : kind(k) {}
  Kind kind;
  // split_*: the pattern and what to do with matches.
  std::shared_ptr<const Regex> regex;
  std::string literal;
  bool (*pred)(uint32_t) = nullptr;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  // byte_level: add_prefix_space, and use_regex (a GPT-2 split, kept in `regex`).
  bool add_prefix_space = false;
  // metaspace
  std::string replacement;
  enum class Prepend { always, first, never } prepend = Prepend::always;
  bool split = true;
};

// Applies the steps in order to the pieces of `a` (the result is left in `a`; `tmp` is scratch).
// Throws zt::Error (naming `source`, the tokenizer file) when the pieces grow past
// expansion_limit (tokenizer_normalize.h) of the input: Metaspace steps whose replacement holds
// spaces would otherwise double the text once per step.
void pre_tokenize(const std::vector<PreTokStep>& steps, Splits& a, Splits& tmp, const std::string& source = "");

// The pieces `pattern` cuts `s` into with `behavior` (exposed for the unit tests).
std::vector<std::string> split_pieces(const PreTokStep& step, std::string_view s);

}  // namespace zt::tok
