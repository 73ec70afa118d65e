// sft_data.cpp: see sft_data.h.
#include "data/sft_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'Z', 'T', 'S', 'F', 'T', 'C', 'A', '1'};
constexpr size_t kHeader = 64;  // magic, tokens, examples, meta bytes (u64 each), reserved
constexpr int kFormatVersion = 1;
constexpr int32_t kIgnore = -100;  // kIgnore, HF's -100 (data/ does not include kernels/)

// Hash of a whole file, chained over 8 MiB chunks; "" when it cannot be read.
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

std::string cache_key(const SftSource& src, const ChatTemplateConfig& tpl, const SftOptions& opt) {
  bool ok = false;
  uint64_t h = hash_file(src.jsonl, 0x5346540000ull + kFormatVersion, &ok);
  ZT_CHECK(ok, "cannot read ", src.flag, " ", src.jsonl, ": ", std::strerror(errno));
  std::error_code ec;
  std::vector<std::string> tok_files;
  if (fs::is_directory(src.tokenizer_path, ec)) {
    for (const char* f : {"tokenizer.json", "encoder.json", "vocab.bpe", "tokenizer_config.json"})
      if (fs::exists(fs::path(src.tokenizer_path) / f, ec))
        tok_files.push_back((fs::path(src.tokenizer_path) / f).string());
  } else {
    tok_files.push_back(src.tokenizer_path);
  }
  for (const std::string& f : tok_files) h = hash_file(f, h, &ok);
  const std::string meta = str_cat(tpl.source, '\0', tpl.has_bos, tpl.bos_token, '\0', tpl.has_eos, tpl.eos_token, '\0',
                                   opt.completion_only_loss, opt.assistant_only_loss);
  h = hash64(meta.data(), meta.size(), h);
  return hex64(h);
}

bool load_cache(const std::string& path, SftTokens* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  char head[kHeader];
  if (!f.read(head, kHeader) || std::memcmp(head, kMagic, 8) != 0) return false;
  uint64_t n_tok = 0, n_ex = 0;
  std::memcpy(&n_tok, head + 8, 8);
  std::memcpy(&n_ex, head + 16, 8);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec || n_tok > size || n_ex > size || kHeader + n_tok * 5 + (n_ex + 1) * 8 != size) return false;
  out->tokens.resize(n_tok);
  out->trained.resize(n_tok);
  out->offsets.resize(n_ex + 1);
  f.read(reinterpret_cast<char*>(out->tokens.data()), std::streamsize(n_tok * 4));
  f.read(reinterpret_cast<char*>(out->trained.data()), std::streamsize(n_tok));
  f.read(reinterpret_cast<char*>(out->offsets.data()), std::streamsize((n_ex + 1) * 8));
  return bool(f) && out->offsets.front() == 0 && uint64_t(out->offsets.back()) == n_tok;
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

SftTokens sft_tokenize(const SftSource& src, const Tokenizer& tok, const ChatFormatter& fmt,
                       const ChatTemplateConfig& tpl, const SftOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string key = cache_key(src, tpl, opt);
  std::error_code ec;
  fs::create_directories(src.cache_dir, ec);
  ZT_CHECK(fs::is_directory(src.cache_dir, ec), "cannot create the tokenized-data cache folder ", src.cache_dir,
           "; pass a writable --cache_dir");
  const std::string path =
      (fs::path(src.cache_dir) / str_cat("sft-", fs::path(src.jsonl).stem().string(), "-", key, ".bin")).string();
  SftTokens out;
  out.cache_path = path;
  if (load_cache(path, &out)) {
    out.from_cache = true;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  out = SftTokens();
  out.cache_path = path;
  std::ifstream in(src.jsonl, std::ios::binary);
  ZT_CHECK(in, "cannot read ", src.flag, " ", src.jsonl, ": ", std::strerror(errno));
  TempFile tmp;
  tmp.path = str_cat(path, ".tmp.", ::getpid());
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZT_CHECK(tmp.fd >= 0, "cannot create ", tmp.path, ": ", std::strerror(errno), "; pass a writable --cache_dir");
  const char zeros[kHeader] = {};
  write_all(tmp.fd, zeros, kHeader, tmp.path);
  out.offsets.push_back(0);
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
        ZT_CHECK(id >= 0, src.flag, " ", src.jsonl, " line ", numbers[k], ": the tokenizer produced id ", id);
      write_all(tmp.fd, enc[k].ids.data(), enc[k].ids.size() * 4, tmp.path);
      out.trained.insert(out.trained.end(), enc[k].trained.begin(), enc[k].trained.end());
      out.offsets.push_back(out.offsets.back() + int64_t(enc[k].ids.size()));
    }
  }
  out.lines = line_no;
  ZT_CHECK(out.examples() > 0, src.flag, " ", src.jsonl,
           " has no records; give a JSONL file with one JSON object per "
           "line");
  const uint64_t n_tok = uint64_t(out.offsets.back()), n_ex = uint64_t(out.examples());
  write_all(tmp.fd, out.trained.data(), out.trained.size(), tmp.path);
  write_all(tmp.fd, out.offsets.data(), out.offsets.size() * 8, tmp.path);
  char head[kHeader] = {};
  std::memcpy(head, kMagic, 8);
  std::memcpy(head + 8, &n_tok, 8);
  std::memcpy(head + 16, &n_ex, 8);
  ZT_CHECK(::pwrite(tmp.fd, head, kHeader, 0) == ssize_t(kHeader), "cannot write ", tmp.path, ": ",
           std::strerror(errno));
  ZT_CHECK(::fsync(tmp.fd) == 0, "cannot write ", tmp.path, ": ", std::strerror(errno));
  ::close(tmp.fd);
  tmp.fd = -1;
  ZT_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot rename ", tmp.path, " to ", path, ": ",
           std::strerror(errno));
  tmp.path.clear();
  fsync_path(src.cache_dir, true);
  // Read back what was written (the tokens went to the file, not to memory).
  SftTokens loaded;
  ZT_CHECK(load_cache(path, &loaded), "the tokenized cache ", path, " did not read back; check the disk");
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
