// test_tokenizer_train.cpp: BPE training (src/data/tokenizer_train.h) against a naive reference
// that recounts every pair after each merge; the pieces counted; ties; the written files load
// and encode the training words back to single tokens. The end-to-end check against Hugging
// Face's library is tests/tokenizer/train_parity.sh (ctest tokenizer_train_hf).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "data/tokenizer_train.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"

namespace zt::tok {
namespace {

// Recounts all pairs each step; ties go to the smaller (left id, right id).
LearnedBpe naive_bpe(const PieceCounts& counts, int max_tokens) {
  LearnedBpe out = learn_bpe({}, 256);  // the byte tokens in their order
  std::map<std::string, int32_t> id;
  for (size_t i = 0; i < out.tokens.size(); ++i) id[out.tokens[i]] = int32_t(i);
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (auto& [w, n] : counts) {
    std::vector<int32_t> s;
    for (char c : w) s.push_back(id[std::string(1, c)]);
    words.push_back({s, n});
  }
  while (int(out.tokens.size()) < max_tokens) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pc;
    for (auto& [s, n] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pc[{s[i], s[i + 1]}] += n;
    if (pc.empty()) break;
    auto best = pc.begin();
    for (auto it = pc.begin(); it != pc.end(); ++it)
      if (it->second > best->second) best = it;  // map order: the first of equal counts is the smallest pair
    auto [a, b] = best->first;
    std::string text = out.tokens[size_t(a)] + out.tokens[size_t(b)];
    if (!id.count(text)) {
      id[text] = int32_t(out.tokens.size());
      out.tokens.push_back(text);
    }
    int32_t c = id[text];
    out.merges.push_back({a, b});
    for (auto& [s, n] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i] == a && s[i + 1] == b) {
          s[i] = c;
          s.erase(s.begin() + std::ptrdiff_t(i) + 1);
        }
  }
  return out;
}

TEST(TokenizerTrain, MatchesNaiveReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    PieceCounts counts;
    const std::string alphabet = trial % 2 ? "ab" : "abcd \xc3\xa9";  // small alphabets: many repeats, ties
    for (int w = 0; w < 200; ++w) {
      std::string s;
      int len = 1 + int(rng() % 12);
      for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
      counts[s] += 1 + int64_t(rng() % 5);
    }
    LearnedBpe fast = learn_bpe(counts, 256 + 60), ref = naive_bpe(counts, 256 + 60);
    ASSERT_EQ(fast.merges, ref.merges) << "trial " << trial;
    ASSERT_EQ(fast.tokens, ref.tokens) << "trial " << trial;
  }
}

TEST(TokenizerTrain, OverlappingPairsAndTies) {
  // "aaaa" x1: (a,a) occurs 3 times; merged left to right it gives "AA AA" then "AAAA".
  LearnedBpe r = learn_bpe({{"aaaa", 1}}, 300);
  ASSERT_EQ(r.merges.size(), 2u);
  EXPECT_EQ(r.tokens[256], "aa");
  EXPECT_EQ(r.tokens[257], "aaaa");
  // Equal counts: the pair of smaller ids wins ("b" and "c" sort after "a" in GPT-2's order).
  LearnedBpe t = learn_bpe({{"bc", 2}, {"ab", 2}}, 257);
  ASSERT_EQ(t.tokens.size(), 257u);
  EXPECT_EQ(t.tokens[256], "ab");
  // Two merges giving the same text reuse its token: the vocab grows by one per new text.
  LearnedBpe d = learn_bpe({{"abc", 10}, {"ab", 3}, {"bc", 20}}, 300);
  EXPECT_EQ(d.tokens.size(), d.merges.size() + 256);
}

TEST(TokenizerTrain, CountsGpt2Pieces) {
  PieceCounts c;
  count_pieces("Hello world, hello world!\n\n  x's", c);
  EXPECT_EQ(c["Hello"], 1);
  EXPECT_EQ(c[" world"], 2);
  EXPECT_EQ(c[","], 1);
  EXPECT_EQ(c["'s"], 1);
  EXPECT_EQ(c["\n\n "], 1);  // \s+(?!\S) leaves the last space to " x"
  EXPECT_EQ(c[" x"], 1);
  // Cutting just after a newline between non-spaces changes nothing (the reader cuts there).
  std::string text = "one two.\nthree\n\nfour five\nsix's  \n(seven)\nend";
  PieceCounts whole, parts;
  count_pieces(text, whole);
  for (size_t s = 0, i = 2; i <= text.size(); ++i)
    if (i == text.size() ||
        (text[i - 1] == '\n' && !std::isspace((unsigned char)text[i - 2]) && !std::isspace((unsigned char)text[i]))) {
      count_pieces(std::string_view(text).substr(s, i - s), parts);
      s = i;
    }
  EXPECT_EQ(whole, parts);
}

TEST(TokenizerTrain, WritesFilesThatLoadAndEncode) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("zt_tok_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 50; ++i) f << "the cat sat on the mat. the dog sat on the log.\n";
  }
  BpeTrainConfig cfg;
  cfg.inputs = {(dir / "corpus.txt").string()};
  cfg.output_dir = (dir / "out").string();
  cfg.vocab_size = 270;  // the corpus has 17 pairs to merge
  BpeTrainStats st = train_bpe_tokenizer(cfg);
  EXPECT_EQ(st.vocab_size, 270);
  EXPECT_EQ(st.bytes, 50u * 48u);
  for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
  auto tok = Tokenizer::load((dir / "out").string());
  EXPECT_EQ(tok->vocab_size(), 270);
  EXPECT_EQ(tok->eos_id(), 269);
  EXPECT_EQ(tok->encode(" the").size(), 1u);
  EXPECT_EQ(tok->encode(" sat").size(), 1u);
  std::string text = "the cat, the log; \xf0\x9f\x98\x80 unseen \xff bytes";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(tok->encode_with_special("a<|endoftext|>").back(), 269);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt::tok
