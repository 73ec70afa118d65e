// tokenizer_pipeline.cpp: see tokenizer_pipeline.h. Added tokens are found leftmost-longest
// (the Aho-Corasick match kind Hugging Face uses), honouring single_word, lstrip and rstrip.
#include "text/tokenizer_pipeline.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "text/tokenizer_bpe.h"

namespace zt::tok {

WordModel::~WordModel() = default;

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  size_t h = Hash{}(piece);
  Shard& s = shards_[(h >> 20) % kShards];
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(piece);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::store(std::string_view piece, const int32_t* ids, size_t n) const {
  size_t h = Hash{}(piece);
  Shard& s = shards_[(h >> 20) % kShards];
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.map.size() >= kShardCapacity) s.map.clear();
  s.map.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
}

void AddedTrie::insert(std::string_view text, uint32_t index) {
  if (text.empty()) return;
  uint64_t node = 0;
  for (unsigned char c : text) {
    auto [it, fresh] = edges_.try_emplace(node << 8 | c, uint32_t(value_.size()));
    if (fresh) value_.push_back(-1);
    node = it->second;
  }
  if (value_[node] < 0) value_[node] = index;
  first_[static_cast<unsigned char>(text[0])] = true;
}

bool AddedTrie::longest_at(std::string_view text, size_t at, uint32_t* index, size_t* len) const {
  if (at >= text.size() || !first_[static_cast<unsigned char>(text[at])]) return false;
  uint64_t node = 0;
  bool found = false;
  for (size_t i = at; i < text.size(); ++i) {
    auto it = edges_.find(node << 8 | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (value_[node] >= 0) *index = uint32_t(value_[node]), *len = i + 1 - at, found = true;
  }
  return found;
}

namespace {

// The pre-tokenizer cuts only with patterns that cannot join text across "\n" followed by a
// non-space character, and the normalizer (if any) is a Unicode form ("\n" is a starter that
// composes with nothing): so a document cut there encodes piece by piece to the same ids.
// Added tokens could undo that: one holding "\n" then a non-space character can span the cut, and
// an lstrip one right after it takes the "\n" from the piece before.
bool newline_cuts_are_safe(const PipelineParts& p) {
  if (p.pre_tokenizer.empty()) return false;
  for (const NormalizeStep& n : p.normalizer)
    if (n.kind != NormalizeStep::Kind::form) return false;
  for (const PreTokStep& s : p.pre_tokenizer) {
    if (s.kind == PreTokStep::Kind::metaspace) return false;
    if (s.kind == PreTokStep::Kind::byte_level && s.add_prefix_space) return false;
    if (s.kind == PreTokStep::Kind::split_regex && s.behavior != SplitBehavior::isolated &&
        s.behavior != SplitBehavior::removed)
      return false;
  }
  for (const AddedToken& a : p.added) {
    if (a.lstrip) return false;
    for (size_t i = 0; i + 1 < a.content.size(); ++i)
      if (a.content[i] == '\n' && !std::isspace(static_cast<unsigned char>(a.content[i + 1]))) return false;
  }
  return true;
}

bool is_word_at_end(std::string_view s) {
  if (s.empty()) return false;
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return is_word_char(utf8_next(s, k).cp);
}

}  // namespace

PipelineTokenizer::PipelineTokenizer(PipelineParts parts) : parts_(std::move(parts)) {
  vocab_size_ = parts_.model->vocab_size();
  for (const AddedToken& a : parts_.added) vocab_size_ = std::max(vocab_size_, a.id + 1);
  splits_at_newlines_ = newline_cuts_are_safe(parts_);
  for (uint32_t i = 0; i < parts_.added.size(); ++i) {
    const AddedToken& a = parts_.added[i];
    added_by_id_.emplace(a.id, i);
    std::string text = a.content;
    if (a.normalized) normalize_text(parts_.normalizer, text, parts_.source);
    (a.normalized ? normalized_trie_ : raw_trie_).insert(text, i);
    (a.normalized ? normalized_any_ : raw_any_) = true;
    if (!a.special) (a.normalized ? normalized_plain_ : raw_plain_) = true;
  }
}

void PipelineTokenizer::split_added(std::string_view text, bool normalized, bool split_special,
                                    std::vector<Part>& parts) const {
  parts.clear();
  const AddedTrie& trie = normalized ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t k = 0;
    size_t len = 0;
    if (!trie.longest_at(text, i, &k, &len)) {
      ++i;
      continue;
    }
    const AddedToken* best = &parts_.added[k];
    size_t start = i, stop = i + len;
    i = stop;
    // A skipped match still consumes its text, as in tokenizers' find_matches: a shorter token
    // inside a special one is not matched either.
    if (split_special && best->special) continue;
    if (best->single_word) {
      bool start_space = start == 0 || !is_word_at_end(text.substr(0, start));
      bool stop_space = stop == text.size() || !is_word_char(utf8_next(text, stop).cp);
      if (!start_space || !stop_space) continue;
    }
    if (best->lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (!is_white_space(utf8_next(text, b).cp)) break;
        s = b;
      }
      start = s;
    }
    if (best->rstrip)
      while (stop < text.size()) {
        Utf8Char c = utf8_next(text, stop);
        if (!is_white_space(c.cp)) break;
        stop += c.len;
      }
    if (start_offset < start) parts.push_back({start_offset, start, nullptr});
    parts.push_back({start, stop, best});
    start_offset = i = stop;
  }
  if (start_offset < text.size()) parts.push_back({start_offset, text.size(), nullptr});
}

