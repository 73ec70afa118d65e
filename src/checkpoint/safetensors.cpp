// safetensors.cpp: see safetensors.h.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace zt {
namespace {

size_t st_dtype_bytes(const std::string& dt) {
  if (dt == "F32" || dt == "I32" || dt == "U32") return 4;
  if (dt == "BF16" || dt == "F16" || dt == "I16" || dt == "U16") return 2;
  if (dt == "F64" || dt == "I64" || dt == "U64") return 8;
  if (dt == "I8" || dt == "U8" || dt == "BOOL" || dt == "F8_E4M3" || dt == "F8_E5M2") return 1;
  return 0;
}

// Checks an entry's dtype, range and size (the overflow check: a shape like [2^32, 2^32] must not
// wrap around to a size that matches the data; a zero dimension makes it 0 whatever the others are).
void st_check_entry(const std::string& path, const StEntry& e, uint64_t data_size) {
  const size_t es = st_dtype_bytes(e.dtype);
  ZT_CHECK(es != 0, path, ": tensor ", quote(e.name), " has unknown dtype ", quote(e.dtype));
  ZT_CHECK(e.begin <= e.end && e.end <= data_size, path, ": truncated file: tensor ", quote(e.name), " ends at byte ",
           e.end, " of a ", data_size, "-byte data section; re-download or re-save it");
  uint64_t bytes = es;
  bool overflow = false;
  for (int64_t d : e.shape) overflow |= __builtin_mul_overflow(bytes, uint64_t(d), &bytes);
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) bytes = 0, overflow = false;
  ZT_CHECK(!overflow && e.end - e.begin == bytes, path, ": tensor ", quote(e.name), " has ", e.end - e.begin,
           " bytes but its shape and dtype need ", overflow ? std::string("more than 2^64") : std::to_string(bytes));
}

// The header read as SAX events straight into StEntry: no JSON document is ever built (a DOM of
// a 150 MB header took 5.8 GB, about 40 bytes per header byte; this keeps about 2 to 4: an entry
// of ~50 header bytes becomes one StEntry). Accepts {name: {"dtype": s, "shape": [u...],
// "data_offsets": [u, u], other keys ignored}, "__metadata__": {key: string, others ignored} or
// null}; containers are nested at most kMaxDepth deep (nlohmann's parser keeps its own stack on
// the heap, so depth costs no C++ stack). A handler returning false stops the parse.
class StHeaderSax {
 public:
  std::string error;  // set when the parse stopped on a problem the caller reports
  StHeaderSax(const std::string& path, uint64_t data_size, std::vector<StEntry>* entries,
              std::map<std::string, std::string>* metadata)
      : path_(path), data_size_(data_size), entries_(entries), metadata_(metadata) {}

  bool null() { return top_value() && scalar(true); }
  bool boolean(bool) { return top_value() && scalar(); }
  bool number_integer(int64_t) { return top_value() && (field_ == Field::none || skip_ ? scalar() : bad_number()); }
  bool number_float(double, const std::string&) {
    return top_value() && (field_ == Field::none || skip_ ? scalar() : bad_number());
  }
  bool number_unsigned(uint64_t v) {
    if (!top_value()) return false;
    if (skip_ || depth_ != 3) return scalar();
    if (field_ == Field::shape) {
      if (v > uint64_t(INT64_MAX)) return bad_number();
      e_.shape.push_back(int64_t(v));
    } else if (field_ == Field::offsets) {
      if (n_offsets_ == 0) e_.begin = v;
      if (n_offsets_ == 1) e_.end = v;
      ++n_offsets_;
    }
    return true;
  }
  bool string(std::string& v) {
    if (!top_value()) return false;
    if (skip_) return true;
    if (in_meta_ && depth_ == 2) {
      (*metadata_)[key_] = std::move(v);
    } else if (!in_meta_ && depth_ == 2 && field_ == Field::dtype) {
      e_.dtype = std::move(v);
      has_dtype_ = true;
    } else if (depth_ == 3) {
      return bad_number();
    } else if (depth_ == 1) {
      return scalar();
    }
    return true;
  }
  bool binary(nlohmann::json::binary_t&) { return fail("not a safetensors file (its header is not JSON text)"); }
  bool start_object(size_t) { return open(true); }
  bool start_array(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    if (skip_) return true;
    if (depth_ == 1) {
      key_ = std::move(k);
      return true;
    }
    if (in_meta_)
      key_ = std::move(k);
    else
      field_ = k == "dtype"          ? Field::dtype
               : k == "shape"        ? Field::shape
               : k == "data_offsets" ? Field::offsets
                                     : Field::none;
    return true;
  }
  bool parse_error(size_t pos, const std::string&, const nlohmann::detail::exception&) {
    return fail(str_cat("not a safetensors file (its header is not valid JSON at byte ", pos, ")"));
  }

