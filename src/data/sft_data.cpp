// sft_data.cpp: see sft_data.h.
#include "data/sft_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/content_hash.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;

namespace {

// Cache file, format 2 (docs/data.md#the-tokenized-cache): a 64-byte header
//   magic "ZTSFTCA2", u64 tokens, u64 examples, u64 key (what produced it: cache_key),
//   u64 content checksum (XXH3 of everything after the header), u32 id bound (the tokenizer's
//   vocab_size: every id is below it), u32 zero, u64 zero, u64 XXH3 of header bytes 0..55
// then i32 tokens, u8 trained flags, i64 example offsets. Nothing in it is trusted: the header's
// own checksum, the key, the content checksum and the ids' range are all checked on every load,
// and a cache that fails any of them is rebuilt. (Format 1, "ZTSFTCA1", had no checksum.)
constexpr char kMagic[8] = {'Z', 'T', 'S', 'F', 'T', 'C', 'A', '2'};
constexpr size_t kHeader = 64;
constexpr int kFormatVersion = 2;
constexpr int32_t kIgnore = -100;  // kIgnore, HF's -100 (data/ does not include kernels/)

struct CacheHeader {
  uint64_t tokens = 0, examples = 0, key = 0, checksum = 0;
  uint32_t id_bound = 0;
};

void header_encode(const CacheHeader& h, char* b) {
  std::memset(b, 0, kHeader);
  std::memcpy(b, kMagic, 8);
  std::memcpy(b + 8, &h.tokens, 8);
  std::memcpy(b + 16, &h.examples, 8);
  std::memcpy(b + 24, &h.key, 8);
  std::memcpy(b + 32, &h.checksum, 8);
  std::memcpy(b + 40, &h.id_bound, 4);
  const uint64_t self = content_hash(b, 56);
  std::memcpy(b + 56, &self, 8);
}

// Hash of a whole file, chained over 8 MiB chunks; *ok false when it cannot be read.
uint64_t hash_file(const std::string& path, uint64_t seed, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  *ok = bool(f);
  std::vector<char> buf(8 << 20);
  uint64_t h = seed;
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    h = hash64(buf.data(), size_t(n), h);
  }
  return h;
}

// The key of everything that determines the cache's contents: the format, the JSONL bytes, the
// tokenizer (its files' bytes, kind and vocabulary size), the chat template and its special tokens,
// the loss options. (The sequence length is not among them: rows are cut from whole examples.)
uint64_t cache_key(const SftSource& src, const Tokenizer& tok, const ChatTemplateConfig& tpl, const SftOptions& opt) {
  bool ok = false;
  uint64_t h = hash_file(src.jsonl, 0x5346540000ull + kFormatVersion, &ok);
  ZT_CHECK(ok, "cannot read ", src.flag, " ", src.jsonl, ": ", std::strerror(errno));
  std::error_code ec;
  std::vector<std::string> tok_files;
  if (fs::is_directory(src.tokenizer_path, ec)) {
    for (const char* f : {"tokenizer.json", "encoder.json", "vocab.bpe", "tokenizer.model", "spiece.model",
                          "sentencepiece.bpe.model", "tokenizer_config.json"})
      if (fs::exists(fs::path(src.tokenizer_path) / f, ec))
        tok_files.push_back((fs::path(src.tokenizer_path) / f).string());
  } else {
    tok_files.push_back(src.tokenizer_path);
  }
  for (const std::string& f : tok_files) h = hash_file(f, h, &ok);
  const std::string meta = str_cat(tpl.source, '\0', tpl.has_bos, tpl.bos_token, '\0', tpl.has_eos, tpl.eos_token, '\0',
                                   opt.completion_only_loss, opt.assistant_only_loss, '\0', tok.name(), '\0',
                                   tok.vocab_size());
  return hash64(meta.data(), meta.size(), h);
}

