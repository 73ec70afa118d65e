// tokenizer_hf.cpp: loads a Hugging Face tokenizer.json into a PipelineTokenizer: the model
// (BPE, Unigram, WordPiece), added tokens and bos/eos here; the normalizer, pre-tokenizer,
// post-processor and decoder in tokenizer_hf_steps.cpp. Anything ztrain does not implement is
// rejected by name, because a silently different tokenization would spoil a training run.
// Not here: WordLevel models, BPE dropout.
#include "text/tokenizer_hf.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <unordered_map>

#include "text/tokenizer_bpe.h"

namespace zt::tok {
namespace {

using nlohmann::json;

// A "merges" entry: "left right" (tokenizers < 0.20) or ["left", "right"].
std::pair<std::string, std::string> merge_parts(const Reader& rd, const json& m, size_t i) {
  std::string where = str_cat("model.merges[", i, "]");
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) return {m[0], m[1]};
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    size_t space = s.find(' ');
    if (space != std::string::npos && space > 0 && space + 1 < s.size() && s.find(' ', space + 1) == std::string::npos)
      return {s.substr(0, space), s.substr(space + 1)};
  }
  rd.fail(where, str_cat("must be \"left right\" or [\"left\", \"right\"], found ", rd.brief(m)));
}

std::unique_ptr<WordModel> load_bpe(const Reader& rd, const json& mj, bool byte_level) {
  if (!rd.field(mj, "model", "vocab").is_object() || mj["vocab"].empty())
    rd.fail("model.vocab", "must be a non-empty object of token -> id");
  const json& merges = rd.array_field(mj, "model", "merges");
  if (mj.contains("dropout") && !mj["dropout"].is_null() && mj["dropout"] != 0)
    rd.fail("model.dropout", "must be null (BPE dropout is not supported)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (mj.contains(k) && !mj[k].is_null() && mj[k] != "") rd.fail(str_cat("model.", k), "is not supported");
  BpeOptions opt;
  opt.byte_level = byte_level;
  opt.order = MergeOrder::leftmost_first;
  opt.byte_fallback = rd.bool_field(mj, "model", "byte_fallback", false);
  opt.ignore_merges = rd.bool_field(mj, "model", "ignore_merges", false);
  opt.fuse_unk = rd.bool_field(mj, "model", "fuse_unk", false);

  BpeModel model;
  std::vector<std::string> text;
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(mj["vocab"].size());
  std::string raw;
  for (auto& [t, value] : mj["vocab"].items()) {
    int32_t id = checked_id(rd, value, str_cat("model.vocab[", json(t).dump(), "]"));
    if (!byte_level || !byte_level_decode(t, raw)) raw = t;
    model.add_token(raw, id);
    if (size_t(id) >= text.size()) text.resize(size_t(id) + 1);
    text[size_t(id)] = t;
    vocab.emplace(t, id);
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [left, right] = merge_parts(rd, merges[i], i);
    auto id_of = [&](const std::string& s) {
      auto it = vocab.find(s);
      if (it == vocab.end())
        rd.fail(str_cat("model.merges[", i, "]"), str_cat("uses ", json(s).dump(), ", which is not in model.vocab"));
      return it->second;
    };
    int32_t l = id_of(left), r = id_of(right);  // in this order, so the message names the first missing
    model.add_merge(l, r, id_of(left + right));
  }
  if (mj.contains("unk_token") && mj["unk_token"].is_string()) {
    auto it = vocab.find(mj["unk_token"].get<std::string>());
    opt.unk_id = it == vocab.end() ? -1 : it->second;
  }
  return std::make_unique<BpeWordModel>(std::move(model), opt, std::move(text));
}

// A Unigram score as Hugging Face holds it. tokenizers parses tokenizer.json with serde_json
// without its `float_roundtrip` feature: a decimal's digits are read into an integer, converted to
// double, then multiplied or divided by 10^|exponent| (two roundings), so a score can be one ulp
// off the correctly rounded value nlohmann gives (e.g. "-10.101415634155273" parses to
// -10.101415634155272). Viterbi sums these scores, and when two segmentations tie in exact
// arithmetic (ALBERT's "*" + "**" vs "**" + "*") that ulp decides which wins. The digits are
// those of the shortest representation, which is what every writer of these files emits
// (serde_json's ryu, Python's repr, JavaScript).
double serde_json_f64(double correct) {
  if (!std::isfinite(correct) || correct == 0) return correct;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, correct);  // shortest round-trip digits
  std::string_view t(buf, size_t(r.ptr - buf));
  bool negative = false;
  if (!t.empty() && t[0] == '-') {
    negative = true;
    t.remove_prefix(1);
  }
  uint64_t significand = 0;
  int exponent = 0;
  bool fraction = false;
  size_t i = 0;
  for (; i < t.size() && t[i] != 'e'; ++i) {
    if (t[i] == '.') {
      fraction = true;
      continue;
    }
    significand = significand * 10 + uint64_t(t[i] - '0');  // at most 17 digits: no overflow
    if (fraction) --exponent;
  }
  if (i < t.size()) exponent += std::atoi(std::string(t.substr(i + 1)).c_str());
  static const std::array<double, 309> pow10 = [] {
    std::array<double, 309> p{};
    for (int k = 0; k < 309; ++k) p[size_t(k)] = std::strtod(("1e" + std::to_string(k)).c_str(), nullptr);
    return p;
  }();
  double f = double(significand);
  while (true) {
    int a = std::abs(exponent);
    if (a < 309) {
      f = exponent >= 0 ? f * pow10[size_t(a)] : f / pow10[size_t(a)];
      break;
    }
    if (f == 0 || exponent >= 0) return correct;  // overflow: serde errors; keep the value
    f /= 1e308;
    exponent += 308;
  }
  return negative ? -f : f;
}

