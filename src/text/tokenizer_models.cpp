// tokenizer_models.cpp: the Unigram and WordPiece subword models (tokenizer_pipeline.h).
// Unigram: SentencePiece's Viterbi search over every vocab piece that starts at each character,
// scores summed in double precision in the same order as Hugging Face, ties kept by the first
// (shortest) candidate; characters no piece covers are unk (scored min_score - 10), runs of them
// fused into one unk, or their bytes as <0xNN> with byte_fallback. WordPiece: greedy longest
// match first, continuation pieces carry the prefix (##), a word with an unmatched rest or longer
// than max_input_chars_per_word is the unk token.
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "text/tokenizer_pipeline.h"

namespace zt::tok {
namespace {

class UnigramModel final : public WordModel {
 public:
  UnigramModel(std::vector<std::pair<std::string, double>> vocab, int32_t unk_id, bool byte_fallback)
      : vocab_(std::move(vocab)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
    min_score_ = std::numeric_limits<double>::infinity();
    ids_.reserve(vocab_.size());
    trie_.reserve(vocab_.size() * 4);
    terminal_.push_back(-1);
    for (size_t id = 0; id < vocab_.size(); ++id) {
      const std::string& t = vocab_[id].first;
      ids_.emplace(t, int32_t(id));  // a duplicate keeps the first id, as a map insert does
      min_score_ = std::min(min_score_, vocab_[id].second);
      uint32_t node = 0;
      for (char c : t) {
        uint64_t key = uint64_t(node) << 8 | static_cast<unsigned char>(c);
        auto it = trie_.find(key);
        if (it == trie_.end()) {
          it = trie_.emplace(key, uint32_t(terminal_.size())).first;
          terminal_.push_back(-1);
        }
        node = it->second;
      }
      if (!t.empty()) terminal_[node] = ids_.at(t);
    }
  }

  void encode(std::string_view s, std::vector<int32_t>& out) const override {
    const bool cacheable = s.size() <= PieceCache::kMaxPieceBytes;
    if (cacheable && cache_.lookup(s, out)) return;
    const size_t first = out.size();
    viterbi(s, out);
    if (cacheable) cache_.store(s, out.data() + first, out.size() - first);
  }

  int32_t token_to_id(std::string_view token) const override {
    auto it = ids_.find(std::string(token));
    return it == ids_.end() ? -1 : it->second;
  }
  const std::string* id_to_token(int32_t id) const override {
    return id >= 0 && size_t(id) < vocab_.size() ? &vocab_[size_t(id)].first : nullptr;
  }
  int vocab_size() const override { return int(vocab_.size()); }

 private:
  struct Node {
    int32_t id = 0;
    double score = 0;
    int64_t starts_at = -1;
  };

  void viterbi(std::string_view s, std::vector<int32_t>& out) const {
    const size_t n = s.size();
    const double unk_score = min_score_ - 10.0;
    thread_local std::vector<Node> best;
    best.assign(n + 1, Node{});
    for (size_t pos = 0; pos < n;) {
      const double here = best[pos].score;
      const uint32_t mblen = utf8_next(s, pos).len;
      bool has_single = false;
      uint32_t node = 0;
      for (size_t k = pos; k < n; ++k) {
        auto it = trie_.find(uint64_t(node) << 8 | static_cast<unsigned char>(s[k]));
        if (it == trie_.end()) break;
        node = it->second;
        int32_t id = terminal_[node];
        if (id < 0) continue;
        Node& target = best[k + 1];
        double cand = vocab_[size_t(id)].second + here;
        if (target.starts_at < 0 || cand > target.score) target = {id, cand, int64_t(pos)};
        if (k + 1 - pos == mblen) has_single = true;
      }
      if (!has_single) {
        ZT_CHECK(unk_id_ >= 0, "Unigram: the text has a character the vocab lacks, and the model has no unk_id");
        Node& target = best[pos + mblen];
        double cand = unk_score + here;
        if (target.starts_at < 0 || cand > target.score) target = {unk_id_, cand, int64_t(pos)};
      }
      pos += mblen;
    }
    // Back-track: the pieces from the end, with runs of unk fused into one.
    thread_local std::vector<std::pair<size_t, size_t>> pieces;
    pieces.clear();
    size_t fused_end = 0;
    bool in_unk = false;
    for (size_t end = n; end > 0;) {
      const Node& nd = best[end];
      size_t start = size_t(nd.starts_at);
      if (nd.id == unk_id_) {
        if (!in_unk) fused_end = end;
        in_unk = true;
      } else {
        if (in_unk) pieces.push_back({end, fused_end});
        in_unk = false;
        pieces.push_back({start, end});
      }
      end = start;
    }
    if (in_unk) pieces.push_back({0, fused_end});
    for (size_t k = pieces.size(); k-- > 0;) {
      std::string_view piece = s.substr(pieces[k].first, pieces[k].second - pieces[k].first);
      int32_t id = token_to_id(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      if (byte_fallback_ && emit_bytes(piece, out)) continue;
      ZT_CHECK(unk_id_ >= 0, "Unigram: unknown text and no unk_id");
      out.push_back(unk_id_);
    }
  }

  bool emit_bytes(std::string_view piece, std::vector<int32_t>& out) const {
    size_t mark = out.size();
    for (char b : piece) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(b));
      int32_t id = token_to_id(hex);
      if (id < 0) {
        out.resize(mark);
        return false;
      }
      out.push_back(id);
    }
    return true;
  }