// Reads and checks a cache file. Returns "" when out holds it, else why it cannot be used
// (for the rebuild note); "absent" when there is no file.
std::string load_cache(const std::string& path, uint64_t key, uint32_t id_bound, SftTokens* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "absent";
  char head[kHeader];
  if (!f.read(head, kHeader) || std::memcmp(head, kMagic, 6) != 0) return "is not a ztrain SFT cache";
  if (std::memcmp(head, kMagic, 8) != 0) return "has an older format";
  char want[kHeader];
  CacheHeader h;
  std::memcpy(&h.tokens, head + 8, 8);
  std::memcpy(&h.examples, head + 16, 8);
  std::memcpy(&h.key, head + 24, 8);
  std::memcpy(&h.checksum, head + 32, 8);
  std::memcpy(&h.id_bound, head + 40, 4);
  header_encode(h, want);
  if (std::memcmp(head, want, kHeader) != 0) return "has a damaged header";
  if (h.key != key) return "was made from other inputs (its key differs)";
  if (h.id_bound != id_bound) return "was made for another vocabulary";
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  const uint64_t n_tok = h.tokens, n_ex = h.examples;
  if (ec || n_tok > size || n_ex > size || kHeader + n_tok * 5 + (n_ex + 1) * 8 != size) return "has the wrong size";
  out->tokens.resize(n_tok);
  out->trained.resize(n_tok);
  out->offsets.resize(n_ex + 1);
  f.read(reinterpret_cast<char*>(out->tokens.data()), std::streamsize(n_tok * 4));
  f.read(reinterpret_cast<char*>(out->trained.data()), std::streamsize(n_tok));
  f.read(reinterpret_cast<char*>(out->offsets.data()), std::streamsize((n_ex + 1) * 8));
  if (!f) return "cannot be read";
  // Checked in memory, after the read: what is verified is what is used.
  ContentHashStream sum;
  sum.update(out->tokens.data(), n_tok * 4);
  sum.update(out->trained.data(), n_tok);
  sum.update(out->offsets.data(), (n_ex + 1) * 8);
  if (sum.value() != h.checksum) return "fails its checksum (damaged or modified)";
  // The checksum is no signature (anyone who can write the file can recompute it): the structure
  // and every id are checked too, so a crafted cache cannot reach the kernels with a bad id.
  if (out->offsets.front() != 0 || uint64_t(out->offsets.back()) != n_tok) return "has bad example offsets";
  for (size_t e = 0; e + 1 < out->offsets.size(); ++e)
    if (out->offsets[e + 1] < out->offsets[e]) return "has bad example offsets";
  bool ok = true;
#pragma omp parallel for simd reduction(&& : ok)
  for (int64_t i = 0; i < int64_t(n_tok); ++i)
    ok = ok && out->tokens[size_t(i)] >= 0 && uint32_t(out->tokens[size_t(i)]) < id_bound && out->trained[size_t(i)] <= 1;
  if (!ok) return "holds an id outside the vocabulary";
  return "";
}

// The temporary cache file of one build: removed unless committed (renamed into place).
struct TempFile {
  std::string path;
  int fd = -1;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

struct Encoded {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  std::string error;
};

Encoded encode_line(const std::string& line, const Tokenizer& tok, const ChatFormatter& fmt) {
  Encoded e;
  try {
    const nlohmann::ordered_json rec = nlohmann::ordered_json::parse(line);
    const SftText text = fmt.format(rec);
    for (const auto& p : text.pieces) {
      const std::vector<int32_t> ids = tok.encode_with_special(p.text);
      e.ids.insert(e.ids.end(), ids.begin(), ids.end());
      e.trained.insert(e.trained.end(), ids.size(), uint8_t(p.trained));
    }
  } catch (const nlohmann::json::parse_error& x) {
    e.error = str_cat("not valid JSON (", x.what(), ")");
  } catch (const nlohmann::json::exception& x) {
    e.error = str_cat("unexpected JSON value (", x.what(), ")");
  } catch (const Error& x) {
    e.error = x.what();
  } catch (const std::exception& x) {  // nothing may leave the OpenMP loop that calls this
    e.error = str_cat("cannot be processed (", x.what(), ")");
  } catch (...) {
    e.error = "cannot be processed";
  }
  return e;
}

}  // namespace

