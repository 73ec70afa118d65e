// tokenizer_hf_steps.cpp: the tokenizer.json normalizer, pre-tokenizer, post-processor and
// decoder, read into pipeline steps (see tokenizer_hf.h).
#include "text/tokenizer_hf.h"

#include "text/tokenizer_bpe.h"

namespace zt::tok {
namespace {

using nlohmann::json;

// {"String": "..."} or {"Regex": "..."}: a literal or a compiled regex.
void read_pattern(const Reader& rd, const json& obj, const std::string& where, std::string& literal,
                  std::shared_ptr<const Regex>& regex) {
  const json& pattern = rd.field(obj, where, "pattern");
  if (pattern.is_object() && pattern.contains("String")) {
    literal = rd.string_field(pattern, where + ".pattern", "String");
  } else if (pattern.is_object() && pattern.contains("Regex")) {
    std::string re = rd.string_field(pattern, where + ".pattern", "Regex");
    try {
      regex = std::make_shared<const Regex>(re, RegexFlavor::onig);
    } catch (const Error& e) {
      rd.fail(where + ".pattern", e.what());
    }
  } else {
    rd.fail(where + ".pattern", str_cat("must be {\"String\": ...} or {\"Regex\": ...}, found ", rd.brief(pattern)));
  }
}

SplitBehavior read_behavior(const Reader& rd, const json& obj, const std::string& where, const char* fallback) {
  std::string b = rd.string_or(obj, where, "behavior", fallback);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  rd.fail(where + ".behavior", str_cat(quote(b),
                                       " is not a split behaviour (Removed, Isolated, MergedWithPrevious, "
                                       "MergedWithNext, Contiguous)"));
}

// Whitespace's \w+|[^\w\s]+ in the Rust regex crate: \w is Alphabetic, M, Nd, Pc, Join_Control.
constexpr const char* kWordClass =
    R"(\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200c}\x{200d}\x{24b6}-\x{24e9}\x{1f130}-\x{1f149}\x{1f150}-\x{1f169}\x{1f170}-\x{1f189})";

PreTokStep char_split(bool (*pred)(uint32_t), SplitBehavior b) {
  PreTokStep s{PreTokStep::Kind::split_chars};
  s.pred = pred;
  s.behavior = b;
  return s;
}

}  // namespace

int32_t checked_id(const Reader& rd, const json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (1 << 24))
    rd.fail(where, str_cat("has id ", rd.brief(v), "; ids must be integers in [0, 2^24)"));
  return v.get<int32_t>();
}

void parse_normalizer(const Reader& rd, const json& n, const std::string& where, PipelineParts& p) {
  if (n.is_null()) return;
  std::string type = rd.string_field(n, where, "type");
  using K = NormalizeStep::Kind;
  NormalizeStep st{K::form};
  if (type == "Sequence") {
    const json& list = rd.array_field(n, where, "normalizers");
    for (size_t i = 0; i < list.size(); ++i) parse_normalizer(rd, list[i], str_cat(where, ".normalizers[", i, "]"), p);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    st.form = type == "NFC"    ? NormalForm::nfc
              : type == "NFD"  ? NormalForm::nfd
              : type == "NFKC" ? NormalForm::nfkc
                               : NormalForm::nfkd;
  } else if (type == "Lowercase") {
    st.kind = K::lowercase;
  } else if (type == "Strip") {
    st.kind = K::strip;
    st.left = rd.bool_field(n, where, "strip_left", true);
    st.right = rd.bool_field(n, where, "strip_right", true);
  } else if (type == "StripAccents") {
    st.kind = K::strip_accents;
  } else if (type == "Replace") {
    st.kind = K::replace;
    read_pattern(rd, n, where, st.from, st.regex);
    st.to = rd.string_field(n, where, "content");
  } else if (type == "Prepend") {
    st.kind = K::prepend;
    st.to = rd.string_field(n, where, "prepend");
  } else if (type == "BertNormalizer") {
    st.kind = K::bert;
    st.clean_text = rd.bool_field(n, where, "clean_text", true);
    st.chinese_chars = rd.bool_field(n, where, "handle_chinese_chars", true);
    st.lowercase = rd.bool_field(n, where, "lowercase", true);
    st.strip_accents = rd.bool_field(n, where, "strip_accents", st.lowercase);
  } else if (type == "Precompiled") {
    // Absent or empty: nothing to map (a converter that found no charsmap in the .model).
    const std::string b64 = rd.string_or(n, where, "precompiled_charsmap", "");
    if (b64.empty()) return;
    std::string bytes;
    if (!base64_decode(b64, bytes)) rd.fail(where + ".precompiled_charsmap", "is not base64");
    st.kind = K::precompiled;
    try {
      st.charsmap = CharsMap::parse(bytes);
    } catch (const Error& e) {
      rd.fail(where + ".precompiled_charsmap", e.what());
    }
  } else {
    rd.unsupported(where, type,
                   "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, BertNormalizer, "
                   "Precompiled and Sequence of those");
  }
  p.normalizer.push_back(std::move(st));
}

