// tokenizer_hf.cpp: loads a Hugging Face tokenizer.json whose model is BPE into a BpeTokenizer.
// Understands the pieces Llama-2 (Prepend/Replace normalizer, no pre-tokenizer, byte fallback)
// and Llama-3 / GPT-2 style files (Split regex + ByteLevel, ignore_merges) are made of, and
// rejects everything else by name, because a silently different tokenization would spoil a
// training run. Not here: WordPiece/Unigram/WordLevel models, Unicode normalizers, arbitrary
// regexes (only the GPT-2 and Llama-3 patterns have scanners), post-processors.
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer_bpe.h"

namespace zt::tok {
namespace {

using nlohmann::json;

constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Reads fields with errors that name the file and the JSON path.
struct Reader {
  std::string file;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(str_cat(file, ": ", where, " ", what));
  }
  const json& field(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(where, str_cat("has no \"", key, "\" field"));
    return obj.at(key);
  }
  std::string string_field(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (!v.is_string()) fail(str_cat(where, ".", key), str_cat("must be a string, found ", v.type_name()));
    return v.get<std::string>();
  }
  bool bool_field(const json& obj, const char* key, bool fallback) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    if (!obj.at(key).is_boolean()) fail(key, "must be true or false");
    return obj.at(key).get<bool>();
  }
  [[noreturn]] void unsupported(const std::string& where, const std::string& type, const char* supported) const {
    fail(where, str_cat("type \"", type, "\" is not supported (ztrain reads ", supported, ")"));
  }
};

