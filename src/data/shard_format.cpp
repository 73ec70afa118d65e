// shard_format.cpp: see shard_format.h.
#include "data/shard_format.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/content_hash.h"
#include "core/error.h"
#include "core/file_io.h"

namespace zt {
namespace {

constexpr size_t kChunk = size_t(1) << kShardChunkLog2;

void encode_header(const ShardHeader& h, uint32_t flags, uint32_t log2, uint64_t table_hash, unsigned char* b) {
  std::memset(b, 0, kShardHeaderBytes);
  std::memcpy(b, kShardMagic, 8);
  std::memcpy(b + 8, &h.version, 4);
  std::memcpy(b + 12, &h.token_bytes, 4);
  std::memcpy(b + 16, &h.count, 8);
  std::memcpy(b + 24, &h.vocab_size, 4);
  std::memcpy(b + 28, &h.eos_id, 4);
  if (flags == 0) return;  // the older layout: zeros from byte 32
  std::memcpy(b + 32, &flags, 4);
  std::memcpy(b + 36, &log2, 4);
  std::memcpy(b + 40, &table_hash, 8);
  const uint64_t self = content_hash(b, 56);
  std::memcpy(b + 56, &self, 8);
}

}  // namespace

uint64_t shard_chunk_hash(const void* p, size_t n, uint64_t index) { return content_hash(p, n, index); }

ShardLayout shard_layout(const unsigned char* base, size_t bytes, const std::string& path) {
  ShardLayout l;
  int same = 0;
  for (int i = 0; i < 8 && size_t(i) < bytes; ++i) same += base[i] == static_cast<unsigned char>(kShardMagic[i]);
  if (bytes < kShardHeaderBytes || same < 6) {  // a raw uint16 file (nanoGPT's train.bin)
    l.data_bytes = bytes;
    return l;
  }
  ZT_CHECK(same == 8, path,
           ": a ztrain token shard with a damaged header (its magic is not \"ZTTOKENS\"); re-run "
           "ztrain tokenize or restore the file");
  ShardHeader& h = l.header;
  std::memcpy(&h.version, base + 8, 4);
  std::memcpy(&h.token_bytes, base + 12, 4);
  std::memcpy(&h.count, base + 16, 8);
  std::memcpy(&h.vocab_size, base + 24, 4);
  std::memcpy(&h.eos_id, base + 28, 4);
  ZT_CHECK(h.version == kShardVersion, path, ": token shard version ", h.version, " is not supported (expected ",
           kShardVersion, "); re-run ztrain tokenize");
  ZT_CHECK(h.token_bytes == 2 || h.token_bytes == 4, path, ": token shard has ", h.token_bytes,
           "-byte tokens; expected 2 or 4");
  l.shard = true;
  l.data_offset = kShardHeaderBytes;
  const size_t room = (bytes - kShardHeaderBytes) / h.token_bytes;
  uint32_t flags = 0, log2 = 0;
  uint64_t table_hash = 0;
  std::memcpy(&flags, base + 32, 4);
  std::memcpy(&log2, base + 36, 4);
  std::memcpy(&table_hash, base + 40, 8);
  bool zeros = true;
  for (size_t i = 32; i < kShardHeaderBytes; ++i) zeros &= base[i] == 0;
  if (zeros) {  // written before the checksums
    ZT_CHECK(h.count <= room, path, ": truncated token shard (header says ", h.count, " tokens, the file holds ", room,
             ")");
    l.data_bytes = h.count * h.token_bytes;
    return l;
  }
  unsigned char want[kShardHeaderBytes];
  encode_header(h, kShardFlagChecksums, log2, table_hash, want);
  ZT_CHECK(log2 >= 10 && log2 <= 30 && std::memcmp(base, want, kShardHeaderBytes) == 0, path,
           ": the token shard's header fails its checksum (damaged); re-run ztrain tokenize or restore the file");
  // The header is intact: the sizes it gives are the writer's, and the file must match them exactly.
  ZT_CHECK(h.count <= room, path, ": truncated token shard (header says ", h.count, " tokens, the file holds ", room,
           ")");
  l.data_bytes = h.count * h.token_bytes;
  l.chunk_bytes = size_t(1) << log2;  // what the writer used (this one writes kShardChunkLog2)
  const uint64_t chunks = (l.data_bytes + l.chunk_bytes - 1) / l.chunk_bytes;
  ZT_CHECK(bytes == kShardHeaderBytes + l.data_bytes + chunks * 8, path, ": token shard of ", bytes,
           " bytes, expected ", kShardHeaderBytes + l.data_bytes + chunks * 8,
           " (truncated or extended); re-run "
           "ztrain tokenize or restore the file");
  l.sums.resize(chunks);
  if (chunks > 0) std::memcpy(l.sums.data(), base + kShardHeaderBytes + l.data_bytes, chunks * 8);
  static const uint64_t kNone = 0;  // an empty table: never hand a null pointer to the hash
  ZT_CHECK(content_hash(chunks > 0 ? static_cast<const void*>(l.sums.data()) : &kNone, chunks * 8) == table_hash, path,
           ": the token shard's checksum table is damaged; re-run ztrain tokenize or restore the file");
  return l;
}

ShardWriter::ShardWriter(const std::string& path, uint32_t vocab_size, int32_t eos_id)
    : path_(path), tmp_(path + ".tmp") {
  header_.vocab_size = vocab_size;
  header_.eos_id = eos_id;
  header_.token_bytes = vocab_size <= 65536 ? 2 : 4;
  const int fd = open_new_file(tmp_);  // never through a planted link
  file_ = fd >= 0 ? ::fdopen(fd, "wb") : nullptr;
  ZT_CHECK(file_, "cannot create ", tmp_, ": ", std::strerror(errno));
  unsigned char b[kShardHeaderBytes] = {};  // the real header comes at close()
  ZT_CHECK(std::fwrite(b, 1, sizeof b, file_) == sizeof b, "writing ", tmp_, " failed; check free disk space");
  chunk_.reserve(kChunk);
}

ShardWriter::~ShardWriter() {
  if (file_) {  // not closed: abandoned (an error is unwinding); leave no partial shard
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void ShardWriter::put(const void* bytes, size_t n) {
  if (n == 0) return;
  ZT_CHECK(std::fwrite(bytes, 1, n, file_) == n, "writing ", tmp_, " failed; check free disk space");
  const auto* p = static_cast<const unsigned char*>(bytes);
  while (n > 0) {
    const size_t take = std::min(n, kChunk - chunk_.size());
    chunk_.insert(chunk_.end(), p, p + take);
    p += take, n -= take;
    if (chunk_.size() == kChunk) {
      sums_.push_back(shard_chunk_hash(chunk_.data(), kChunk, sums_.size()));
      chunk_.clear();
    }
  }
}

void ShardWriter::append(const int32_t* ids, size_t n) {
  if (header_.token_bytes == 2) {
    std::vector<uint16_t> buf(ids, ids + n);
    put(buf.data(), n * 2);
  } else {
    put(ids, n * 4);
  }
  header_.count += n;
}

void ShardWriter::close() {
  if (!chunk_.empty()) sums_.push_back(shard_chunk_hash(chunk_.data(), chunk_.size(), sums_.size()));
  chunk_.clear();
  const size_t table = sums_.size() * 8;
  // An empty shard has no chunks: its table is empty (and sums_.data() may be null, which
  // fwrite and the hash must not be given).
  static const uint64_t kNone = 0;
  const void* sums = sums_.empty() ? &kNone : sums_.data();
  ZT_CHECK(table == 0 || std::fwrite(sums, 1, table, file_) == table, "writing ", tmp_,
           " failed; check free disk space");
  unsigned char b[kShardHeaderBytes];
  encode_header(header_, kShardFlagChecksums, kShardChunkLog2, content_hash(sums, table), b);
  ZT_CHECK(std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(b, 1, sizeof b, file_) == sizeof b, "writing ", tmp_,
           " failed; check free disk space");
  ZT_CHECK(std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0, "writing ", tmp_, " failed; check free disk space");
  std::fclose(file_);
  file_ = nullptr;
  ZT_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot rename ", tmp_, " to ", path_);
}

}  // namespace zt
