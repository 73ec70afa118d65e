// tokenizer_train.cpp: see tokenizer_train.h. Two phases:
//  1. count: the corpus is read in batches of chunks (a text file in blocks cut where GPT-2's
//     pre-tokenizer cannot join pieces, a JSONL record whole); each thread counts the pieces of
//     its chunks in its own map, merged into one map after each batch.
//  2. merge: every distinct piece is a word of byte ids with its count. Pair counts, the words
//     each pair occurs in, and a max-heap of (count, pair) with lazy updates (an entry whose
//     count is stale is pushed again with the current one) give the next merge in O(log n);
//     a merge only touches the words that hold the pair.
#include "data/tokenizer_train.h"

#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"
#include "text/tokenizer_pretok.h"
#include "text/tokenizer_regex.h"

namespace zt {
namespace fs = std::filesystem;
namespace tok {
namespace {

const Regex& gpt2_regex() {
  // Oniguruma's flavour: what Hugging Face's ByteLevel pre-tokenizer runs this pattern in.
  static const Regex re(kGpt2Pattern, RegexFlavor::onig);
  return re;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

void count_pieces(std::string_view text, PieceCounts& counts) {
  // Isolated: the matches and the text between them (bytes of invalid UTF-8, which the pattern
  // matches nothing of) are the pieces, as in the tokenizer's pipeline.
  size_t last = 0;
  auto add = [&](size_t s, size_t e) {
    if (e > s) ++counts[std::string(text.substr(s, e - s))];
  };
  gpt2_regex().for_each_match(text, [&](size_t s, size_t e) {
    add(last, s);
    add(s, e);
    last = std::max(last, e);
  });
  add(last, text.size());
}

namespace {

// Max-heap on count; equal counts: the smaller pair key first (deterministic tie-break).
struct PairEntry {
  int64_t count;
  uint64_t pair;
  bool operator<(const PairEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// The merge phase's state: the words as symbol ids with their counts, each pair's count, the
// words each pair occurs in, and the heap that gives the most frequent pair.
struct BpeWords {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  std::priority_queue<PairEntry> heap;
};

// The 256 bytes in GPT-2's order (by their printable code point) as the first tokens, so that ids
// 0..255 read like GPT-2's: "!" is 0, the space's "Ġ" is 220. Returns each byte's id.
std::array<int32_t, 256> add_byte_tokens(LearnedBpe& out, std::unordered_map<std::string, int32_t>& token_id) {
  std::vector<int> order(256);
  for (int b = 0; b < 256; ++b) order[size_t(b)] = b;
  std::sort(order.begin(), order.end(),
            [](int a, int b) { return byte_to_code_point()[size_t(a)] < byte_to_code_point()[size_t(b)]; });
  std::array<int32_t, 256> byte_id{};
  for (int i = 0; i < 256; ++i) {
    byte_id[size_t(order[size_t(i)])] = i;
    out.tokens.push_back(std::string(1, char(order[size_t(i)])));
  }
  for (int i = 0; i < 256; ++i) token_id[out.tokens[size_t(i)]] = i;
  return byte_id;
}

// Every piece as a word of byte ids, with its pair counts and the heap over them.
void count_pairs(const PieceCounts& counts, const std::array<int32_t, 256>& byte_id, BpeWords& st) {
  // Words in a fixed order (sorted text), so the result does not depend on hash-map order.
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  sorted.reserve(counts.size());
  for (auto& kv : counts) sorted.push_back(&kv);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  st.words.resize(sorted.size());
  st.freq.resize(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    st.freq[w] = sorted[w]->second;
    for (char c : sorted[w]->first) st.words[w].push_back(byte_id[static_cast<unsigned char>(c)]);
    for (size_t i = 0; i + 1 < st.words[w].size(); ++i) {
      uint64_t k = pair_key(st.words[w][i], st.words[w][i + 1]);
      st.pair_count[k] += st.freq[w];
      auto& list = st.where[k];
      if (list.empty() || list.back() != int32_t(w)) list.push_back(int32_t(w));
    }
  }
  for (auto& [k, c] : st.pair_count) st.heap.push({c, k});
}

// Pops the most frequent pair whose heap entry is current (a stale one is pushed again with the
// pair's current count); false when no pair occurs any more.
bool pop_best_pair(BpeWords& st, uint64_t* pair) {
  while (!st.heap.empty()) {
    PairEntry top = st.heap.top();
    st.heap.pop();
    auto it = st.pair_count.find(top.pair);
    int64_t now = it == st.pair_count.end() ? 0 : it->second;
    if (now != top.count) {  // stale entry
      if (now > 0) st.heap.push({now, top.pair});
      continue;
    }
    if (now <= 0) return false;
    *pair = top.pair;
    return true;
  }
  return false;
}

// Merges (a, b) into c in one word (frequency f), noting the pair counts' changes in `delta`.
// Left to right, non-overlapping; the pair before an occurrence is formed with the already merged
// symbol, so "a b a b" -> "c c" counts (c,c) once and (c,a) not at all.
void merge_in_word(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t c, int64_t f,
                   std::vector<std::pair<uint64_t, int64_t>>& delta) {
  const uint64_t pair = pair_key(a, b);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] != a || s[i + 1] != b) continue;
    if (i > 0) {
      delta.push_back({pair_key(s[i - 1], a), -f});
      delta.push_back({pair_key(s[i - 1], c), f});
    }
    delta.push_back({pair, -f});
    if (i + 2 < s.size()) {
      delta.push_back({pair_key(b, s[i + 2]), -f});
      delta.push_back({pair_key(c, s[i + 2]), f});
    }
    s[i] = c;
    s.erase(s.begin() + std::ptrdiff_t(i) + 1);
  }
}

// Merges `pair` into token c in every word that holds it, then updates the counts: a pair whose
// count fell to 0 is forgotten, a changed one is pushed on the heap again (its old entry goes stale).
void merge_pair(BpeWords& st, uint64_t pair, int32_t c, std::vector<std::pair<uint64_t, int64_t>>& delta,
                std::vector<uint64_t>& touched) {
  const int32_t a = int32_t(pair >> 32), b = int32_t(uint32_t(pair));
  std::vector<int32_t> ws = std::move(st.where[pair]);
  st.where.erase(pair);
  std::sort(ws.begin(), ws.end());
  ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
  touched.clear();
  for (int32_t w : ws) {
    delta.clear();
    merge_in_word(st.words[size_t(w)], a, b, c, st.freq[size_t(w)], delta);
    for (auto [k, d] : delta) {
      int64_t& pc = st.pair_count[k];
      pc += d;
      if (d > 0) {
        auto& list = st.where[k];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
      touched.push_back(k);
    }
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (uint64_t k : touched) {
    auto pc = st.pair_count.find(k);
    if (pc == st.pair_count.end()) continue;
    if (pc->second <= 0) {
      st.pair_count.erase(pc);
      st.where.erase(k);
    } else {
      st.heap.push({pc->second, k});  // the old entry, if any, becomes stale
    }
  }
  st.pair_count.erase(pair);
}

}  // namespace

LearnedBpe learn_bpe(const PieceCounts& counts, int max_tokens) {
  LearnedBpe out;
  std::unordered_map<std::string, int32_t> token_id;
  const std::array<int32_t, 256> byte_id = add_byte_tokens(out, token_id);
  BpeWords st;
  count_pairs(counts, byte_id, st);
  std::vector<std::pair<uint64_t, int64_t>> delta;
  std::vector<uint64_t> touched;
  uint64_t pair = 0;
  while (int(out.tokens.size()) < max_tokens && pop_best_pair(st, &pair)) {
    const int32_t a = int32_t(pair >> 32), b = int32_t(uint32_t(pair));
    std::string text = out.tokens[size_t(a)] + out.tokens[size_t(b)];
    // Two merges can give the same text ("a"+"bc", "ab"+"c"): the second reuses the token, so
    // the vocabulary grows by one token per merge only when the text is new (as Hugging Face's
    // trainer does).
    auto [tid, fresh] = token_id.try_emplace(text, int32_t(out.tokens.size()));
    if (fresh) out.tokens.push_back(text);
    out.merges.push_back({a, b});
    merge_pair(st, pair, tid->second, delta, touched);
  }
  return out;
}

}  // namespace tok

namespace {

// The last point of s where a cut cannot change the pieces (tokenize.cpp's safe_cut: just after
// a newline with a non-space character on both sides), or 0 when there is none.
size_t last_safe_cut(const std::string& s) {
  auto space = [&](size_t i) { return std::isspace(static_cast<unsigned char>(s[i])) != 0; };
  for (size_t i = s.size(); i-- > 2;)
    if (s[i - 1] == '\n' && !space(i - 2) && !space(i)) return i;
  return 0;
}

// Streams the corpus as chunks: each JSONL record, or a block of about kBlock bytes of a text
// file ending at a safe cut (a file without one is held whole).
class ChunkReader {
 public:
  static constexpr size_t kBlock = size_t(1) << 20;
  ChunkReader(std::vector<fs::path> files, std::string field) : files_(std::move(files)), field_(std::move(field)) {}

  // Appends chunks up to about `budget` bytes; false when the corpus is exhausted.
  bool next_batch(std::vector<std::string>& out, size_t budget, uint64_t* bytes) {
    size_t used = 0;
    while (used < budget) {
      if (text_.is_open()) {
        size_t old = carry_.size();
        carry_.resize(old + kBlock);
        text_.read(carry_.data() + old, std::streamsize(kBlock));
        size_t got = size_t(text_.gcount());
        carry_.resize(old + got);
        *bytes += got;
        ZT_CHECK(!text_.bad(), "cannot read ", name_);
        if (got < kBlock) {  // end of file
          text_.close();
          used += carry_.size();
          // A copy, not a move: carry_ has a block's capacity, which a small file would keep.
          if (!carry_.empty()) out.push_back(carry_);
          carry_.clear();
        } else if (size_t cut = last_safe_cut(carry_); cut > 0) {
          used += cut;
          out.push_back(carry_.substr(0, cut));
          carry_.erase(0, cut);
        }
        continue;
      }
      if (jsonl_.is_open()) {
        std::string t;
        bool blank = false;
        if (next_jsonl_text(jsonl_, name_, field_, &line_no_, &t, &blank)) {
          *bytes += t.size();
          used += t.size();
          if (!t.empty()) out.push_back(std::move(t));
          continue;
        }
        jsonl_.close();
      }
      if (next_file_ >= files_.size()) return !out.empty();
      const fs::path& f = files_[next_file_++];
      name_ = f.string();
      if (is_jsonl_corpus_file(f)) {
        jsonl_.open(f);
        ZT_CHECK(jsonl_.is_open(), "cannot open ", name_);
        line_no_ = 0;
      } else {
        text_.open(f, std::ios::binary);
        ZT_CHECK(text_.is_open(), "cannot open ", name_);
      }
    }
    return true;
  }

 private:
  std::vector<fs::path> files_;
  std::string field_;
  size_t next_file_ = 0;
  std::ifstream text_, jsonl_;
  std::string carry_, name_;
  int64_t line_no_ = 0;
};

// Fails early (before reading the corpus) when the output folder cannot be made or written.
void check_output_dir(const std::string& dir) {
  ZT_CHECK(!dir.empty(), "--output is required (the folder tokenizer.json is written to)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  ZT_CHECK(!ec && fs::is_directory(dir), "cannot create the output folder ", quote(dir), " (",
           ec ? ec.message() : "a file of that name exists", "); pass --output a writable folder");
  std::string probe = dir + "/.tokenizer-train-probe";
  {
    const int fd = open_new_file(probe);  // never through a planted link
    const bool ok = fd >= 0 && ::write(fd, "x", 1) == 1;
    if (fd >= 0) ::close(fd);
    ZT_CHECK(ok, "cannot write to the output folder ", quote(dir), "; pass --output a writable folder");
  }
  fs::remove(probe, ec);
}

std::string json_str(const std::string& s) { return nlohmann::json(s).dump(); }

void write_outputs(const std::string& dir, const tok::LearnedBpe& bpe) {
  const std::string eot = "<|endoftext|>";
  const int eot_id = int(bpe.tokens.size());
  std::vector<std::string> shown(bpe.tokens.size());
  for (size_t i = 0; i < shown.size(); ++i) shown[i] = tok::byte_level_encode(bpe.tokens[i]);
  // The vocab and merges are written by hand, in id and rank order as Hugging Face writes them
  // (nlohmann's ordered_json inserts in linear time per key).
  std::string vocab = "{";
  for (size_t i = 0; i < shown.size(); ++i) vocab += str_cat(i ? "," : "", json_str(shown[i]), ":", i);
  vocab += str_cat(",", json_str(eot), ":", eot_id, "}");
  std::string merges_json = "[", merges_txt = "#version: 0.2\n";
  for (size_t r = 0; r < bpe.merges.size(); ++r) {
    // Byte-level tokens never hold a space (it shows as "Ġ"), so "left right" is unambiguous;
    // the string form is the one every Hugging Face version and transformers.js read.
    std::string m = shown[size_t(bpe.merges[r].first)] + " " + shown[size_t(bpe.merges[r].second)];
    merges_json += (r ? "," : "") + json_str(m);
    merges_txt += m + "\n";
  }
  merges_json += "]";
  nlohmann::json added = nlohmann::json::array({{{"id", eot_id},
                                                 {"content", eot},
                                                 {"single_word", false},
                                                 {"lstrip", false},
                                                 {"rstrip", false},
                                                 {"normalized", false},
                                                 {"special", true}}});
  auto byte_level = [](bool prefix, bool trim) {
    return str_cat(R"({"type":"ByteLevel","add_prefix_space":)", prefix ? "true" : "false", R"(,"trim_offsets":)",
                   trim ? "true" : "false", R"(,"use_regex":true})");
  };
  std::string tj = str_cat(R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":)", added.dump(),
                           R"(,"normalizer":null,"pre_tokenizer":)", byte_level(false, true), R"(,"post_processor":)",
                           byte_level(true, false), R"(,"decoder":)", byte_level(true, true),
                           R"(,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"",)",
                           R"("end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":false,)",
                           R"("vocab":)", vocab, R"(,"merges":)", merges_json, "}}\n");
  nlohmann::json config = {{"tokenizer_class", "GPT2Tokenizer"},
                           {"bos_token", eot},
                           {"eos_token", eot},
                           {"unk_token", eot},
                           {"add_prefix_space", false}};
  write_file_atomic(dir + "/vocab.json", vocab + "\n");
  write_file_atomic(dir + "/merges.txt", merges_txt);
  write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n");
  // Last, so a folder with a tokenizer.json is a complete one.
  write_file_atomic(dir + "/tokenizer.json", tj);
}

}  // namespace

BpeTrainStats train_bpe_tokenizer(const BpeTrainConfig& cfg) {
  ZT_CHECK(cfg.vocab_size >= 257, "--vocab_size ", cfg.vocab_size,
           " is too small: the 256 bytes and <|endoftext|> need 257; pass at least 257");
  ZT_CHECK(!cfg.inputs.empty(), "--input is required (text files, .jsonl files or folders)");
  auto files = list_corpus_files(cfg.inputs);
  check_output_dir(cfg.output_dir);
  BpeTrainStats st;
  auto t0 = std::chrono::steady_clock::now();
  tok::PieceCounts counts;
  {
    ChunkReader reader(files, cfg.text_field);
    std::vector<std::string> chunks;
    const int nt = std::max(1, omp_get_max_threads());
    std::vector<tok::PieceCounts> local(static_cast<size_t>(nt));
    while (true) {
      chunks.clear();
      if (!reader.next_batch(chunks, cfg.batch_bytes, &st.bytes)) break;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
      for (size_t i = 0; i < chunks.size(); ++i) tok::count_pieces(chunks[i], local[size_t(omp_get_thread_num())]);
      for (auto& m : local) {
        for (auto& [piece, n] : m) counts[piece] += n;
        m.clear();
      }
    }
  }
  for (auto& [piece, n] : counts) st.pieces += n;
  st.distinct_pieces = int64_t(counts.size());
  ZT_CHECK(!counts.empty(), "the corpus has no text (", files.size(), " file(s), ", st.bytes,
           " bytes): nothing to learn a vocabulary from; pass --input files that hold text");
  auto t1 = std::chrono::steady_clock::now();
  tok::LearnedBpe bpe = tok::learn_bpe(counts, cfg.vocab_size - 1);
  counts = {};
  auto t2 = std::chrono::steady_clock::now();
  write_outputs(cfg.output_dir, bpe);
  st.merges = int(bpe.merges.size());
  st.vocab_size = int(bpe.tokens.size()) + 1;
  st.count_seconds = std::chrono::duration<double>(t1 - t0).count();
  st.merge_seconds = std::chrono::duration<double>(t2 - t1).count();
  // The files must load back (and so encode) with ztrain's own reader.
  auto loaded = Tokenizer::load(cfg.output_dir + "/tokenizer.json");
  ZT_ASSERT(loaded->vocab_size() == st.vocab_size, "trained tokenizer reloads with a different vocab size");
  return st;
}

}  // namespace zt