void PipelineTokenizer::encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  thread_local Splits a, tmp;
  a.clear();
  a.add(text, at_start);
  pre_tokenize(parts_.pre_tokenizer, a, tmp, parts_.source);
  for (size_t i = 0; i < a.spans.size(); ++i) parts_.model->encode(a.piece(i), out);
}

void PipelineTokenizer::encode_part(std::string_view text, bool at_start, bool split_special,
                                    std::vector<int32_t>& out) const {
  std::string normalized;
  if (!parts_.normalizer.empty()) {
    normalized.assign(text);
    normalize_text(parts_.normalizer, normalized, parts_.source);
    text = normalized;
  }
  if (!any_added(true, split_special)) return encode_normalized(text, at_start, out);
  std::vector<Part> parts;
  split_added(text, true, split_special, parts);
  for (const Part& p : parts) {
    if (p.token)
      out.push_back(p.token->id);
    else
      encode_normalized(text.substr(p.start, p.end - p.start), at_start && p.start == 0, out);
  }
}

std::vector<int32_t> PipelineTokenizer::encode(std::string_view text, EncodeOptions opt) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  if (opt.add_special_tokens) out = parts_.post.before;
  const bool split = opt.split_special_tokens;
  if (!any_added(false, split)) {
    encode_part(text, true, split, out);
  } else {
    std::vector<Part> parts;
    split_added(text, false, split, parts);
    for (const Part& p : parts) {
      if (p.token)
        out.push_back(p.token->id);
      else
        encode_part(text.substr(p.start, p.end - p.start), p.start == 0, split, out);
    }
  }
  if (opt.add_special_tokens) out.insert(out.end(), parts_.post.after.begin(), parts_.post.after.end());
  return out;
}

namespace {

// Built into a new string: replacing in place moves the tail once per match (quadratic).
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string r;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    r.append(s, pos, hit - pos);
    r += to;
  }
  r.append(s, pos, std::string::npos);
  s.swap(r);
}

size_t total_bytes(const std::vector<std::string>& tokens) {
  size_t n = 0;
  for (const std::string& t : tokens) n += t.size();
  return n;
}

bool byte_fallback_token(const std::string& t, char* byte) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>' || !hex(t[3]) || !hex(t[4])) return false;
  *byte = char(std::stoi(t.substr(3, 2), nullptr, 16));
  return true;
}

// ByteFallback: runs of <0xNN> tokens become one token of those bytes.
void decode_byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  char b;
  bool in_bytes = false;
  for (std::string& t : tokens) {
    if (byte_fallback_token(t, &b)) {
      if (!in_bytes) out.emplace_back();
      out.back() += b;
      in_bytes = true;
    } else {
      out.push_back(std::move(t));
      in_bytes = false;
    }
  }
  tokens.swap(out);
}