void parse_pre_tokenizer(const Reader& rd, const json& n, const std::string& where, PipelineParts& p,
                         bool& byte_level) {
  if (n.is_null()) return;
  std::string type = rd.string_field(n, where, "type");
  using K = PreTokStep::Kind;
  if (type == "Sequence") {
    const json& list = rd.array_field(n, where, "pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(rd, list[i], str_cat(where, ".pretokenizers[", i, "]"), p, byte_level);
  } else if (type == "Split") {
    PreTokStep s{K::split_regex};
    read_pattern(rd, n, where, s.literal, s.regex);
    if (!s.regex) s.kind = K::split_literal;
    s.behavior = read_behavior(rd, n, where, "");
    s.invert = rd.bool_field(n, where, "invert", false);
    p.pre_tokenizer.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    byte_level = true;
    PreTokStep s{K::byte_level};
    s.add_prefix_space = rd.bool_field(n, where, "add_prefix_space", true);
    if (rd.bool_field(n, where, "use_regex", true))
      s.regex = std::make_shared<const Regex>(kGpt2Pattern, RegexFlavor::onig);
    p.pre_tokenizer.push_back(std::move(s));
  } else if (type == "Metaspace") {
    PreTokStep s{K::metaspace};
    s.replacement = rd.string_or(n, where, "replacement", "\u2581");
    std::string scheme = rd.string_or(n, where, "prepend_scheme", "always");
    if (scheme == "first")
      s.prepend = PreTokStep::Prepend::first;
    else if (scheme == "never")
      s.prepend = PreTokStep::Prepend::never;
    else if (scheme != "always")
      rd.fail(where + ".prepend_scheme", str_cat(quote(scheme), " is not always, first or never"));
    if (!rd.bool_field(n, where, "add_prefix_space", true)) s.prepend = PreTokStep::Prepend::never;
    s.split = rd.bool_field(n, where, "split", true);
    p.pre_tokenizer.push_back(std::move(s));
  } else if (type == "Digits") {
    bool single = rd.bool_field(n, where, "individual_digits", false);
    p.pre_tokenizer.push_back(char_split(is_numeric, single ? SplitBehavior::isolated : SplitBehavior::contiguous));
  } else if (type == "Punctuation") {
    p.pre_tokenizer.push_back(char_split(is_punctuation, read_behavior(rd, n, where, "Isolated")));
  } else if (type == "WhitespaceSplit") {
    p.pre_tokenizer.push_back(char_split(is_white_space, SplitBehavior::removed));
  } else if (type == "BertPreTokenizer") {
    p.pre_tokenizer.push_back(char_split(is_white_space, SplitBehavior::removed));
    p.pre_tokenizer.push_back(char_split(is_punctuation, SplitBehavior::isolated));
  } else if (type == "Whitespace") {
    PreTokStep s{K::split_regex};
    std::string w = kWordClass;
    s.regex = std::make_shared<const Regex>("[" + w + "]+|[^" + w + R"(\s]+)", RegexFlavor::onig);
    s.behavior = SplitBehavior::removed;
    s.invert = true;
    p.pre_tokenizer.push_back(std::move(s));
  } else {
    rd.unsupported(where, type,
                   "Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer "
                   "and Sequence of those");
  }
}

void parse_decoder(const Reader& rd, const json& n, const std::string& where, PipelineParts& p) {
  if (n.is_null()) return;
  p.has_decoder = true;
  std::string type = rd.string_field(n, where, "type");
  using K = DecodeStep::Kind;
  DecodeStep d{K::fuse};
  if (type == "Sequence") {
    const json& list = rd.array_field(n, where, "decoders");
    for (size_t i = 0; i < list.size(); ++i) parse_decoder(rd, list[i], str_cat(where, ".decoders[", i, "]"), p);
    return;
  } else if (type == "ByteLevel") {
    d.kind = K::byte_level;
  } else if (type == "ByteFallback") {
    d.kind = K::byte_fallback;
  } else if (type == "Fuse") {
    d.kind = K::fuse;
  } else if (type == "Strip") {
    d.kind = K::strip;
    d.from = rd.string_field(n, where, "content");
    d.start = n.value("start", size_t(0));
    d.stop = n.value("stop", size_t(0));
    // An empty content would strip nothing start times: with a huge start, a loop without end.
    if (d.from.empty()) d.start = d.stop = 0;
  } else if (type == "Replace") {
    d.kind = K::replace;
    std::shared_ptr<const Regex> re;
    read_pattern(rd, n, where, d.from, re);
    if (re) rd.fail(where + ".pattern", "a Regex pattern in a Replace decoder is not supported (only String)");
    d.to = rd.string_field(n, where, "content");
  } else if (type == "Metaspace") {
    d.kind = K::metaspace;
    d.from = rd.string_or(n, where, "replacement", "\u2581");
    d.prepend = rd.string_or(n, where, "prepend_scheme", "always") != "never" &&
                rd.bool_field(n, where, "add_prefix_space", true);
  } else if (type == "WordPiece") {
    d.kind = K::wordpiece;
    d.from = rd.string_or(n, where, "prefix", "##");
    d.cleanup = rd.bool_field(n, where, "cleanup", true);
  } else {
    rd.unsupported(where, type,
                   "ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, WordPiece and Sequence of those");
  }
  p.decoder.push_back(std::move(d));
}

void parse_post_processor(const Reader& rd, const json& n, const std::string& where, PipelineParts& p) {
  if (n.is_null()) return;
  std::string type = rd.string_field(n, where, "type");
  auto id_of = [&](const std::string& text, const std::string& at) {
    for (const AddedToken& a : p.added)
      if (a.content == text) return a.id;
    int32_t id = p.model->token_to_id(text);
    if (id < 0)
      rd.fail(at, str_cat("names the token ", quote(text), ", which is in neither the vocab nor added_tokens"));
    return id;
  };
  // [text, id] pairs of BertProcessing / RobertaProcessing.
  auto pair_id = [&](const char* key) {
    const json& v = rd.field(n, where, key);
    if (!v.is_array() || v.size() != 2) rd.fail(str_cat(where, ".", key), "must be [token, id]");
    return checked_id(rd, v[1], str_cat(where, ".", key));
  };
  if (type == "Sequence") {
    const json& list = rd.array_field(n, where, "processors");
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(rd, list[i], str_cat(where, ".processors[", i, "]"), p);
  } else if (type == "ByteLevel") {
    // Adjusts offsets only; ztrain does not report offsets.
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    p.post.before = {pair_id("cls")};
    p.post.after = {pair_id("sep")};
  } else if (type == "TemplateProcessing") {
    const json& single = rd.array_field(n, where, "single");
    const json& specials = n.contains("special_tokens") ? n["special_tokens"] : json::object();
    bool seen_sequence = false;
    p.post = {};
    for (size_t i = 0; i < single.size(); ++i) {
      std::string at = str_cat(where, ".single[", i, "]");
      const json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.is_object() && item.contains("SpecialToken")) {
        std::string name = rd.string_field(item["SpecialToken"], at + ".SpecialToken", "id");
        std::vector<int32_t> ids;
        if (specials.contains(name) && specials[name].contains("ids")) {
          for (const json& v : specials[name]["ids"]) ids.push_back(checked_id(rd, v, at));
        } else {
          ids.push_back(id_of(name, at));
        }
        auto& to = seen_sequence ? p.post.after : p.post.before;
        to.insert(to.end(), ids.begin(), ids.end());
      } else {
        rd.fail(at, str_cat("must be {\"Sequence\": ...} or {\"SpecialToken\": ...}, found ", rd.brief(item)));
      }
    }
  } else {
    rd.unsupported(where, type,
                   "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel and Sequence of those");
  }
}

}  // namespace zt::tok