std::unique_ptr<WordModel> load_unigram(const Reader& rd, const json& mj) {
  const json& list = rd.array_field(mj, "model", "vocab");
  if (list.empty()) rd.fail("model.vocab", "is empty; a Unigram model needs at least its unk piece");
  std::vector<std::pair<std::string, double>> vocab;
  vocab.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      rd.fail(str_cat("model.vocab[", i, "]"), str_cat("must be [piece, score], found ", rd.brief(e)));
    vocab.emplace_back(e[0].get<std::string>(), serde_json_f64(e[1].get<double>()));
  }
  int32_t unk = -1;
  if (mj.contains("unk_id") && !mj["unk_id"].is_null()) {
    unk = checked_id(rd, mj["unk_id"], "model.unk_id");
    if (size_t(unk) >= vocab.size()) rd.fail("model.unk_id", str_cat(unk, " is past the end of model.vocab"));
  }
  return make_unigram(std::move(vocab), unk, rd.bool_field(mj, "model", "byte_fallback", false));
}

std::unique_ptr<WordModel> load_wordpiece(const Reader& rd, const json& mj) {
  if (!rd.field(mj, "model", "vocab").is_object() || mj["vocab"].empty())
    rd.fail("model.vocab", "must be a non-empty object of token -> id");
  std::unordered_map<std::string, int32_t> vocab;
  for (auto& [t, value] : mj["vocab"].items())
    vocab.emplace(t, checked_id(rd, value, str_cat("model.vocab[", json(t).dump(), "]")));
  std::string unk = rd.string_or(mj, "model", "unk_token", "[UNK]");
  if (!vocab.count(unk)) rd.fail("model.unk_token", str_cat(quote(unk), " is not in model.vocab"));
  // Absent: Hugging Face's default, 100. (json(100) is a signed integer, which an is_number_unsigned()
  // test refused with a message that blamed the file.)
  size_t max_chars = 100;
  if (mj.contains("max_input_chars_per_word")) {
    const json& max = mj["max_input_chars_per_word"];
    if (!max.is_number_integer() || max.get<int64_t>() < 0)
      rd.fail("model.max_input_chars_per_word", str_cat("must be a non-negative integer, found ", rd.brief(max)));
    max_chars = max.get<size_t>();
  }
  return make_wordpiece(std::move(vocab), unk, rd.string_or(mj, "model", "continuing_subword_prefix", "##"),
                        max_chars);
}