std::string sft_default_cache_dir() {
  if (const char* d = std::getenv("ZT_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return str_cat(d, "/ztrain");
  if (const char* d = std::getenv("HOME"); d && *d) return str_cat(d, "/.cache/ztrain");
  return ".ztrain_cache";
}

namespace {

// Tokenizes the JSONL into path (through a temporary file and a rename). *out gets the lines,
// trained flags and offsets (the tokens go to the file, not to memory).
void build_cache(const SftSource& src, const Tokenizer& tok, const ChatFormatter& fmt, const std::string& path,
                 uint64_t key, SftTokens* out) {
  std::ifstream in(src.jsonl, std::ios::binary);
  ZT_CHECK(in, "cannot read ", src.flag, " ", src.jsonl, ": ", std::strerror(errno));
  TempFile tmp;
  tmp.path = str_cat(path, ".tmp.", ::getpid());
  tmp.fd = open_new_file(tmp.path);  // never through a link planted in a shared cache folder
  ZT_CHECK(tmp.fd >= 0, "cannot create ", tmp.path, ": ", std::strerror(errno), "; pass a writable --cache_dir");
  const char zeros[kHeader] = {};
  write_all(tmp.fd, zeros, kHeader, tmp.path);
  ContentHashStream sum;  // over the bytes after the header, in file order
  out->offsets.push_back(0);
  int64_t line_no = 0;
  std::vector<std::string> lines;
  std::vector<int64_t> numbers;
  const size_t kBatch = 2048;
  for (bool more = true; more;) {
    lines.clear();
    numbers.clear();
    std::string line;
    while (lines.size() < kBatch && (more = bool(std::getline(in, line)))) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are allowed
      lines.push_back(std::move(line));
      numbers.push_back(line_no);
    }
    ZT_CHECK(!in.bad(), "cannot read ", src.flag, " ", src.jsonl, ": ", std::strerror(errno));
    std::vector<Encoded> enc(lines.size());
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t k = 0; k < int64_t(lines.size()); ++k) enc[size_t(k)] = encode_line(lines[size_t(k)], tok, fmt);
    for (size_t k = 0; k < enc.size(); ++k) {
      if (!enc[k].error.empty())
        throw Error(str_cat(src.flag, " ", src.jsonl, " line ", numbers[k], ": ", enc[k].error));
      for (int32_t id : enc[k].ids)
        ZT_CHECK(id >= 0 && id < tok.vocab_size(), src.flag, " ", src.jsonl, " line ", numbers[k],
                 ": the tokenizer produced id ", id, ", outside its vocabulary of ", tok.vocab_size());
      write_all(tmp.fd, enc[k].ids.data(), enc[k].ids.size() * 4, tmp.path);
      sum.update(enc[k].ids.data(), enc[k].ids.size() * 4);
      out->trained.insert(out->trained.end(), enc[k].trained.begin(), enc[k].trained.end());
      out->offsets.push_back(out->offsets.back() + int64_t(enc[k].ids.size()));
    }
  }
  out->lines = line_no;
  ZT_CHECK(out->examples() > 0, src.flag, " ", src.jsonl, " has no records; give a JSONL file with one JSON object per line");
  write_all(tmp.fd, out->trained.data(), out->trained.size(), tmp.path);
  write_all(tmp.fd, out->offsets.data(), out->offsets.size() * 8, tmp.path);
  sum.update(out->trained.data(), out->trained.size());
  sum.update(out->offsets.data(), out->offsets.size() * 8);
  CacheHeader h{uint64_t(out->offsets.back()), uint64_t(out->examples()), key, sum.value(), uint32_t(tok.vocab_size())};
  char head[kHeader];
  header_encode(h, head);
  ZT_CHECK(::pwrite(tmp.fd, head, kHeader, 0) == ssize_t(kHeader), "cannot write ", tmp.path, ": ",
           std::strerror(errno));
  ZT_CHECK(::fsync(tmp.fd) == 0, "cannot write ", tmp.path, ": ", std::strerror(errno));
  ::close(tmp.fd);
  tmp.fd = -1;
  ZT_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot rename ", tmp.path, " to ", path, ": ",
           std::strerror(errno));
  tmp.path.clear();
  fsync_path(src.cache_dir, true);
}

}  // namespace

