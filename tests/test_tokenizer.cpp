// test_tokenizer.cpp: tokenizers. Without fixtures: the pre-tokenizer scanners on hand-checked
// cases, tiny hand-written GPT-2 and tokenizer.json files (merge order, byte fallback, special
// tokens, decode), every kind of bad input (each must be a zt::Error naming the file), and
// concurrent encoding. With ZT_TOKENIZER_FIXTURES (made by tests/tokenizer/prepare.sh): token-for-
// token parity with the reference JavaScript tokenizers on the whole Brown corpus plus tricky and
// random strings, decode round trips, and the single-thread speed, printed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_pretok.h"

namespace zt {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("zt_tok_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<std::string> pieces(tok::PreSplit kind, std::string_view s) {
  std::vector<std::string> out;
  tok::for_each_piece(kind, s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerPretok, Gpt2PatternCases) {
  using tok::PreSplit;
  EXPECT_EQ(pieces(PreSplit::gpt2, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces(PreSplit::gpt2, "I'm can't"), (Pieces{"I", "'m", " can", "'t"}));
  EXPECT_EQ(pieces(PreSplit::gpt2, "  x"), (Pieces{" ", " x"}));           // run gives back its last space
  EXPECT_EQ(pieces(PreSplit::gpt2, "a \tb"), (Pieces{"a", " ", "\t", "b"}));  // lone \t before b: \s+
  EXPECT_EQ(pieces(PreSplit::gpt2, "x  "), (Pieces{"x", "  "}));           // trailing run kept whole
  EXPECT_EQ(pieces(PreSplit::gpt2, "a 123 ?!"), (Pieces{"a", " 123", " ?!"}));
  EXPECT_EQ(pieces(PreSplit::gpt2, " 's 'S"), (Pieces{" '", "s", " '", "S"}));  // contractions take no space
  EXPECT_EQ(pieces(PreSplit::gpt2, "caf\xC3\xA9\xE3\x80\x80x"), (Pieces{"caf\xC3\xA9", "\xE3\x80\x80", "x"}));
  EXPECT_EQ(pieces(PreSplit::gpt2, "\xC2\x85x"), (Pieces{"\xC2\x85x"}));  // U+0085 is not \s in JavaScript
}

TEST(TokenizerPretok, Llama3PatternCases) {
  using tok::PreSplit;
  EXPECT_EQ(pieces(PreSplit::llama3, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "I'M 'Ll"), (Pieces{"I", "'M", " '", "Ll"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "(hello)"), (Pieces{"(hello", ")"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "\tx"), (Pieces{"\tx"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "a.\n\nb"), (Pieces{"a", ".\n\n", "b"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "a \n  \n  b"), (Pieces{"a", " \n  \n", " ", " b"}));
  EXPECT_EQ(pieces(PreSplit::llama3, "x   "), (Pieces{"x", "   "}));
}

TEST(TokenizerPretok, Utf8DecodingAndClasses) {
  using tok::CharClass;
  EXPECT_EQ(tok::utf8_next("\xF0\x9F\x98\x80", 0).cp, 0x1F600u);
  EXPECT_EQ(tok::utf8_next("\xC0\x80", 0).cp, tok::kInvalidCodePoint);  // overlong
  EXPECT_EQ(tok::utf8_next("\xED\xA0\x80", 0).cp, tok::kInvalidCodePoint);  // surrogate
  EXPECT_EQ(tok::utf8_next("\xE4\xB8", 0).len, 1u);  // truncated
  EXPECT_EQ(tok::char_class(0x4E2D), CharClass::letter);
  EXPECT_EQ(tok::char_class(0x0663), CharClass::number);
  EXPECT_EQ(tok::char_class(0x00BD), CharClass::number);
  EXPECT_EQ(tok::char_class(0x3000), CharClass::space);
  EXPECT_EQ(tok::char_class(0xFEFF), CharClass::space);
  EXPECT_EQ(tok::char_class(0x200B), CharClass::other);
  EXPECT_EQ(tok::char_class(0x1F600), CharClass::other);
  // Invalid bytes pass through as one-byte "other" pieces.
  EXPECT_EQ(pieces(tok::PreSplit::gpt2, "a\xFF\xFE b"), (Pieces{"a", "\xFF\xFE", " b"}));
}

// GPT-2's printable byte alphabet, written out independently of the library.
std::string gpt2_char(unsigned b) {
  unsigned cp = b, n = 0;
  for (unsigned x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    if (!printable) {
      if (x == b) cp = 256 + n;
      ++n;
    }
  }
  std::string s;
  if (cp < 0x80) s += char(cp);
  else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  return s;
}

// A GPT-2 folder: all 256 byte tokens, then the merges (in GPT-2's printable form), then <|endoftext|>.
fs::path write_gpt2(const std::string& name, const std::vector<std::string>& merges) {
  fs::path dir = scratch(name);
  json enc = json::object();
  for (unsigned b = 0; b < 256; ++b) enc[gpt2_char(b)] = int(b);
  std::string bpe = "#version: 0.2\n";
  for (const std::string& m : merges) {
    enc[m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1)] = int(enc.size());
    bpe += m + "\n";
  }
  enc["<|endoftext|>"] = int(enc.size());
  write_file(dir / "encoder.json", enc.dump());
  write_file(dir / "vocab.bpe", bpe);
  return dir;
}

TEST(TokenizerGpt2, TinyVocabMergesByRankAndRoundTrips) {
  fs::path dir = write_gpt2("tiny", {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"});
  auto t = Tokenizer::load(dir.string());
  EXPECT_EQ(t->name(), "gpt2-bpe");
  EXPECT_EQ(t->vocab_size(), 256 + 9 + 1);
  EXPECT_EQ(t->eos_id(), 265);
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{259, 264}));
  EXPECT_EQ(t->encode("hello<|endoftext|>"), t->encode(std::string("hello<|endoftext|>")));
  EXPECT_EQ(t->encode_with_special("hello<|endoftext|> world"), (std::vector<int32_t>{259, 265, 264}));
  EXPECT_EQ(t->decode({259, 265, 264}), "hello<|endoftext|> world");
  std::string bytes = "\xFF\xFE\x00\x01 tab\there \xE2\x82";  // invalid UTF-8 survives byte-level BPE
  bytes += std::string(1, '\0');
  EXPECT_EQ(t->decode(t->encode(bytes)), bytes);
  EXPECT_TRUE(t->encode("").empty());
  EXPECT_NE(error_of([&] { t->decode({266}); }).find("not in the gpt2-bpe vocabulary"), std::string::npos);
}

// "abab": merges (ab,a) rank 0 and (a,b) rank 1. OpenAI's rule merges every (a,b) first: ab ab.
// Hugging Face merges the leftmost (a,b), then (ab,a) is the best pair: aba b.
TEST(TokenizerGpt2, MergeOrderFollowsEachReference) {
  fs::path dir = scratch("order");
  json enc = {{"a", 0}, {"b", 1}, {"ab", 2}, {"aba", 3}};
  write_file(dir / "encoder.json", enc.dump());
  write_file(dir / "vocab.bpe", "#version: 0.2\nab a\na b\n");
  EXPECT_EQ(Tokenizer::load(dir.string())->encode("abab"), (std::vector<int32_t>{2, 2}));

  json hf = {{"model", {{"type", "BPE"}, {"vocab", enc}, {"merges", {"ab a", "a b"}}}},
             {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  write_file(dir / "hf" / "tokenizer.json", hf.dump());
  EXPECT_EQ(Tokenizer::load((dir / "hf").string())->encode("abab"), (std::vector<int32_t>{3, 1}));
}

// A SentencePiece-style tokenizer.json like Llama-2's: Prepend + Replace normalizer, no
// pre-tokenizer, byte fallback, decoder Replace/ByteFallback/Fuse/Strip.
json tiny_spm_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* t : {"\xE2\x96\x81", "h", "i", "t", "e", "r", "\xE2\x96\x81h", "\xE2\x96\x81hi", "er", "\xE2\x96\x81t",
                        "\xE2\x96\x81\xE2\x96\x81"})
    vocab[t] = next++;
  json merges = {{"\xE2\x96\x81", "h"}, {"\xE2\x96\x81h", "i"}, {"e", "r"}, {"\xE2\x96\x81", "t"},
                 {"\xE2\x96\x81", "\xE2\x96\x81"}};
  json sp = {{"type", "String"}};
  return {
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(TokenizerHf, SentencePieceStyleWithByteFallback) {
  fs::path dir = scratch("spm");
  write_file(dir / "tokenizer.json", tiny_spm_json().dump());
  auto t = Tokenizer::load((dir / "tokenizer.json").string());
  EXPECT_EQ(t->name(), "hf-bpe");
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  // "hi ter" -> ▁hi ▁t e r ; 'e','r' merge -> ▁hi ▁t er
  EXPECT_EQ(t->encode("hi ter"), (std::vector<int32_t>{266, 268, 267}));
  // Unknown 'Z' and '€' become their UTF-8 bytes as <0xNN> tokens.
  EXPECT_EQ(t->encode("Z\xE2\x82\xAC"), (std::vector<int32_t>{259, 3 + 0x5A, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(t->decode(t->encode("hi  ter Z\xE2\x82\xAC")), "hi  ter Z\xE2\x82\xAC");
  EXPECT_EQ(t->encode_with_special("<s>hi</s>"), (std::vector<int32_t>{1, 266, 2}));
  EXPECT_EQ(t->decode({1, 266, 2}), "<s> hi</s>");
}

TEST(TokenizerErrors, GptFilesMissingOrMalformed) {
  EXPECT_NE(error_of([] { Tokenizer::load("/nonexistent/tok"); }).find("/nonexistent/tok does not exist"), std::string::npos);
  fs::path empty = scratch("empty");
  EXPECT_NE(error_of([&] { Tokenizer::load(empty.string()); }).find("no tokenizer in this folder"), std::string::npos);

  fs::path dir = write_gpt2("bad", {"h e"});
  fs::remove(dir / "vocab.bpe");
  EXPECT_NE(error_of([&] { Tokenizer::load(dir.string()); }).find("vocab.bpe: missing"), std::string::npos);

  dir = write_gpt2("bad", {"h e"});
  write_file(dir / "encoder.json", "{\"a\": 1,");
  std::string e = error_of([&] { Tokenizer::load(dir.string()); });
  EXPECT_NE(e.find("encoder.json: not valid JSON"), std::string::npos) << e;
  write_file(dir / "encoder.json", "[1, 2]");
  e = error_of([&] { Tokenizer::load(dir.string()); });
  EXPECT_NE(e.find("encoder.json: expected a JSON object"), std::string::npos) << e;
  write_file(dir / "encoder.json", "{\"a\": \"1\"}");
  e = error_of([&] { Tokenizer::load((dir / "encoder.json").string()); });
  EXPECT_NE(e.find("ids must be integers"), std::string::npos) << e;

  dir = write_gpt2("bad", {"h e"});
  write_file(dir / "vocab.bpe", "#version: 0.2\nh e\nh e x\n");
  e = error_of([&] { Tokenizer::load(dir.string()); });
  EXPECT_NE(e.find("vocab.bpe:3: expected two symbols"), std::string::npos) << e;
  write_file(dir / "vocab.bpe", "#version: 0.2\nh q\n");
  e = error_of([&] { Tokenizer::load(dir.string()); });
  EXPECT_NE(e.find("vocab.bpe:2: merge \"h q\": \"hq\" is not in encoder.json"), std::string::npos) << e;
}

TEST(TokenizerErrors, TokenizerJsonMalformedOrUnsupported) {
  fs::path dir = scratch("hfbad");
  fs::path f = dir / "tokenizer.json";
  auto load_error = [&](const std::string& text) {
    write_file(f, text);
    return error_of([&] { Tokenizer::load(f.string()); });
  };
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = tiny_spm_json();
    edit(j);
    return load_error(j.dump());
  };
  auto expect_has = [&](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(f.string()), std::string::npos) << e;
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  expect_has(load_error("not json"), "not valid JSON");
  expect_has(load_error("[]"), "must be a JSON object");
  expect_has(load_error("{}"), "has no \"model\" field");
  expect_has(with([](json& j) { j["model"]["type"] = "WordPiece"; }), "\"WordPiece\" is not supported");
  expect_has(with([](json& j) { j["model"]["type"] = "Unigram"; }), "\"Unigram\" is not supported");
  expect_has(with([](json& j) { j["model"].erase("merges"); }), "model has no \"merges\" field");
  expect_has(with([](json& j) { j["model"].erase("vocab"); }), "model has no \"vocab\" field");
  expect_has(with([](json& j) { j["model"]["vocab"]["x"] = -3; }), "ids must be integers");
  expect_has(with([](json& j) { j["model"]["merges"].push_back({"h", "q"}); }), "model.merges[5] uses \"q\", which is not in model.vocab");
  expect_has(with([](json& j) { j["model"]["merges"].push_back("h i e"); }), "model.merges[5] must be \"left right\"");
  expect_has(with([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer type \"NFKC\" is not supported");
  expect_has(with([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), "pre_tokenizer type \"Whitespace\"");
  expect_has(with([](json& j) {
               j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}};
             }),
             "is not a supported regex");
  expect_has(with([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }), "decoder type \"WordPiece\"");
  expect_has(with([](json& j) { j["added_tokens"][0].erase("content"); }), "added_tokens[0] has no \"content\" field");
  expect_has(with([](json& j) { j["model"]["byte_fallback"] = "yes"; }), "byte_fallback must be true or false");
}

TEST(TokenizerConcurrency, EncodeIsThreadSafe) {
  fs::path dir = write_gpt2("mt", {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"});
  auto t = Tokenizer::load(dir.string());
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back("hello world " + std::to_string(i * 7919) + " worlds hell" + std::string(size_t(i % 5), ' '));
  std::vector<std::vector<int32_t>> want;
  for (auto& s : texts) want.push_back(t->encode(s));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < 4; ++w)
    pool.emplace_back([&, w] {
      for (int rep = 0; rep < 200; ++rep)
        for (size_t i = size_t(w); i < texts.size(); i += 3) bad[size_t(w)] += t->encode(texts[i]) != want[i];
    });
  for (auto& th : pool) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace zt
