// safetensors.h: reading (memory-mapped, validated) and atomic writing of the
// safetensors format: u64 little-endian header length, a JSON header mapping names to
// {dtype, shape, data_offsets}, optional "__metadata__", then raw little-endian data.
// Reads F32, BF16 and F16 into fp32; writes F32 or BF16. Every malformed file gets an
// Error naming the file and the problem; nothing is read out of bounds.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/file_io.h"  // write_file_atomic, which the writers of checkpoint files use with it
#include "core/tensor.h"

namespace zt {

// The largest header read: Hugging Face's safetensors refuses more (MAX_HEADER_SIZE, 100,000,000
// bytes); a real model's header is kilobytes to a few megabytes. Parsing costs a few bytes of
// memory per header byte (no JSON document is built).
constexpr uint64_t kStMaxHeaderBytes = 100'000'000;

struct StEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16" (others are listed but cannot be converted)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const StEntry* find(const std::string& name) const;
  const std::vector<StEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Converts elements [begin, begin + count) of the tensor (count < 0: to the end) to fp32 into dst.
  void read_f32(const StEntry& e, float* dst, int64_t begin = 0, int64_t count = -1) const;
  const std::string& path() const { return path_; }

 private:
  void open_and_parse();  // the constructor's work; it releases fd_ and map_ if this throws
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<StEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct StTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
  // Without data: fills a buffer of the tensor's elements when the writer reaches it (a tensor
  // gathered from several ranks exists only while it is written).
  std::function<void(float*)> fill = {};
};

// Writes tensors (in the given order) as DType::f32 or DType::bf16 (round to nearest even),
// atomically: temporary file, fsync, rename. Returns the file's digest, hashed as written.
// The bytes before the tensor data: the 8-byte header length and the JSON header (padded to a
// multiple of 8), for tensors stored in order, back to back; *data_bytes gets their total size.
std::string safetensors_header(const std::vector<StTensorOut>& tensors, DType dtype,
                               const std::map<std::string, std::string>& metadata, uint64_t* data_bytes = nullptr);
FileDigest safetensors_write(const std::string& path, const std::vector<StTensorOut>& tensors, DType dtype,
                             const std::map<std::string, std::string>& metadata);

}  // namespace zt