SftTokens sft_tokenize(const SftSource& src, const Tokenizer& tok, const ChatFormatter& fmt,
                       const ChatTemplateConfig& tpl, const SftOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t key = cache_key(src, tok, tpl, opt);
  const uint32_t id_bound = uint32_t(tok.vocab_size());
  std::error_code ec;
  fs::create_directories(src.cache_dir, ec);
  ZT_CHECK(fs::is_directory(src.cache_dir, ec), "cannot create the tokenized-data cache folder ", src.cache_dir,
           "; pass a writable --cache_dir");
  const std::string path =
      (fs::path(src.cache_dir) / str_cat("sft-", fs::path(src.jsonl).stem().string(), "-", hex64(key), ".bin"))
          .string();
  SftTokens out;
  out.cache_path = path;
  const std::string why = load_cache(path, key, id_bound, &out);
  if (why.empty()) {
    out.from_cache = true;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  // A cache that cannot be used is never an error: it is rebuilt (atomically replaced), and said so.
  if (why != "absent") std::fprintf(stderr, "ztrain: note: the tokenized cache %s %s; rebuilding it\n", path.c_str(), why.c_str());
  out = SftTokens();
  build_cache(src, tok, fmt, path, key, &out);
  // Read back what was written (the tokens went to the file, not to memory), checked as any cache.
  SftTokens loaded;
  const std::string back = load_cache(path, key, id_bound, &loaded);
  ZT_CHECK(back.empty(), "the tokenized cache ", path, " just written ", back, "; check the disk and --cache_dir");
  loaded.cache_path = path;
  loaded.lines = out.lines;
  loaded.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return loaded;
}

SftRows::SftRows(const SftTokens& d, int T, bool packing, bool shuffle, uint64_t seed)
    : d_(d), T_(T), packing_(packing), order_(1, false, 0), count_order_(1, false, 0) {
  std::vector<Item> ex;
  for (int64_t e = 0; e < d.examples(); ++e) {
    const int64_t n = d.offsets[size_t(e) + 1] - d.offsets[size_t(e)];
    if (n < 2) {
      ++skipped_;
      continue;
    }
    if (n - 1 > T) ++truncated_;
    ex.push_back({e, int32_t(std::min<int64_t>(n - 1, T))});
  }
  row_start_.push_back(0);
  if (!packing) {
    for (const Item& it : ex) {
      items_.push_back(it);
      row_start_.push_back(int64_t(items_.size()));
    }
  } else {  // best fit decreasing: longest first, each into the fullest row it fits
    std::vector<size_t> idx(ex.size());
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ex[a].pairs > ex[b].pairs; });
    std::multimap<int32_t, size_t> free_space;  // room left -> row
    std::vector<std::vector<Item>> rows;
    for (size_t k : idx) {
      auto it = free_space.lower_bound(ex[k].pairs);
      size_t r;
      int32_t room;
      if (it == free_space.end()) {
        r = rows.size();
        rows.emplace_back();
        room = T;
      } else {
        r = it->second;
        room = it->first;
        free_space.erase(it);
      }
      rows[r].push_back(ex[k]);
      if (room - ex[k].pairs > 0) free_space.emplace(room - ex[k].pairs, r);
    }
    for (auto& row : rows) {
      items_.insert(items_.end(), row.begin(), row.end());
      row_start_.push_back(int64_t(items_.size()));
    }
  }
  for (size_t r = 0; r + 1 < row_start_.size(); ++r) {
    int32_t c = 0;
    for (int64_t k = row_start_[r]; k < row_start_[r + 1]; ++k) {
      const Item& it = items_[size_t(k)];
      const int64_t o = d.offsets[size_t(it.example)];
      for (int32_t j = 1; j <= it.pairs; ++j) c += d.trained[size_t(o + j)];
    }
    row_targets_.push_back(c);
    total_targets_ += c;
  }
  ZT_CHECK(num_sequences() > 0, "no example has 2 or more tokens; nothing to train on");
  order_ = EpochOrder(num_sequences(), shuffle, seed);
  count_order_ = EpochOrder(num_sequences(), shuffle, seed);
}

void SftRows::fill(int32_t* inputs, int32_t* targets, int32_t* positions, int64_t g, int count) {
  for (int s = 0; s < count; ++s) {
    const int64_t r = order_.at(g + s);
    int32_t* in = inputs + int64_t(s) * T_;
    int32_t* tg = targets + int64_t(s) * T_;
    int32_t* pos = positions ? positions + int64_t(s) * T_ : nullptr;
    int t = 0;
    for (int64_t k = row_start_[size_t(r)]; k < row_start_[size_t(r) + 1]; ++k) {
      const Item& it = items_[size_t(k)];
      const int64_t o = d_.offsets[size_t(it.example)];
      for (int32_t j = 0; j < it.pairs; ++j, ++t) {
        in[t] = d_.tokens[size_t(o + j)];
        tg[t] = d_.trained[size_t(o + j + 1)] ? d_.tokens[size_t(o + j + 1)] : kIgnore;
        if (pos) pos[t] = j;
      }
    }
    for (int p = 0; t < T_; ++t, ++p) {  // padding: ignored targets; in a packed row, its own document
      in[t] = 0;
      tg[t] = kIgnore;
      if (pos) pos[t] = p;
    }
  }
}

int64_t SftRows::count_targets(int64_t g, int64_t count) const {
  std::lock_guard<std::mutex> l(count_mu_);
  int64_t c = 0;
  for (int64_t s = 0; s < count; ++s) c += row_targets_[size_t(count_order_.at(g + s))];
  return c;
}

}  // namespace zt
