// tokenizer_spm.cpp: SentencePiece's own tokenizer.model (Llama-2-era, Mistral, T5's spiece.model)
// through Debian's libsentencepiece, so the ids are SentencePiece's by construction: its
// normalizer, its BPE or Unigram, its user-defined symbols (always matched, as Hugging Face does
// with non-special added tokens) and byte fallback. What ztrain adds around it, as transformers'
// SentencePiece tokenizers do: control and unknown pieces (<s>, </s>, <unk>, <pad>) are the
// special tokens, matched in the text only when split_special_tokens is false (each text between
// them is encoded on its own, as transformers' legacy Llama tokenizer does); add_special_tokens
// adds bos / eos as tokenizer_config.json's add_bos_token (default true) and add_eos_token
// (default false) say; decode writes special pieces as their text (SentencePiece drops them).
#include <filesystem>
#include <string>

#include "core/error.h"
#include "text/tokenizer_bpe.h"

#ifndef ZT_HAS_SENTENCEPIECE
// Built without libsentencepiece (CMake did not find it): the format is known, the reader is not.
namespace zt::tok {
std::unique_ptr<Tokenizer> load_spm_model(const std::string& file) {
  throw Error(str_cat(file, ": a SentencePiece tokenizer.model, but this ztrain was built without libsentencepiece "
                            "(apt-get install libsentencepiece-dev, then rebuild); a tokenizer.json works"));
}
}  // namespace zt::tok
#else

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <vector>

#include "text/tokenizer_pipeline.h"

namespace zt::tok {
namespace {

// Real models are under 10 MB (Llama 2: 0.5 MB, Gemma's 256k pieces: 4 MB); the file is read
// into memory before libsentencepiece parses it.
constexpr uintmax_t kMaxModelBytes = uintmax_t(1) << 30;

// libsentencepiece's message for an error line: it can quote a piece of the file (newlines, any
// length), so it is escaped and cut to keep the error one short line.
std::string status_text(const sentencepiece::util::Status& status) {
  std::string s = status.ToString();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return quote(s);
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const std::string& file) : file_(file) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(file, ec);
    ZT_CHECK(!ec, file, ": cannot read (", ec.message(), ")");
    ZT_CHECK(size <= kMaxModelBytes, file, ": ", size, " bytes; a SentencePiece model over ", kMaxModelBytes,
             " bytes is refused (real ones are a few MB)");
    const std::string bytes = read_text_file(file);
    sentencepiece::util::Status status;
    try {
      status = sp_.LoadFromSerializedProto(bytes);
    } catch (const std::exception& e) {
      // Its trie builder (darts-clone) throws on some malformed models (fuzz_tokenizer_spm).
      status = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, e.what());
    }
    ZT_CHECK(status.ok(), file, ": not a SentencePiece model (libsentencepiece: ", status_text(status),
             "); Llama 3's original tokenizer.model is tiktoken's format, not SentencePiece's: use its tokenizer.json");
    const int n = sp_.GetPieceSize();
    ZT_CHECK(n > 0, file, ": a SentencePiece model with no pieces");
    for (int id = 0; id < n; ++id) {
      if (!sp_.IsControl(id) && !sp_.IsUnknown(id)) continue;
      const std::string& piece = sp_.IdToPiece(id);
      special_.insert(piece, uint32_t(id));
      any_special_ = any_special_ || !piece.empty();
    }
    bos_ = sp_.bos_id();
    eos_ = sp_.eos_id();
    read_config();
  }

  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text, EncodeOptions opt) const override {
    std::vector<int32_t> out;
    if (opt.add_special_tokens && add_bos_ && bos_ >= 0) out.push_back(bos_);
    if (opt.split_special_tokens || !any_special_) {
      encode_plain(text, out);
    } else {
      size_t from = 0;
      for (size_t i = 0; i < text.size();) {
        uint32_t id = 0;
        size_t len = 0;
        if (!special_.longest_at(text, i, &id, &len)) {
          ++i;
          continue;
        }
        encode_plain(text.substr(from, i - from), out);
        out.push_back(int32_t(id));
        from = i = i + len;
      }
      encode_plain(text.substr(from), out);
    }
    if (opt.add_special_tokens && add_eos_ && eos_ >= 0) out.push_back(eos_);
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out, part;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      const auto status = sp_.Decode(run, &part);
      ZT_CHECK(status.ok(), file_, ": decode failed (libsentencepiece: ", status_text(status), ")");
      out += part;
      run.clear();
    };
    for (int32_t id : ids) {
      ZT_CHECK(id >= 0 && id < sp_.GetPieceSize(), "decode: token id ", id, " is not in the sentencepiece vocabulary (",
               sp_.GetPieceSize(), " ids); the ids were made by a different tokenizer");
      if (sp_.IsControl(id) || sp_.IsUnknown(id)) {
        flush();
        out += sp_.IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  int vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t eos_id() const override { return eos_; }
  int32_t bos_id() const override { return bos_; }
  std::string name() const override { return "sentencepiece"; }
  // SentencePiece's normalizer adds the dummy "▁" prefix to every text it is given.
  bool splits_at_newlines() const override { return false; }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    ZT_CHECK(status.ok(), file_, ": encode failed (libsentencepiece: ", status_text(status), ")");
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // tokenizer_config.json beside the model, when there is one: bos / eos by text (null: none), and
  // whether add_special_tokens adds them (LlamaTokenizer's add_bos_token / add_eos_token).
  void read_config() {
    const auto cfg_path = std::filesystem::path(file_).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(cfg_path, ec)) return;
    const nlohmann::json cfg = read_json_file(cfg_path.string());
    if (!cfg.is_object()) return;
    auto token = [&](const char* key, int32_t& id) {
      if (!cfg.contains(key)) return;
      const nlohmann::json& v = cfg[key];
      const nlohmann::json* text = v.is_string()                            ? &v
                                   : v.is_object() && v.contains("content") ? &v["content"]
                                                                            : nullptr;
      id = text && text->is_string() ? sp_.PieceToId(text->get<std::string>()) : -1;
      if (id >= 0 && text && sp_.IdToPiece(id) != text->get<std::string>()) id = -1;  // PieceToId gives unk
    };
    token("bos_token", bos_);
    token("eos_token", eos_);
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) add_bos_ = cfg["add_bos_token"];
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) add_eos_ = cfg["add_eos_token"];
  }

  std::string file_;
  sentencepiece::SentencePieceProcessor sp_;
  AddedTrie special_;  // control and unknown pieces' texts -> ids
  bool any_special_ = false;
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_ = true, add_eos_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> load_spm_model(const std::string& file) { return std::make_unique<SpmTokenizer>(file); }

}  // namespace zt::tok
#endif  // ZT_HAS_SENTENCEPIECE
