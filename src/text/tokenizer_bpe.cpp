// tokenizer_bpe.cpp: see tokenizer_bpe.h. The merge loop is a heap over adjacent pairs keyed by
// (rank, position) with lazy deletion, so a word of n symbols costs O(n log n) however long it
// is (a SentencePiece-style text without a pre-tokenizer can be one very long word).
#include "text/tokenizer_bpe.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "core/error.h"

namespace zt::tok {

const std::array<uint32_t, 256>& byte_to_code_point() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_code_point()[size_t(b)]] = int16_t(b);
    return inv;
  }();
  out.clear();
  for (size_t i = 0; i < token.size();) {
    Utf8Char c = utf8_next(token, i);
    if (c.cp >= inverse.size() || inverse[c.cp] < 0) return false;
    out += char(inverse[c.cp]);
    i += c.len;
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (char b : bytes) append_utf8(out, byte_to_code_point()[static_cast<unsigned char>(b)]);
  return out;
}

// ---- PairTable ----

void PairTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  if (cap <= keys_.size()) return;
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<Merge> old_vals = std::move(vals_);
  keys_.assign(cap, ~0ull);
  vals_.assign(cap, Merge{});
  shift_ = 64 - std::countr_zero(cap);
  size_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i)
    if (old_keys[i] != ~0ull) insert_or_assign(int32_t(old_keys[i] >> 32), int32_t(uint32_t(old_keys[i])), old_vals[i]);
}

void PairTable::insert_or_assign(int32_t left, int32_t right, Merge m) {
  if (2 * (size_ + 1) > keys_.size()) reserve(size_ + 1);
  uint64_t k = key(left, right);
  for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
    if (keys_[i] == k) {
      vals_[i] = m;
      return;
    }
    if (keys_[i] == ~0ull) {
      keys_[i] = k;
      vals_[i] = m;
      ++size_;
      return;
    }
  }
}

const PairTable::Merge* PairTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  uint64_t k = key(left, right);
  for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
    if (keys_[i] == k) return &vals_[i];
    if (keys_[i] == ~0ull) return nullptr;
  }
}

// ---- BpeModel ----

void BpeModel::add_token(std::string_view bytes, int32_t id) {
  ids_.emplace(std::string(bytes), id);
  if (size_t(id) >= text_.size()) text_.resize(size_t(id) + 1);
  text_[size_t(id)] = std::string(bytes);
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t result) {
  pairs_.insert_or_assign(left, right, {int32_t(results_.size()), result});
  results_.push_back(result);
}

int32_t BpeModel::find(std::string_view bytes) const {
  auto it = ids_.find(bytes);
  return it == ids_.end() ? -1 : it->second;
}

void BpeModel::merge(std::vector<Symbol>& w, MergeOrder order) const {
  const int n = int(w.size());
  if (n < 2) return;
  // A candidate merge of the live pair (left, right); stale once either side has changed.
  struct Entry {
    uint64_t key;  // rank << 32 | left: lowest rank first, then leftmost
    int32_t left, right, left_id, right_id, result;
  };
  auto later = [](const Entry& a, const Entry& b) { return a.key > b.key; };
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Entry> heap, pending;
  prev.resize(size_t(n));
  next.resize(size_t(n));
  heap.clear();
  pending.clear();
  for (int i = 0; i < n; ++i) prev[size_t(i)] = i - 1, next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  auto candidate = [&](int32_t l, std::vector<Entry>& to) {
    int32_t r = next[size_t(l)];
    if (r < 0 || w[size_t(l)].id < 0 || w[size_t(r)].id < 0) return false;
    const PairTable::Merge* m = pairs_.find(w[size_t(l)].id, w[size_t(r)].id);
    if (!m) return false;
    to.push_back({(uint64_t(m->rank) << 32) | uint32_t(l), l, r, w[size_t(l)].id, w[size_t(r)].id, m->result});
    return true;
  };
  for (int i = 0; i + 1 < n; ++i) candidate(i, heap);
  std::make_heap(heap.begin(), heap.end(), later);

  // all_occurrences holds back the pairs a merge creates until every occurrence of the current
  // pair is merged; leftmost_first lets them compete at once.
  const bool defer = order == MergeOrder::all_occurrences;
  int64_t current_rank = -1;
  for (;;) {
    if (heap.empty() || (!pending.empty() && int64_t(heap.front().key >> 32) != current_rank)) {
      if (pending.empty()) break;
      for (const Entry& e : pending) {
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), later);
      }
      pending.clear();
      continue;
    }
    std::pop_heap(heap.begin(), heap.end(), later);
    Entry e = heap.back();
    heap.pop_back();
    Symbol& l = w[size_t(e.left)];
    if (l.len == 0 || l.id != e.left_id || next[size_t(e.left)] != e.right || w[size_t(e.right)].id != e.right_id)
      continue;
    current_rank = int64_t(e.key >> 32);
    Symbol& r = w[size_t(e.right)];
    l.id = e.result;
    l.len += r.len;
    r.len = 0;
    int32_t after = next[size_t(e.right)];
    next[size_t(e.left)] = after;
    if (after >= 0) prev[size_t(after)] = e.left;
    std::vector<Entry>& to = defer ? pending : heap;
    if (prev[size_t(e.left)] >= 0 && candidate(prev[size_t(e.left)], to) && !defer)
      std::push_heap(heap.begin(), heap.end(), later);
    if (candidate(e.left, to) && !defer) std::push_heap(heap.begin(), heap.end(), later);
  }
  // Symbol 0 is never the right side of a merge, so the live list starts there.
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) w[k++] = w[size_t(i)];
  w.resize(k);
}