  std::vector<std::pair<std::string, double>> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, uint32_t> trie_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> terminal_;                // node -> vocab id ending there, or -1
  double min_score_;
  int32_t unk_id_;
  bool byte_fallback_;
  PieceCache cache_;
};

class WordPieceModel final : public WordModel {
 public:
  WordPieceModel(std::unordered_map<std::string, int32_t> vocab, std::string unk, std::string prefix, size_t max_chars)
      : vocab_(std::move(vocab)), prefix_(std::move(prefix)), max_chars_(max_chars) {
    int32_t top = -1;
    for (const auto& [t, id] : vocab_) top = std::max(top, id);
    text_.resize(size_t(top + 1));
    for (const auto& [t, id] : vocab_) {
      text_[size_t(id)] = t;
      longest_ = std::max(longest_, t.size());
    }
    auto it = vocab_.find(unk);
    unk_id_ = it == vocab_.end() ? -1 : it->second;
  }

  void encode(std::string_view word, std::vector<int32_t>& out) const override {
    const bool cacheable = word.size() <= PieceCache::kMaxPieceBytes;
    if (cacheable && cache_.lookup(word, out)) return;
    const size_t first = out.size();
    greedy(word, out);
    if (cacheable) cache_.store(word, out.data() + first, out.size() - first);
  }

  int32_t token_to_id(std::string_view token) const override {
    auto it = vocab_.find(std::string(token));
    return it == vocab_.end() ? -1 : it->second;
  }
  const std::string* id_to_token(int32_t id) const override {
    return id >= 0 && size_t(id) < text_.size() && !text_[size_t(id)].empty() ? &text_[size_t(id)] : nullptr;
  }
  int vocab_size() const override { return int(text_.size()); }

 private:
  void greedy(std::string_view word, std::vector<int32_t>& out) const {
    auto unk = [&] {
      ZT_CHECK(unk_id_ >= 0, "WordPiece: the unk_token is not in the vocab");
      out.push_back(unk_id_);
    };
    if (utf8_char_count(word) > max_chars_) return unk();
    const size_t mark = out.size();
    std::string candidate;
    for (size_t start = 0; start < word.size();) {
      // No candidate longer than the longest vocab entry can match: starting there (at a character
      // boundary) gives the same result, without trying every longer one on a long word.
      size_t end = std::min(word.size(), start + longest_);
      while (end > start && end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      int32_t found = -1;
      while (start < end) {
        candidate.assign(start > 0 ? prefix_ : "");
        candidate.append(word.substr(start, end - start));
        if (auto it = vocab_.find(candidate); it != vocab_.end()) {
          found = it->second;
          break;
        }
        do --end;  // back to the previous character boundary
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(mark);
        return unk();
      }
      out.push_back(found);
      start = end;
    }
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> text_;
  std::string prefix_;
  size_t max_chars_;
  size_t longest_ = 0;  // bytes of the longest vocab entry
  int32_t unk_id_ = -1;
  PieceCache cache_;
};

}  // namespace

std::unique_ptr<WordModel> make_unigram(std::vector<std::pair<std::string, double>> vocab, int32_t unk_id,
                                        bool byte_fallback) {
  return std::make_unique<UnigramModel>(std::move(vocab), unk_id, byte_fallback);
}

std::unique_ptr<WordModel> make_wordpiece(std::unordered_map<std::string, int32_t> vocab, std::string unk_token,
                                          std::string prefix, size_t max_chars) {
  return std::make_unique<WordPieceModel>(std::move(vocab), std::move(unk_token), std::move(prefix), max_chars);
}

}  // namespace zt::tok