 private:
  static constexpr int kMaxDepth = 64;
  enum class Field { none, dtype, shape, offsets };
  bool fail(std::string m) {
    if (error.empty()) error = std::move(m);
    return false;
  }
  bool malformed() {
    return fail(
        str_cat("malformed header entry for tensor ", quote(key_), " (needs dtype, shape and two data_offsets)"));
  }
  bool bad_number() {
    if (field_ == Field::shape)
      return fail(str_cat("tensor ", quote(key_), " has a shape that is not a list of non-negative integers"));
    return malformed();
  }
  // The whole header must be an object.
  bool top_value() { return depth_ > 0 || fail("not a safetensors file (header is not a JSON object)"); }
  // A scalar where a container was expected (an entry, __metadata__) is malformed; elsewhere ignored.
  bool scalar(bool is_null = false) {
    if (skip_) return true;
    if (depth_ == 1 && key_ == "__metadata__")  // null is allowed: no metadata
      return is_null || fail("__metadata__ must be an object of strings");
    if (depth_ == 1) return malformed();
    if (depth_ == 2 && !in_meta_ && field_ != Field::none) return malformed();
    return true;
  }
  bool open(bool object) {
    if (depth_ == 0 && !object) return fail("not a safetensors file (header is not a JSON object)");
    if (++depth_ > kMaxDepth)
      return fail(str_cat("its header nests deeper than ", kMaxDepth, " levels; the file is damaged"));
    if (skip_) return ++skip_, true;
    if (depth_ == 1) return true;          // the header itself
    if (depth_ >= 4) return bad_number();  // inside shape or data_offsets (other depth-3 values are skipped)
    if (depth_ == 2) {
      in_meta_ = key_ == "__metadata__";
      if (!object) return in_meta_ ? fail("__metadata__ must be an object of strings") : malformed();
      e_ = StEntry();
      e_.name = key_;
      has_dtype_ = has_shape_ = false;
      n_offsets_ = 0;
      field_ = Field::none;
      return true;
    }
    if (depth_ == 3 && !in_meta_ && (field_ == Field::shape || field_ == Field::offsets)) {
      if (object) return field_ == Field::shape ? bad_number() : malformed();
      has_shape_ |= field_ == Field::shape;
      if (field_ == Field::offsets) n_offsets_ = 0;
      return true;
    }
    if (depth_ == 3 && !in_meta_ && field_ == Field::dtype) return malformed();
    skip_ = 1;  // a value nobody reads (an unknown field, a non-string metadata value)
    return true;
  }
  bool close() {
    --depth_;
    if (skip_) return --skip_, true;
    if (depth_ == 2 && field_ == Field::offsets && n_offsets_ != 2) return malformed();
    if (depth_ == 1 && !in_meta_) {
      if (!has_dtype_ || !has_shape_ || n_offsets_ != 2) return malformed();
      try {
        st_check_entry(path_, e_, data_size_);
      } catch (const Error& x) {  // the message names the file already: strip "path: "
        return fail(std::string(x.what()).substr(path_.size() + 2));
      }
      entries_->push_back(std::move(e_));
    }
    if (depth_ == 1) in_meta_ = false;
    if (depth_ == 2) field_ = Field::none;
    return true;
  }

  const std::string& path_;
  uint64_t data_size_;
  std::vector<StEntry>* entries_;
  std::map<std::string, std::string>* metadata_;
  int depth_ = 0, skip_ = 0;
  bool in_meta_ = false, has_dtype_ = false, has_shape_ = false;
  int n_offsets_ = 0;
  Field field_ = Field::none;
  std::string key_;  // the tensor's name at depth 1, the metadata key at depth 2
  StEntry e_;
};

}  // namespace

int64_t StEntry::numel() const {
  // A zero dimension first: the other dimensions' product may not fit (the reader checks it
  // fits whenever no dimension is zero).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  try {
    open_and_parse();
  } catch (...) {  // the destructor does not run for a constructor that throws
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
}