// Strip: up to d.start copies of d.from off each token's front, up to d.stop off its back.
void decode_strip(const DecodeStep& d, std::vector<std::string>& tokens) {
  for (std::string& t : tokens) {
    size_t b = 0, e = t.size();
    for (size_t k = 0; k < d.start && t.compare(b, d.from.size(), d.from) == 0 && b < e; ++k) b += d.from.size();
    for (size_t k = 0; k < d.stop && e >= b + d.from.size() && t.compare(e - d.from.size(), d.from.size(), d.from) == 0;
         ++k)
      e -= d.from.size();
    t = t.substr(b, e - b);
  }
}

// Replace: false (nothing more replaced) when a token's growth would pass `limit` bytes in all.
bool decode_replace(const DecodeStep& d, std::vector<std::string>& tokens, size_t limit) {
  size_t bytes = total_bytes(tokens);
  for (std::string& t : tokens) {
    // One token grows at most |t| / |from| * |to|: checked before it is built.
    const size_t grown = d.from.empty() ? 0 : t.size() / d.from.size() * d.to.size();
    if (bytes + grown > limit) return false;
    bytes -= t.size();
    replace_all(t, d.from, d.to);
    bytes += t.size();
  }
  return true;
}

// WordPiece: a continuation prefix joins a token to the previous one, other tokens get a space;
// `cleanup` undoes the spaces BERT's tokenization put before punctuation and contractions.
void decode_wordpiece(const DecodeStep& d, std::vector<std::string>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    if (i != 0) {
      if (t.starts_with(d.from))
        t.erase(0, d.from.size());
      else
        t.insert(0, " ");
    }
    if (d.cleanup)
      for (auto [f, r] : {std::pair{" .", "."},
                          {" ?", "?"},
                          {" !", "!"},
                          {" ,", ","},
                          {" ' ", "'"},
                          {" n't", "n't"},
                          {" 'm", "'m"},
                          {" do not", " don't"},
                          {" 's", "'s"},
                          {" 've", "'ve"},
                          {" 're", "'re"}})
        replace_all(t, f, r);
  }
}

// Returns false when a Replace grew the tokens past `limit` (bytes in all).
bool apply_decoder(const DecodeStep& d, std::vector<std::string>& tokens, size_t limit) {
  using K = DecodeStep::Kind;
  switch (d.kind) {
    case K::byte_level: {
      // Bytes are kept as they are (Hugging Face replaces invalid UTF-8 with U+FFFD; keeping
      // them makes decode(encode(x)) == x for any bytes).
      std::string all, raw;
      for (const std::string& t : tokens) all += byte_level_decode(t, raw) ? raw : t;
      tokens.assign(1, std::move(all));
      break;
    }
    case K::byte_fallback:
      decode_byte_fallback(tokens);
      break;
    case K::fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case K::strip:
      decode_strip(d, tokens);
      break;
    case K::replace:
      if (!decode_replace(d, tokens, limit)) return false;
      break;
    case K::metaspace:
      for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], d.from, i == 0 && d.prepend ? "" : " ");
      break;
    case K::wordpiece:
      decode_wordpiece(d, tokens);
      break;
  }
  return total_bytes(tokens) <= limit;
}

}  // namespace

std::string PipelineTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    auto it = added_by_id_.find(id);
    const std::string* t = it != added_by_id_.end() ? &parts_.added[it->second].content : parts_.model->id_to_token(id);
    ZT_CHECK(t, "decode: token id ", id, " is not in the ", parts_.name, " vocabulary (", vocab_size_,
             " ids); the ids were made by a different tokenizer");
    tokens.push_back(*t);
  }
  if (!parts_.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  const size_t input = total_bytes(tokens), limit = expansion_limit(input);
  for (const DecodeStep& d : parts_.decoder)
    if (!apply_decoder(d, tokens, limit)) expansion_fail("decoder", parts_.source, input);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace zt::tok
