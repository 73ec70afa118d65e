// tokenize.cpp: see tokenize.h.
#include "data/tokenize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/shard_format.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

struct Doc {
  std::string text;
  bool ends_document;  // false for a leading piece of a large text file
  int64_t index;       // document number, decides the split
};

// Splits a large text after a lone newline (non-space before it, non-space after it): the
// GPT-2 and tiktoken pre-tokenizers never join tokens across such a point, so pieces encode
// to exactly the tokens of the whole. A longer whitespace run is not a safe point: GPT-2's
// `\s+(?!\S)` splits "\n\nX" as "\n" "\n" "X" inside a text but keeps "\n\n" whole at its end.
size_t safe_cut(const std::string& s, size_t want) {
  auto space = [&](size_t i) { return std::isspace(static_cast<unsigned char>(s[i])) != 0; };
  for (size_t i = std::max<size_t>(want, 2); i < s.size(); ++i)
    if (s[i - 1] == '\n' && !space(i - 2) && !space(i)) return i;
  return s.size();
}

class Reader {
 public:
  // splittable: a long text may be encoded in pieces cut by safe_cut (Tokenizer::splits_at_newlines).
  Reader(std::vector<fs::path> files, std::string field, bool splittable)
      : files_(std::move(files)), field_(std::move(field)), splittable_(splittable) {}
  // Appends documents up to about `budget` bytes; false when the input is exhausted.
  bool next_batch(std::vector<Doc>& out, size_t budget, uint64_t* bytes) {
    size_t used = 0;
    while (used < budget) {
      if (!pending_.empty()) {
        size_t cut = splittable_ && pending_.size() > budget ? safe_cut(pending_, budget) : pending_.size();
        bool last = cut == pending_.size();
        out.push_back({pending_.substr(0, cut), last, doc_});
        used += cut;
        pending_.erase(0, cut);
        if (last) ++doc_;
        continue;
      }
      if (jsonl_.is_open()) {
        std::string t;
        bool blank = false;
        if (next_jsonl_text(jsonl_, jsonl_name_, field_, &line_no_, &t, &blank)) {
          if (blank) continue;
          *bytes += t.size();
          used += t.size();
          out.push_back({std::move(t), true, doc_++});
          continue;
        }
        jsonl_.close();
      }
      if (next_file_ >= files_.size()) return !out.empty();
      const fs::path& f = files_[next_file_++];
      if (is_jsonl_corpus_file(f)) {
        jsonl_.open(f);
        ZT_CHECK(jsonl_.is_open(), "cannot open ", f.string());
        jsonl_name_ = f.string();
        line_no_ = 0;
      } else {
        std::ifstream in(f, std::ios::binary);
        ZT_CHECK(in, "cannot open ", f.string());
        pending_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        *bytes += pending_.size();
        if (pending_.empty()) ++doc_;
      }
    }
    return true;
  }

 private:
  std::vector<fs::path> files_;
  std::string field_;
  bool splittable_;
  size_t next_file_ = 0;
  std::string pending_;
  std::ifstream jsonl_;
  std::string jsonl_name_;
  int64_t line_no_ = 0, doc_ = 0;
};

bool goes_to_validation(int64_t doc, double pct) {
  // A multiplicative hash spreads validation documents evenly through the corpus.
  uint64_t h = uint64_t(doc + 1) * 0x9E3779B97F4A7C15ull;
  return double((h >> 11) % 100000) < pct * 1000.0;
}

}  // namespace

bool next_jsonl_text(std::istream& in, const std::string& name, const std::string& field, int64_t* line_no,
                     std::string* text, bool* blank) {
  std::string line;
  if (!std::getline(in, line)) return false;
  ++*line_no;
  text->clear();
  *blank = line.find_first_not_of(" \t\r") == std::string::npos;
  if (*blank) return true;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat(name, ":", *line_no, ": not valid JSON"));
  }
  ZT_CHECK(j.is_object() && j.contains(field) && j[field].is_string(), name, ":", *line_no, ": no string field \"",
           field, "\"; pass --text_field");
  *text = j[field].get<std::string>();
  return true;
}

std::vector<fs::path> list_corpus_files(const std::vector<std::string>& inputs) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    fs::path p(in);
    ZT_CHECK(fs::exists(p), "input ", in, " does not exist");
    if (fs::is_directory(p)) {
      std::vector<fs::path> found;
      for (auto& e : fs::recursive_directory_iterator(p)) {
        std::string name = e.path().filename().string();
        if (!e.is_regular_file() || name.empty() || name[0] == '.') continue;
        auto ext = e.path().extension().string();
        if (ext.empty() || ext == ".txt" || ext == ".text" || ext == ".jsonl" || ext == ".json")
          found.push_back(e.path());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(p);
    }
  }
  ZT_CHECK(!files.empty(), "no input files found (text, .txt, .jsonl)");
  return files;
}

TokenizeStats tokenize_corpus(const Tokenizer& tok, const TokenizeConfig& cfg) {
  auto t0 = std::chrono::steady_clock::now();
  ZT_CHECK(!cfg.output_dir.empty(), "--output_dir is required");
  ZT_CHECK(cfg.validation_split_percentage >= 0 && cfg.validation_split_percentage < 100,
           "--validation_split_percentage must be in [0, 100)");
  fs::create_directories(cfg.output_dir);
  Reader reader(list_corpus_files(cfg.inputs), cfg.text_field, tok.splits_at_newlines());
  ShardWriter train(cfg.output_dir + "/train.bin", uint32_t(tok.vocab_size()), tok.eos_id());
  ShardWriter val(cfg.output_dir + "/validation.bin", uint32_t(tok.vocab_size()), tok.eos_id());
  TokenizeStats st;
  std::vector<int64_t> counts(size_t(tok.vocab_size()), 0);
  std::vector<Doc> batch;
  std::vector<std::vector<int32_t>> ids;
  while (true) {
    batch.clear();
    if (!reader.next_batch(batch, cfg.batch_bytes, &st.bytes)) break;
    ids.assign(batch.size(), {});
    // An exception must not leave the OpenMP loop (that terminates the process): the first one
    // (in input order) is rethrown after it, e.g. a tokenizer.json whose normalizer grows text past
    // its limit.
    std::vector<std::string> failed(batch.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < batch.size(); ++i) {
      try {
        ids[i] = tok.encode(batch[i].text, {cfg.split_special_tokens, false});
        if (batch[i].ends_document && tok.eos_id() >= 0) ids[i].push_back(tok.eos_id());
      } catch (const std::exception& e) {
        failed[i] = e.what()[0] ? e.what() : "encoding failed";
      }
    }
    for (const std::string& f : failed) ZT_CHECK(f.empty(), f);
    for (size_t i = 0; i < batch.size(); ++i) {
      bool v = goes_to_validation(batch[i].index, cfg.validation_split_percentage);
      (v ? val : train).append(ids[i].data(), ids[i].size());
      if (!v)
        for (int32_t id : ids[i]) ++counts[size_t(id)];
      if (batch[i].ends_document) ++st.documents;
    }
  }
  st.train_tokens = int64_t(train.count());
  for (int64_t c : counts)
    if (c > 0) {
      double p = double(c) / double(st.train_tokens);
      st.unigram_entropy -= p * std::log(p);
    }
  st.validation_tokens = int64_t(val.count());
  train.close();
  val.close();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace zt