void read_added_tokens(const Reader& rd, const json& root, PipelineParts& p) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  const json& list = root["added_tokens"];
  if (!list.is_array()) rd.fail("added_tokens", "must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = str_cat("added_tokens[", i, "]");
    AddedToken a{rd.string_field(list[i], where, "content"), checked_id(rd, rd.field(list[i], where, "id"), where)};
    a.lstrip = rd.bool_field(list[i], where, "lstrip", false);
    a.rstrip = rd.bool_field(list[i], where, "rstrip", false);
    a.single_word = rd.bool_field(list[i], where, "single_word", false);
    a.special = rd.bool_field(list[i], where, "special", false);
    a.normalized = rd.bool_field(list[i], where, "normalized", !a.special);
    if (a.content.empty()) rd.fail(where + ".content", "is empty");
    p.added.push_back(std::move(a));
  }
}

// bos/eos: tokenizer_config.json beside the file when it names them (null means none), else
// the customary token texts.
void resolve_bos_eos(const std::string& file, PipelineParts& p) {
  auto id_of = [&](const std::string& text) -> int32_t {
    for (const AddedToken& a : p.added)
      if (a.content == text) return a.id;
    return p.model->token_to_id(text);
  };
  auto first_of = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names)
      if (int32_t id = id_of(n); id >= 0) return id;
    return -1;
  };
  p.bos_id = first_of({"<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|begin▁of▁sentence|>"});
  p.eos_id = first_of({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[SEP]", "<|end▁of▁sentence|>"});
  std::filesystem::path cfg_path = std::filesystem::path(file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(cfg_path, ec)) return;
  json cfg = read_json_file(cfg_path.string());
  auto from_config = [&](const char* key, int32_t& id) {
    if (!cfg.is_object() || !cfg.contains(key)) return;
    const json& v = cfg[key];
    if (v.is_string())
      id = id_of(v.get<std::string>());
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      id = id_of(v["content"].get<std::string>());
    else
      id = -1;
  };
  from_config("bos_token", p.bos_id);
  from_config("eos_token", p.eos_id);
}

std::unique_ptr<Tokenizer> load_json(const Reader& rd, const json& root) {
  if (!root.is_object()) rd.fail("top level", str_cat("must be a JSON object, found ", root.type_name()));
  const json& mj = rd.field(root, "top level", "model");
  std::string type = mj.contains("type") ? rd.string_field(mj, "model", "type") : mj.contains("merges") ? "BPE" : "";
  auto part = [&](const char* key) { return root.contains(key) ? root[key] : json(); };
  PipelineParts p;
  p.source = rd.file;
  bool byte_level = false;
  parse_normalizer(rd, part("normalizer"), "normalizer", p);
  parse_pre_tokenizer(rd, part("pre_tokenizer"), "pre_tokenizer", p, byte_level);
  if (type == "BPE") {
    p.name = "hf-bpe";
    p.model = load_bpe(rd, mj, byte_level);
  } else if (type == "Unigram") {
    p.name = "hf-unigram";
    p.model = load_unigram(rd, mj);
  } else if (type == "WordPiece") {
    p.name = "hf-wordpiece";
    p.model = load_wordpiece(rd, mj);
  } else {
    rd.fail("model.type", type.empty()
                              ? "is missing"
                              : str_cat(Reader::brief(nlohmann::json(type)),
                                        " is not supported (ztrain reads BPE, Unigram and WordPiece)"));
  }
  read_added_tokens(rd, root, p);
  parse_decoder(rd, part("decoder"), "decoder", p);
  parse_post_processor(rd, part("post_processor"), "post_processor", p);
  // A post-processor's ids are emitted as written: one outside the vocabulary (the model's ids and
  // added_tokens) would index an embedding table past its end (found by fuzz_tokenizer_pipeline).
  int vocab = p.model->vocab_size();
  for (const AddedToken& a : p.added) vocab = std::max(vocab, a.id + 1);
  for (const std::vector<int32_t>* ids : {&p.post.before, &p.post.after})
    for (int32_t id : *ids)
      if (id < 0 || id >= vocab)
        rd.fail("post_processor", str_cat("emits the token id ", id, ", outside the vocabulary of ", vocab,
                                          " ids (the model's and added_tokens)"));
  resolve_bos_eos(rd.file, p);
  return std::make_unique<PipelineTokenizer>(std::move(p));
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::string& file) {
  Reader rd{file};
  json root = read_json_file(file);  // (nested at most kMaxJsonDepth deep: see read_json_file)
  try {
    return load_json(rd, root);
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type somewhere a default was read.
    throw Error(str_cat(file, ": unexpected structure for a tokenizer.json (", e.what(), ")"));
  }
}

}  // namespace zt::tok
