// tiny_tokenizers.h: three small valid tokenizers the fuzz targets encode and decode with, one
// per loader path: GPT-2 files (byte-level, OpenAI merge order), a Hugging Face SentencePiece-
// style tokenizer.json (Llama-2: Prepend/Replace normalizer, byte fallback, Metaspace-like
// decoder) and a Hugging Face byte-level one with the Llama-3 Split regex and ignore_merges.
// Written once into the scratch folder and loaded through Tokenizer::load like user files.
#pragma once
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"

namespace zt::fuzz {

inline std::string gpt2_char(unsigned b) {
  std::string s;
  zt::tok::append_utf8(s, zt::tok::byte_to_code_point()[b]);
  return s;
}

// Byte-level vocab (256 byte tokens) plus merges given in printable form "left right".
inline nlohmann::json byte_level_vocab(const std::vector<std::string>& merges) {
  nlohmann::json enc = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) enc[gpt2_char(b)] = int(b);
  for (const std::string& m : merges) {
    std::string joined = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
    if (!enc.contains(joined)) enc[joined] = int(enc.size());
  }
  return enc;
}

inline const std::vector<std::string>& tiny_merges() {
  static const std::vector<std::string> m = {"h e", "l l",   "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
                                             "Ġ t", "Ġt he", "i n",   "Ġ a",    "e r", "Ġ Ġ", "Ċ Ġ",   "ĊĠ Ġ"};
  return m;
}

inline std::string write_tiny_gpt2() {
  auto dir = scratch_dir() / "tiny_gpt2";
  std::filesystem::create_directories(dir);
  nlohmann::json enc = byte_level_vocab(tiny_merges());
  enc["<|endoftext|>"] = int(enc.size());
  std::string bpe = "#version: 0.2\n";
  for (const std::string& m : tiny_merges()) bpe += m + "\n";
  write_file(dir / "encoder.json", enc.dump());
  write_file(dir / "vocab.bpe", bpe);
  return dir.string();
}

inline std::string write_tiny_spm() {
  using nlohmann::json;
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* t : {"\xE2\x96\x81", "h", "i", "t", "e", "r", "\xE2\x96\x81h", "\xE2\x96\x81hi", "er",
                        "\xE2\x96\x81t", "\xE2\x96\x81\xE2\x96\x81", "\xC3\xA9", "\xE2\x96\x81\xC3\xA9"})
    vocab[t] = next++;
  json merges =
      json::array({json::array({"\xE2\x96\x81", "h"}), "\xE2\x96\x81h i", json::array({"e", "r"}), "\xE2\x96\x81 t",
                   json::array({"\xE2\x96\x81", "\xE2\x96\x81"}), json::array({"\xE2\x96\x81", "\xC3\xA9"})});
  json j = {{"added_tokens",
             {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
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
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"byte_fallback", true},
              {"fuse_unk", true},
              {"vocab", vocab},
              {"merges", merges}}}};
  auto dir = scratch_dir() / "tiny_spm";
  std::filesystem::create_directories(dir);
  write_file(dir / "tokenizer.json", j.dump());
  return (dir / "tokenizer.json").string();
}

inline std::string write_tiny_llama3() {
  using nlohmann::json;
  const char* regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json vocab = byte_level_vocab(tiny_merges());
  json merges = json::array();
  for (const std::string& m : tiny_merges()) merges.push_back(m);
  int n = int(vocab.size());
  json j = {{"added_tokens",
             {{{"id", n}, {"content", "<|begin_of_text|>"}, {"special", true}},
              {{"id", n + 1}, {"content", "<|end_of_text|>"}, {"special", true}, {"lstrip", true}},
              {{"id", n + 2}, {"content", "<|eot|>"}, {"special", true}, {"rstrip", true}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}};
  auto dir = scratch_dir() / "tiny_llama3";
  std::filesystem::create_directories(dir);
  write_file(dir / "tokenizer.json", j.dump());
  return (dir / "tokenizer.json").string();
}

}  // namespace zt::fuzz