void parse_normalizer(const Reader& rd, const json& n, const std::string& where, BpeOptions& opt) {
  if (n.is_null()) return;
  std::string type = rd.string_field(n, where, "type");
  if (type == "Sequence") {
    const json& list = rd.field(n, where, "normalizers");
    if (!list.is_array()) rd.fail(where + ".normalizers", "must be an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(rd, list[i], str_cat(where, ".normalizers[", i, "]"), opt);
  } else if (type == "Prepend") {
    opt.normalizer.push_back({NormalizeStep::Kind::prepend, rd.string_field(n, where, "prepend"), ""});
  } else if (type == "Replace") {
    const json& pattern = rd.field(n, where, "pattern");
    if (!pattern.contains("String"))
      rd.fail(where + ".pattern", "must be {\"String\": ...}; regex replacements are not supported");
    std::string from = rd.string_field(pattern, where + ".pattern", "String");
    if (from.empty()) rd.fail(where + ".pattern.String", "is empty");
    opt.normalizer.push_back({NormalizeStep::Kind::replace, from, rd.string_field(n, where, "content")});
  } else {
    rd.unsupported(where, type, "Prepend, Replace with a String pattern, and Sequence of those");
  }
}

// One step of the pre-tokenizer; at most one of them may cut the text.
void parse_pre_tokenizer(const Reader& rd, const json& p, const std::string& where, BpeOptions& opt, bool& cut) {
  if (p.is_null()) return;
  std::string type = rd.string_field(p, where, "type");
  auto set_cut = [&](PreSplit kind) {
    if (cut) rd.fail(where, "splits the text a second time; only one splitting step is supported");
    cut = true;
    opt.pre_split = kind;
  };
  if (type == "Sequence") {
    const json& list = rd.field(p, where, "pretokenizers");
    if (!list.is_array()) rd.fail(where + ".pretokenizers", "must be an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(rd, list[i], str_cat(where, ".pretokenizers[", i, "]"), opt, cut);
  } else if (type == "ByteLevel") {
    opt.byte_level = true;
    opt.add_prefix_space = rd.bool_field(p, "add_prefix_space", false);
    if (opt.add_prefix_space && cut) rd.fail(where, "add_prefix_space after a Split is not supported");
    if (rd.bool_field(p, "use_regex", true)) set_cut(PreSplit::gpt2);
  } else if (type == "Split") {
    const json& pattern = rd.field(p, where, "pattern");
    std::string regex = pattern.contains("Regex") ? rd.string_field(pattern, where + ".pattern", "Regex") : "";
    std::string behavior = p.value("behavior", "");
    if (rd.bool_field(p, "invert", false) || behavior != "Isolated")
      rd.fail(where, str_cat("Split with behavior \"", behavior,
                             "\" / invert is not supported (only Isolated, invert false)"));
    if (regex == kGpt2Regex)
      set_cut(PreSplit::gpt2);
    else if (regex == kLlama3Regex)
      set_cut(PreSplit::llama3);
    else
      rd.fail(where + ".pattern",
              str_cat(json(regex).dump(), " is not a supported regex (only the GPT-2 and Llama-3 patterns)"));
  } else {
    rd.unsupported(where, type, "ByteLevel, Split with the GPT-2 or Llama-3 regex, and Sequence of those");
  }
}

// What each token decodes to, for the decoder steps ztrain supports.
struct DecodeRules {
  bool byte_level = false, byte_fallback = false;
  std::vector<std::pair<std::string, std::string>> replace;
};

void parse_decoder(const Reader& rd, const json& d, const std::string& where, DecodeRules& rules, BpeOptions& opt) {
  if (d.is_null()) return;
  std::string type = rd.string_field(d, where, "type");
  if (type == "Sequence") {
    const json& list = rd.field(d, where, "decoders");
    if (!list.is_array()) rd.fail(where + ".decoders", "must be an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(rd, list[i], str_cat(where, ".decoders[", i, "]"), rules, opt);
  } else if (type == "ByteLevel") {
    rules.byte_level = true;
  } else if (type == "ByteFallback") {
    rules.byte_fallback = true;
  } else if (type == "Fuse") {
    // Joining is what decode does anyway.
  } else if (type == "Replace") {
    const json& pattern = rd.field(d, where, "pattern");
    if (!pattern.contains("String")) rd.fail(where + ".pattern", "must be {\"String\": ...}");
    rules.replace.emplace_back(rd.string_field(pattern, where + ".pattern", "String"),
                               rd.string_field(d, where, "content"));
  } else if (type == "Strip") {
    // Applied after Fuse in every file seen: strips the start of the whole text.
    if (rd.string_field(d, where, "content") != " " || d.value("stop", 0) != 0)
      rd.fail(where, "Strip is supported only for leading spaces (content \" \", stop 0)");
    opt.strip_leading_spaces = d.value("start", 0);
  } else if (type == "Metaspace") {
    rules.replace.emplace_back(d.value("replacement", "\u2581"), " ");
    if (d.value("prepend_scheme", "always") != "never" && d.value("add_prefix_space", true))
      opt.strip_leading_spaces = 1;
  } else {
    rd.unsupported(where, type, "ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace and Sequence of those");
  }
}

std::string decoded_text(const std::string& token, const DecodeRules& rules) {
  std::string out;
  if (rules.byte_level && byte_level_decode(token, out)) return out;
  if (rules.byte_fallback && token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
    int hi = std::isxdigit(static_cast<unsigned char>(token[3])),
        lo = std::isxdigit(static_cast<unsigned char>(token[4]));
    if (hi && lo) return std::string(1, char(std::stoi(token.substr(3, 2), nullptr, 16)));
  }
  out = token;
  for (const auto& [from, to] : rules.replace) {
    for (size_t pos = 0; !from.empty() && (pos = out.find(from, pos)) != std::string::npos; pos += to.size())
      out.replace(pos, from.size(), to);
  }
  return out;
}

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
  rd.fail(where, str_cat("must be \"left right\" or [\"left\", \"right\"], found ", m.dump()));
}

// bos/eos: tokenizer_config.json beside the file when it names them (null means none), else
// the customary token texts.
void resolve_bos_eos(const std::string& file, const std::unordered_map<std::string, int32_t>& vocab,
                     const std::vector<AddedToken>& added, BpeOptions& opt) {
  auto id_of = [&](const std::string& text) -> int32_t {
    for (const AddedToken& a : added)
      if (a.content == text) return a.id;
    auto it = vocab.find(text);
    return it == vocab.end() ? -1 : it->second;
  };
  auto first_of = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names)
      if (int32_t id = id_of(n); id >= 0) return id;
    return -1;
  };
  opt.bos_id = first_of({"<s>", "<|begin_of_text|>", "<bos>"});
  opt.eos_id = first_of({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
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
  from_config("bos_token", opt.bos_id);
  from_config("eos_token", opt.eos_id);
}

int32_t checked_id(const Reader& rd, const json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (1 << 24))
    rd.fail(where, str_cat("has id ", v.dump(), "; ids must be integers in [0, 2^24)"));
  return v.get<int32_t>();
}

// The model's type and fields, and the options the pipeline around it implies.
BpeOptions parse_options(const Reader& rd, const json& root, DecodeRules& rules) {
  if (!root.is_object()) rd.fail("top level", str_cat("must be a JSON object, found ", root.type_name()));
  const json& mj = rd.field(root, "top level", "model");
  std::string type = mj.contains("type") ? rd.string_field(mj, "model", "type") : mj.contains("merges") ? "BPE" : "";
  if (type != "BPE")
    rd.fail("model.type",
            type.empty()
                ? "is missing"
                : str_cat("\"", type,
                          "\" is not supported; ztrain reads BPE models only (not WordPiece, Unigram or WordLevel)"));
  if (!rd.field(mj, "model", "vocab").is_object() || mj["vocab"].empty())
    rd.fail("model.vocab", "must be a non-empty object of token -> id");
  if (!rd.field(mj, "model", "merges").is_array())
    rd.fail("model.merges", str_cat("must be an array, found ", mj["merges"].type_name()));
  if (mj.contains("dropout") && !mj["dropout"].is_null() && mj["dropout"] != 0)
    rd.fail("model.dropout", "must be null (BPE dropout is not supported)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (mj.contains(k) && !mj[k].is_null() && mj[k] != "") rd.fail(str_cat("model.", k), "is not supported");

  BpeOptions opt;
  opt.name = "hf-bpe";
  opt.order = MergeOrder::leftmost_first;
  opt.byte_fallback = rd.bool_field(mj, "byte_fallback", false);
  opt.ignore_merges = rd.bool_field(mj, "ignore_merges", false);
  auto part = [&](const char* key) { return root.contains(key) ? root[key] : json(); };
  parse_normalizer(rd, part("normalizer"), "normalizer", opt);
  bool cut = false;
  parse_pre_tokenizer(rd, part("pre_tokenizer"), "pre_tokenizer", opt, cut);
  parse_decoder(rd, part("decoder"), "decoder", rules, opt);
  return opt;
}

// Everything read from the file's token lists.
struct Tables {
  BpeModel model;
  std::vector<std::string> id_text;
  std::vector<bool> has_id;
  std::unordered_map<std::string, int32_t> vocab;  // as written in the file
  std::vector<AddedToken> added;

  void set_text(int32_t id, std::string text) {
    if (size_t(id) >= id_text.size()) id_text.resize(size_t(id) + 1), has_id.resize(size_t(id) + 1);
    id_text[size_t(id)] = std::move(text);
    has_id[size_t(id)] = true;
  }
};

void read_vocab_and_merges(const Reader& rd, const json& mj, const BpeOptions& opt, const DecodeRules& rules,
                           Tables& t) {
  const json& vocab_j = mj["vocab"];
  t.vocab.reserve(vocab_j.size());
  std::string raw;
  for (auto& [text, value] : vocab_j.items()) {
    int32_t id = checked_id(rd, value, str_cat("model.vocab[", json(text).dump(), "]"));
    if (!opt.byte_level || !byte_level_decode(text, raw)) raw = text;
    t.model.add_token(raw, id);
    t.set_text(id, decoded_text(text, rules));
    t.vocab.emplace(text, id);
  }
  const json& merges_j = mj["merges"];
  for (size_t i = 0; i < merges_j.size(); ++i) {
    auto [left, right] = merge_parts(rd, merges_j[i], i);
    auto id_of = [&](const std::string& s) {
      auto it = t.vocab.find(s);
      if (it == t.vocab.end())
        rd.fail(str_cat("model.merges[", i, "]"), str_cat("uses ", json(s).dump(), ", which is not in model.vocab"));
      return it->second;
    };
    int32_t l = id_of(left), r = id_of(right);  // in this order, so the message names the first missing
    t.model.add_merge(l, r, id_of(left + right));
  }
}

void read_added_tokens(const Reader& rd, const json& root, Tables& t) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  const json& list = root["added_tokens"];
  if (!list.is_array()) rd.fail("added_tokens", "must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = str_cat("added_tokens[", i, "]");
    AddedToken a{rd.string_field(list[i], where, "content"), checked_id(rd, rd.field(list[i], where, "id"), where)};
    a.lstrip = rd.bool_field(list[i], "lstrip", false);
    a.rstrip = rd.bool_field(list[i], "rstrip", false);
    t.set_text(a.id, a.content);  // added tokens decode to their text, whatever the decoder
    t.added.push_back(std::move(a));
  }
}

std::unique_ptr<Tokenizer> load_bpe_json(const Reader& rd, const json& root) {
  DecodeRules rules;
  BpeOptions opt = parse_options(rd, root, rules);
  const json& mj = root["model"];
  Tables t;
  read_vocab_and_merges(rd, mj, opt, rules, t);
  read_added_tokens(rd, root, t);
  if (mj.contains("unk_token") && mj["unk_token"].is_string()) {
    auto it = t.vocab.find(mj["unk_token"].get<std::string>());
    opt.unk_id = it == t.vocab.end() ? -1 : it->second;
  }
  resolve_bos_eos(rd.file, t.vocab, t.added, opt);
  return std::make_unique<BpeTokenizer>(std::move(t.model), std::move(opt), std::move(t.id_text), std::move(t.has_id),
                                        std::move(t.added));
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::string& file) {
  Reader rd{file};
  json root = read_json_file(file);
  try {
    return load_bpe_json(rd, root);
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type somewhere a default was read.
    throw Error(str_cat(file, ": unexpected structure for a tokenizer.json (", e.what(), ")"));
  }
}

}  // namespace zt::tok
