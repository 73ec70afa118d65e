// shard_format.cpp: see shard_format.h.
#include "data/shard_format.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace zt {
namespace {
void write_header(std::FILE* f, const ShardHeader& h) {
  unsigned char b[kShardHeaderBytes] = {};
  std::memcpy(b, kShardMagic, 8);
  std::memcpy(b + 8, &h.version, 4);
  std::memcpy(b + 12, &h.token_bytes, 4);
  std::memcpy(b + 16, &h.count, 8);
  std::memcpy(b + 24, &h.vocab_size, 4);
  std::memcpy(b + 28, &h.eos_id, 4);
  std::fseek(f, 0, SEEK_SET);
  std::fwrite(b, 1, sizeof b, f);
}
}  // namespace

ShardWriter::ShardWriter(const std::string& path, uint32_t vocab_size, int32_t eos_id)
    : path_(path), tmp_(path + ".tmp") {
  header_.vocab_size = vocab_size;
  header_.eos_id = eos_id;
  header_.token_bytes = vocab_size <= 65536 ? 2 : 4;
  f_ = std::fopen(tmp_.c_str(), "wb");
  ZT_CHECK(f_, "cannot create ", tmp_, ": ", std::strerror(errno));
  write_header(f_, header_);
}

ShardWriter::~ShardWriter() {
  if (f_) {  // not closed: abandoned (an error is unwinding); leave no partial shard
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void ShardWriter::append(const int32_t* ids, size_t n) {
  size_t w;
  if (header_.token_bytes == 2) {
    std::vector<uint16_t> buf(ids, ids + n);
    w = std::fwrite(buf.data(), 2, n, f_);
  } else {
    w = std::fwrite(ids, 4, n, f_);
  }
  ZT_CHECK(w == n, "writing ", tmp_, " failed; check free disk space");
  header_.count += n;
}

void ShardWriter::close() {
  write_header(f_, header_);
  ZT_CHECK(std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0, "writing ", tmp_, " failed; check free disk space");
  std::fclose(f_);
  f_ = nullptr;
  ZT_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot rename ", tmp_, " to ", path_);
}

}  // namespace zt
