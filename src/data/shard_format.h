// shard_format.h: ztrain's token shard format, written by `ztrain tokenize`.
//   bytes 0..7    magic "ZTTOKENS"
//   bytes 8..11   u32 version (1)
//   bytes 12..15  u32 bytes per token: 2 (uint16) or 4 (uint32, vocabularies > 65535)
//   bytes 16..23  u64 number of tokens
//   bytes 24..27  u32 vocab size of the tokenizer that wrote it
//   bytes 28..31  i32 end-of-document token id (-1 if none)
//   bytes 32..63  zero
//   then the tokens, little-endian; documents are separated by the EOS id.
// A file without the magic is read as nanoGPT's headerless uint16 train.bin.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace zt {

constexpr char kShardMagic[8] = {'Z', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t count = 0;
  uint32_t vocab_size = 0;
  int32_t eos_id = -1;
};

// Streams tokens into path.tmp, then fsyncs, writes the final count into the header
// and renames to path, so a reader never sees a half-written shard.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, uint32_t vocab_size, int32_t eos_id);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void append(const int32_t* ids, size_t n);
  void close();
  uint64_t count() const { return header_.count; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  ShardHeader header_;
};

}  // namespace zt
