// test_tokenizer_added.cpp: issue 22's tokenizer compatibility. Without fixtures: added tokens in
// both of transformers' split_special_tokens modes on a tiny tokenizer.json (non-special always
// matched, a skipped special token still consuming its text), the Precompiled normalizer on a
// hand-built charsmap (Hugging Face's shortest-entry, whole-grapheme lookup) and on random bytes,
// and a SentencePiece tokenizer.model trained here (ids equal to libsentencepiece's, special pieces,
// `ztrain tokenize`, the bad-file error). With ZT_TOKENIZER_FIXTURES (tests/tokenizer/prepare.sh):
// the added-token corpus against Hugging Face in both modes, and three tokenizer.model files against
// spm_encode.
#include <gtest/gtest.h>
#include <unistd.h>
#ifdef ZT_HAS_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "data/token_data.h"
#include "data/tokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_charsmap.h"
#include "test_util.h"

// Its own namespace: the unity build puts this file beside test_tokenizer.cpp, whose helpers share
// these names.
namespace zt::added_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_all(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("zt_tokadd_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Byte-fallback BPE with no merges: every byte b is id 1 + b, so ids spell the text.
json bytes_json() {
  json vocab = {{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 1 + b;
  }
  auto added = [](int id, const char* text, bool special, bool single_word = false) {
    return json{{"id", id},        {"content", text}, {"special", special}, {"single_word", single_word},
                {"lstrip", false}, {"rstrip", false}, {"normalized", false}};
  };
  return {{"added_tokens",
           {added(300, "<x>", true), added(301, "<y>", false), added(302, "<ab>", true), added(303, "b>", false),
            added(304, "sw", false, true)}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", json::array()}}}};
}

Ids spelled(std::string_view s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(1 + c);
  return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids all;
  for (const Ids& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(TokenizerAdded, NonSpecialAlwaysSpecialByFlag) {
  fs::path dir = scratch("added");
  write_all(dir / "tokenizer.json", bytes_json().dump());
  auto t = Tokenizer::load(dir.string());
  const Tokenizer::EncodeOptions split{true, false}, hf{false, false};
  // Non-special <y> is matched in both modes; special <x> only with split_special_tokens false.
  EXPECT_EQ(t->encode("a<y>b<x>", split), cat({spelled("a"), {301}, spelled("b<x>")}));
  EXPECT_EQ(t->encode("a<y>b<x>", hf), cat({spelled("a"), {301}, spelled("b"), {300}}));
  EXPECT_EQ(t->encode("a<y>b<x>"), t->encode("a<y>b<x>", split));  // the default: special tokens are text
  EXPECT_EQ(t->encode_with_special("a<y>b<x>"), t->encode("a<y>b<x>", hf));
  // A special token skipped as text still consumes it (tokenizers' find_matches `continue`): the
  // non-special "b>" inside "<ab>" is not matched, but it is after it.
  EXPECT_EQ(t->encode("<ab>", split), spelled("<ab>"));
  EXPECT_EQ(t->encode("<ab>", hf), Ids{302});
  EXPECT_EQ(t->encode("<ab>b>", split), cat({spelled("<ab>"), {303}}));
  // single_word: only between non-word characters.
  EXPECT_EQ(t->encode("a sw.", split), cat({spelled("a "), {304}, spelled(".")}));
  EXPECT_EQ(t->encode("asw", split), spelled("asw"));
  EXPECT_EQ(t->decode({301, 300}), "<y> <x>");  // no decoder: tokens joined by spaces, as in Hugging Face
}

TEST(TokenizerAdded, TokenizeCommandFlag) {
  fs::path dir = scratch("added_cmd");
  write_all(dir / "tok" / "tokenizer.json", bytes_json().dump());
  write_all(dir / "in" / "a.txt", "<x><y>");
  auto t = Tokenizer::load((dir / "tok").string());
  for (bool split : {true, false}) {
    TokenizeConfig c;
    c.inputs = {(dir / "in").string()};
    c.output_dir = (dir / (split ? "out1" : "out0")).string();
    c.validation_split_percentage = 0;
    c.split_special_tokens = split;
    tokenize_corpus(*t, c);
    TokenFile f(c.output_dir + "/train.bin", t->vocab_size());
    Ids got;
    for (int64_t i = 0; i < f.size(); ++i) got.push_back(int32_t(f.at(i)));
    const Ids want = split ? cat({spelled("<x>"), {301}}) : Ids{300, 301};  // (no eos in this vocab)
    EXPECT_EQ(got, want) << split;
  }
}

// A one-entry charsmap, built by hand in darts-clone's layout: "A" -> "aa".
std::string one_entry_charsmap() {
  std::vector<uint32_t> units(66, 0);
  units[0] = 1u << 10;                        // root: offset 1
  units[1 ^ 'A'] = 'A' | 1u << 8 | 1u << 10;  // label 'A', has a leaf, offset 1
  units[(1 ^ 'A') ^ 1] = 1u << 31 | 0;        // the leaf: value 0, the blob's first string
  std::string bytes(4, '\0');
  const uint32_t trie = uint32_t(units.size() * 4);
  for (int k = 0; k < 4; ++k) bytes[size_t(k)] = char(trie >> (8 * k));
  for (uint32_t u : units)
    for (int k = 0; k < 4; ++k) bytes += char(u >> (8 * k));
  return bytes + std::string("aa\0", 3);
}

TEST(TokenizerPrecompiled, HandBuiltCharsmap) {
  auto m = tok::CharsMap::parse(one_entry_charsmap());
  auto norm = [&](std::string s) {
    EXPECT_TRUE(m->apply(s, 1 << 20));
    return s;
  };
  EXPECT_EQ(norm("xAyA"), "xaayaa");
  EXPECT_EQ(norm("B\xC3\xA9"), "B\xC3\xA9");
  // Hugging Face looks a short grapheme up whole and takes the shortest entry prefixing it, so
  // "A" + U+0301 (one grapheme) becomes "aa" and the accent is gone: reproduced, not corrected.
  EXPECT_EQ(norm("A\xCC\x81z"), "aaz");
  // A grapheme of 6 bytes or more is looked up character by character.
  EXPECT_EQ(norm("A\xCC\x81\xCC\x81\xCC\x81"), "aa\xCC\x81\xCC\x81\xCC\x81");
  std::string big(100, 'A');
  EXPECT_FALSE(m->apply(big, 150));  // the output bound holds
  // Through tokenizer.json: the normalizer step reads base64.
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string raw = one_entry_charsmap(), enc;
  for (size_t i = 0; i < raw.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(raw[i])) << 16 | (i + 1 < raw.size() ? uint32_t(uint8_t(raw[i + 1])) << 8 : 0) |
                 (i + 2 < raw.size() ? uint32_t(uint8_t(raw[i + 2])) : 0);
    for (size_t k = 0; k < 4; ++k) enc += i + k <= raw.size() ? b64[(v >> (18 - 6 * k)) & 63] : '=';
  }
  std::string back;
  ASSERT_TRUE(tok::base64_decode(enc, back));
  EXPECT_EQ(back, raw);
  json j = bytes_json();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", enc}};
  fs::path dir = scratch("precompiled");
  write_all(dir / "tokenizer.json", j.dump());
  EXPECT_EQ(Tokenizer::load(dir.string())->encode("bA"), spelled("baa"));
}

// Random tries and blobs behind a valid header: every lookup stays inside them (a crash or an
// endless loop here is the bug; errors are fine).
TEST(TokenizerPrecompiled, RandomCharsmapsAreBounded) {
  std::mt19937 rng(7);
  const std::string text = "A\xCC\x81 the quick \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 x\x00y\xFF";
  for (int round = 0; round < 3000; ++round) {
    const uint32_t units = 1 + rng() % 300;
    std::string bytes(4, '\0');
    for (int k = 0; k < 4; ++k) bytes[size_t(k)] = char((units * 4) >> (8 * k));
    for (uint32_t i = 0; i < units * 4; ++i)
      bytes += char(round % 2 ? rng() : rng() % 4);  // odd: any; even: small offsets
    for (uint32_t i = rng() % 20; i > 0; --i) bytes += char('a' + rng() % 3 + (rng() % 4 == 0 ? -'a' : 0));
    try {
      auto m = tok::CharsMap::parse(bytes);
      std::string s = text;
      m->apply(s, 1 << 16);
    } catch (const Error&) {
    }
  }
}

// ---- SentencePiece tokenizer.model (when built with libsentencepiece) ----
#ifdef ZT_HAS_SENTENCEPIECE

using test::error_of;

fs::path tiny_spm_model() {
  static const fs::path dir = [] {
    fs::path d = scratch("spm_model");
    std::string corpus;
    for (int i = 0; i < 300; ++i)
      corpus += "the cat sat on the mat <u> and the dog ran " + std::to_string(i % 17) +
                " times\n"
                "a quick brown fox jumps over the lazy dog caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87\n";
    write_all(d / "corpus.txt", corpus);
    fs::create_directories(d / "m");
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (d / "corpus.txt").string() + " --model_prefix=" + (d / "m" / "tokenizer").string() +
        " --vocab_size=60 --hard_vocab_limit=false --model_type=unigram --user_defined_symbols=<u> --minloglevel=2 "
        "--num_threads=1");
    if (!status.ok()) throw std::runtime_error("spm training failed: " + status.ToString());
    fs::remove(d / "m" / "tokenizer.vocab");
    return d / "m";
  }();
  return dir;
}

TEST(TokenizerSpm, ModelFolderMatchesLibsentencepiece) {
  auto t = Tokenizer::load(tiny_spm_model().string());  // a folder with only tokenizer.model
  EXPECT_EQ(t->name(), "sentencepiece");
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((tiny_spm_model() / "tokenizer.model").string()).ok());
  EXPECT_EQ(t->vocab_size(), sp.GetPieceSize());
  EXPECT_EQ(t->bos_id(), sp.bos_id());
  EXPECT_EQ(t->eos_id(), sp.eos_id());
  for (const char* s : {"the cat sat", "  a lazy  dog\n", "xyz \xF0\x9F\x98\x80 \xE4\xB8\xAD", "", "<u>the<u>"}) {
    const std::vector<int> want = sp.EncodeAsIds(s);
    EXPECT_EQ(t->encode(s), Ids(want.begin(), want.end())) << s;
  }
  const int32_t u = sp.PieceToId("<u>"), bos = sp.bos_id(), eos = sp.eos_id();
  const Ids with_u = t->encode("the<u>cat");
  EXPECT_NE(std::count(with_u.begin(), with_u.end(), u), 0);  // always matched
  // Control pieces are special tokens: text unless split_special_tokens is false.
  const Ids plain = t->encode("<s>the</s>"), matched = t->encode_with_special("<s>the</s>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos), 0);
  ASSERT_FALSE(matched.empty());
  EXPECT_EQ(matched.front(), bos);
  EXPECT_EQ(matched.back(), eos);
  EXPECT_EQ(t->encode_with_special("the", true).front(), bos);  // add_bos_token's default
  EXPECT_EQ(t->decode(t->encode("the cat sat")), "the cat sat");
  EXPECT_EQ(t->decode({bos}), "<s>");
  EXPECT_NE(error_of([&] { t->decode({t->vocab_size()}); }).find("is not in the sentencepiece vocabulary"),
            std::string::npos);
}

TEST(TokenizerSpm, TokenizeCommandAndBadFiles) {
  fs::path dir = scratch("spm_cmd");
  write_all(dir / "in" / "a.txt", "the cat sat on the mat\nthe dog\n");
  auto t = Tokenizer::load((tiny_spm_model() / "tokenizer.model").string());  // the file itself
  TokenizeConfig c;
  c.inputs = {(dir / "in").string()};
  c.output_dir = (dir / "out").string();
  c.validation_split_percentage = 0;
  EXPECT_EQ(tokenize_corpus(*t, c).train_tokens, int64_t(t->encode("the cat sat on the mat\nthe dog\n").size() + 1));
  for (const std::string& bytes : {std::string("not a model"), std::string("\x0a\x05hello", 7), std::string()}) {
    write_all(dir / "bad" / "tokenizer.model", bytes);
    const std::string e = error_of([&] { Tokenizer::load((dir / "bad").string()); });
    EXPECT_NE(e.find((dir / "bad" / "tokenizer.model").string() + ": not a SentencePiece model"), std::string::npos)
        << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

#endif  // ZT_HAS_SENTENCEPIECE

// ---- Parity with Hugging Face and SentencePiece (fixtures from tests/tokenizer/prepare.sh) ----

Ids read_ids(const fs::path& p) {
  const std::string bytes = read_all(p);
  Ids ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

const char* fixtures_dir() {
  const char* env = std::getenv("ZT_TOKENIZER_FIXTURES");
  return env && *env ? env : nullptr;
}

TEST(TokenizerParity, AddedTokensMatchHfBothModes) {
  if (!fixtures_dir()) GTEST_SKIP() << "set ZT_TOKENIZER_FIXTURES (tests/tokenizer/prepare.sh makes it)";
  const fs::path fx = fixtures_dir();
  ASSERT_TRUE(fs::exists(fx / "added" / "manifest.json")) << "rerun tests/tokenizer/prepare.sh " << fx;
  const json m = json::parse(read_all(fx / "added" / "manifest.json"));
  for (const auto& name_j : m["tokenizers"]) {
    const std::string name = name_j.get<std::string>();
    auto t = Tokenizer::load((fx / "tokenizers" / name).string());
    size_t docs = 0, split_docs = 0, ids = 0, bad = 0, bad_split = 0;
    for (int d = 0; d < m["docs"].get<int>(); ++d) {
      char id[16];
      std::snprintf(id, sizeof id, "%03d", d % 1000);
      const std::string text = read_all(fx / "added" / "texts" / name / (std::string(id) + ".txt"));
      const Ids want = read_ids(fx / "added" / "ids" / name / (std::string(id) + ".bin"));
      const Ids got = t->encode(text, {false, false});
      ++docs, ids += want.size();
      if (got != want && ++bad <= 3) ADD_FAILURE() << name << " " << id << " (split_special_tokens false) differs";
      const fs::path split = fx / "added" / "split" / name / (std::string(id) + ".bin");
      if (!fs::exists(split)) continue;
      ++split_docs;
      const Ids want_split = read_ids(split);
      ids += want_split.size();
      if (t->encode(text, {true, false}) != want_split && ++bad_split <= 3)
        ADD_FAILURE() << name << " " << id << " (split_special_tokens true) differs";
    }
    EXPECT_EQ(bad + bad_split, 0u) << name;
    std::printf("[added] %s: %zu documents (%zu with a split reference), %zu reference ids, %zu + %zu differ\n",
                name.c_str(), docs, split_docs, ids, bad, bad_split);
  }
}

TEST(TokenizerParity, SentencePieceModelsMatchSpmEncode) {
#ifndef ZT_HAS_SENTENCEPIECE
  GTEST_SKIP() << "built without libsentencepiece";
#endif
  if (!fixtures_dir()) GTEST_SKIP() << "set ZT_TOKENIZER_FIXTURES (tests/tokenizer/prepare.sh makes it)";
  const fs::path spm = fs::path(fixtures_dir()) / "spm";
  ASSERT_TRUE(fs::exists(spm / "lines.txt")) << "rerun tests/tokenizer/prepare.sh (needs the sentencepiece CLI)";
  const std::string lines = read_all(spm / "lines.txt");
  for (const char* name : {"albert", "bpe", "unigram"}) {
    auto t = Tokenizer::load((spm / name).string());
    std::istringstream want_lines(read_all(spm / (std::string(name) + ".ids")));
    size_t n = 0, ids = 0, bad = 0;
    for (size_t b = 0; b < lines.size();) {
      const size_t e = std::min(lines.find('\n', b), lines.size());
      std::string want_line;
      std::getline(want_lines, want_line);
      Ids want;
      std::istringstream nums(want_line);
      for (int32_t v; nums >> v;) want.push_back(v);
      const Ids got = t->encode(std::string_view(lines).substr(b, e - b));
      ++n, ids += want.size();
      if (got != want && ++bad <= 3) ADD_FAILURE() << name << " line " << n << " differs";
      b = e + 1;
    }
    EXPECT_EQ(bad, 0u) << name;
    std::printf("[spm] %s: %zu lines, %zu spm_encode ids, %zu lines differ\n", name, n, ids, bad);
  }
}

}  // namespace
}  // namespace zt::added_test
