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
  ZT_CHECK(hlen <= size_ - 8 && hlen < (uint64_t(1) << 30), path,
           ": not a safetensors file or truncated (header length ", hlen, " exceeds the file size ", size_, ")");
  data_ = map_ + 8 + hlen;
  uint64_t data_size = size_ - 8 - hlen;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(reinterpret_cast<const char*>(map_ + 8), reinterpret_cast<const char*>(map_ + 8 + hlen));
  } catch (const nlohmann::json::exception&) {
    throw Error(str_cat(path, ": not a safetensors file (its header is not valid JSON)"));
  }
  ZT_CHECK(h.is_object(), path, ": not a safetensors file (header is not a JSON object)");
  for (auto it = h.begin(); it != h.end(); ++it) {
    const auto& v = it.value();
    if (it.key() == "__metadata__") {
      ZT_CHECK(v.is_object() || v.is_null(), path, ": __metadata__ must be an object of strings");
      if (v.is_object())
        for (auto m2 = v.begin(); m2 != v.end(); ++m2)
          if (m2.value().is_string()) metadata_[m2.key()] = m2.value().get<std::string>();
      continue;
    }
    StEntry e;
    e.name = it.key();
    bool ok = v.is_object() && v.contains("dtype") && v["dtype"].is_string() && v.contains("shape") &&
              v["shape"].is_array() && v.contains("data_offsets") && v["data_offsets"].is_array() &&
              v["data_offsets"].size() == 2 && v["data_offsets"][0].is_number_unsigned() &&
              v["data_offsets"][1].is_number_unsigned();
    ZT_CHECK(ok, path, ": malformed header entry for tensor ", quote(e.name),
             " (needs dtype, shape and two data_offsets)");
    e.dtype = v["dtype"].get<std::string>();
    for (auto& d : v["shape"]) {
      ZT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), path, ": tensor ", quote(e.name),
               " has a shape that is not a list of non-negative integers");
      e.shape.push_back(d.get<int64_t>());
    }
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    size_t es = st_dtype_bytes(e.dtype);
    ZT_CHECK(es != 0, path, ": tensor ", quote(e.name), " has unknown dtype ", quote(e.dtype));
    ZT_CHECK(e.begin <= e.end && e.end <= data_size, path, ": truncated file: tensor ", quote(e.name), " ends at byte ",
             e.end, " of a ", data_size, "-byte data section; re-download or re-save it");
    // Byte size checked for overflow (a shape like [2^32, 2^32] must not wrap around to a size
    // that matches the data); a zero dimension makes it 0 whatever the others are.
    uint64_t bytes = es;
    bool overflow = false;
    for (int64_t d : e.shape) overflow |= __builtin_mul_overflow(bytes, uint64_t(d), &bytes);
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) bytes = 0, overflow = false;
    ZT_CHECK(!overflow && e.end - e.begin == bytes, path, ": tensor ", quote(e.name), " has ", e.end - e.begin,
             " bytes but its shape and dtype need ", overflow ? std::string("more than 2^64") : std::to_string(bytes));
    entries_.push_back(std::move(e));
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const StEntry* SafetensorsFile::find(const std::string& name) const {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
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