void SafetensorsFile::open_and_parse() {
  const std::string& path = path_;
  fd_ = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd_ >= 0, "cannot open weight file ", path, ": ", std::strerror(errno),
           "; the model folder needs a model.safetensors");
  struct stat st {};
  ::fstat(fd_, &st);
  size_ = size_t(st.st_size);
  ZT_CHECK(size_ >= 8, path, ": not a safetensors file (", size_, " bytes, too short for a header)");
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  ZT_CHECK(m != MAP_FAILED, "cannot map ", path, ": ", std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  uint64_t hlen;
  std::memcpy(&hlen, map_, 8);
  ZT_CHECK(hlen <= size_ - 8, path, ": not a safetensors file or truncated (header length ", hlen,
           " exceeds the file size ", size_, ")");
  ZT_CHECK(hlen <= kStMaxHeaderBytes, path, ": the safetensors header is ", hlen, " bytes, over the limit of ",
           kStMaxHeaderBytes, " (100 MB, Hugging Face's); the file is damaged or not a model's weights");
  data_ = map_ + 8 + hlen;
  const uint64_t data_size = size_ - 8 - hlen;
  StHeaderSax sax(path, data_size, &entries_, &metadata_);
  const char* h = reinterpret_cast<const char*>(map_ + 8);
  if (!nlohmann::json::sax_parse(h, h + hlen, &sax) && sax.error.empty())
    sax.error = "not a safetensors file (its header is not valid JSON)";
  ZT_CHECK(sax.error.empty(), path, ": ", sax.error);
  // The order a JSON object gives (HF writes names sorted); a name twice is one tensor stored twice.
  std::sort(entries_.begin(), entries_.end(), [](const StEntry& a, const StEntry& b) { return a.name < b.name; });
  for (size_t i = 1; i < entries_.size(); ++i)
    ZT_CHECK(entries_[i].name != entries_[i - 1].name, path, ": tensor ", quote(entries_[i].name),
             " appears twice in the header; the file is damaged");
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

// The entries are sorted by name (the constructor): a binary search, so reading a model's T tensors
// costs T log T name comparisons, not T^2 (tens of thousands of tensors for the large MoE models).
const StEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const StEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsFile::read_f32(const StEntry& e, float* dst, int64_t begin, int64_t count) const {
  const int64_t n = count < 0 ? e.numel() - begin : count;
  ZT_ASSERT(begin >= 0 && begin + n <= e.numel(), "read_f32 out of the tensor's range");
  DType t{};
  const bool known = dtype_from_st_name(e.dtype, &t);
  const uint8_t* src = data_ + e.begin + (known ? uint64_t(begin) * dtype_size(t) : 0);
  if (known && t == DType::f32) {
    std::memcpy(dst, src, size_t(n) * 4);
  } else if (known && (t == DType::bf16 || t == DType::f16)) {
    const bool bf = t == DType::bf16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    throw Error(str_cat(path_, ": tensor \"", e.name, "\" has dtype ", e.dtype, "; ztrain reads F32, BF16 and F16"));
  }
}

std::string safetensors_header(const std::vector<StTensorOut>& tensors, DType dtype,
                               const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  ZT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "safetensors can be written as F32 or BF16, not ",
           dtype_st_name(dtype));
  const size_t es = zt::dtype_size(dtype);
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (auto& t : tensors) {
    int64_t n = 1;
    for (auto s : t.shape) n *= s;
    h[t.name] = {{"dtype", dtype_st_name(dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + uint64_t(n) * es}}};
    off += uint64_t(n) * es;
  }
  std::string json = h.dump();
  while ((json.size() + 8) % 8 != 0) json.push_back(' ');
  const uint64_t hl = json.size();
  std::string out(reinterpret_cast<const char*>(&hl), 8);
  if (data_bytes) *data_bytes = off;
  return out + json;
}

FileDigest safetensors_write(const std::string& path, const std::vector<StTensorOut>& tensors, DType dtype,
                             const std::map<std::string, std::string>& metadata) {
  uint64_t off = 0;
  const std::string header = safetensors_header(tensors, dtype, metadata, &off);
  const size_t es = zt::dtype_size(dtype);
  return write_renamed(path, [&](const std::string& tmp) {
    SequentialFileWriter out(tmp, header.size() + off);
    out.write(header.data(), header.size());
    std::vector<uint16_t> half;
    std::vector<float> filled;
    for (auto& t : tensors) {
      int64_t n = 1;
      for (auto s : t.shape) n *= s;
      const float* data = t.data;
      if (!data) {
        filled.resize(size_t(n));
        t.fill(filled.data());
        data = filled.data();
      }
      if (es == 4) {
        out.write(data, size_t(n) * 4);
      } else {
        half.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) half[i] = f32_to_bf16(data[i]);
        out.write(half.data(), size_t(n) * 2);
      }
    }
    return out.finish();
  });
}

}  // namespace zt