// ---- BpeWordModel ----

BpeWordModel::BpeWordModel(BpeModel model, BpeOptions opt, std::vector<std::string> vocab_text)
    : model_(std::move(model)), opt_(opt), vocab_text_(std::move(vocab_text)) {
  by_text_.reserve(vocab_text_.size());
  for (size_t id = 0; id < vocab_text_.size(); ++id)
    if (!vocab_text_[id].empty()) by_text_.emplace(vocab_text_[id], int32_t(id));
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    byte_token_[size_t(b)] = opt_.byte_level ? model_.find(std::string(1, char(b))) : model_.find(hex);
  }
  for (int c = 0; c < 128; ++c) ascii_token_[size_t(c)] = model_.find(std::string(1, char(c)));
  joinable_small_.assign(256 * 256 / 64, 0);
  for (int32_t id : model_.merge_results()) {
    std::string_view t = model_.text(id);
    if (t.empty()) continue;
    uint32_t len, prev = next_unit(t, 0, &len);
    for (size_t i = len; i < t.size(); i += len) {
      uint32_t unit = next_unit(t, i, &len);
      if (prev < 256 && unit < 256)
        joinable_small_[(prev << 8 | unit) >> 6] |= 1ull << ((prev << 8 | unit) & 63);
      else
        joinable_large_.push_back(uint64_t(prev) << 32 | unit);
      prev = unit;
    }
  }
  std::sort(joinable_large_.begin(), joinable_large_.end());
  joinable_large_.erase(std::unique(joinable_large_.begin(), joinable_large_.end()), joinable_large_.end());
}

int32_t BpeWordModel::token_to_id(std::string_view token) const {
  auto it = by_text_.find(std::string(token));
  return it == by_text_.end() ? -1 : it->second;
}

const std::string* BpeWordModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= vocab_text_.size() || vocab_text_[size_t(id)].empty()) return nullptr;
  return &vocab_text_[size_t(id)];
}

uint32_t BpeWordModel::next_unit(std::string_view s, size_t pos, uint32_t* len) const {
  if (opt_.byte_level) {
    *len = 1;
    return static_cast<unsigned char>(s[pos]);
  }
  Utf8Char c = utf8_next(s, pos);
  *len = c.len;
  return c.cp;
}

bool BpeWordModel::joinable(uint32_t a, uint32_t b) const {
  if (a < 256 && b < 256) return (joinable_small_[(a << 8 | b) >> 6] >> ((a << 8 | b) & 63)) & 1;
  return std::binary_search(joinable_large_.begin(), joinable_large_.end(), uint64_t(a) << 32 | b);
}

void BpeWordModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (opt_.ignore_merges) {
    if (int32_t id = model_.find(text); id >= 0) return out.push_back(id);
  }
  if (text.size() <= PieceCache::kMaxPieceBytes) return encode_piece(text, out);
  size_t start = 0;
  uint32_t prev = 0, len;
  for (size_t i = 0; i < text.size(); i += len) {
    uint32_t unit = next_unit(text, i, &len);
    if (i > start && !joinable(prev, unit)) {
      encode_piece(text.substr(start, i - start), out);
      start = i;
    }
    prev = unit;
  }
  encode_piece(text.substr(start), out);
}

void BpeWordModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  if (cacheable && cache_.lookup(piece, out)) return;
  const size_t first = out.size();
  thread_local std::vector<Symbol> word;
  word.clear();
  uint32_t len;
  for (size_t i = 0; i < piece.size(); i += len) {
    uint32_t unit = next_unit(piece, i, &len);
    int32_t id = opt_.byte_level ? byte_token_[unit]
                 : unit < 128    ? ascii_token_[unit]
                                 : model_.find(piece.substr(i, len));
    word.push_back({id, uint32_t(i), len});
  }
  model_.merge(word, opt_.order);
  bool last_unk = false;
  for (const Symbol& s : word) {
    if (s.id >= 0) {
      out.push_back(s.id);
      last_unk = false;
    } else {
      emit_unknown(piece.substr(s.start, s.len), out, &last_unk);
    }
  }
  if (cacheable) cache_.store(piece, out.data() + first, out.size() - first);
}

// A character the vocab lacks: its bytes as <0xNN> tokens (byte_fallback, when the vocab has
// them all), else the unknown token (once for a run with fuse_unk), else nothing (as Hugging
// Face does without an unk token).
void BpeWordModel::emit_unknown(std::string_view bytes, std::vector<int32_t>& out, bool* last_unk) const {
  bool all_bytes = opt_.byte_fallback;
  for (char b : bytes) all_bytes = all_bytes && byte_token_[static_cast<unsigned char>(b)] >= 0;
  if (all_bytes) {
    for (char b : bytes) out.push_back(byte_token_[static_cast<unsigned char>(b)]);
    *last_unk = false;
  } else if (opt_.unk_id >= 0) {
    if (!(opt_.fuse_unk && *last_unk)) out.push_back(opt_.unk_id);
    *last_unk = true;
  }
}

}  // namespace zt::tok
