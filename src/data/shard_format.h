// shard_format.h: ztrain's token shard format, written by `ztrain tokenize`.
//   bytes 0..7    magic "ZTTOKENS"
//   bytes 8..11   u32 version (1)
//   bytes 12..15  u32 bytes per token: 2 (uint16) or 4 (uint32, vocabularies > 65535)
//   bytes 16..23  u64 number of tokens
//   bytes 24..27  u32 vocab size of the tokenizer that wrote it
//   bytes 28..31  i32 end-of-document token id (-1 if none)
//   bytes 32..35  u32 flags: 1 = chunk checksums follow the tokens (0 in shards written before them)
//   bytes 36..39  u32 log2 of the checksum chunk in bytes (14: 16 KiB of token bytes)
//   bytes 40..47  u64 XXH3 of the checksum table
//   bytes 48..55  zero
//   bytes 56..63  u64 XXH3 of bytes 0..55 (the header's own checksum)
//   then the tokens, little-endian; documents are separated by the EOS id;
//   then (flag 1) one u64 per chunk of token bytes: XXH3 of the chunk seeded with its index (a
//   chunk moved elsewhere fails too), and the file ends there.
// Shards written before the checksums have zeros in bytes 32..63 and still read; their bytes are
// checked only for ids in range (docs/data.md). The fields after byte 31 were reserved zeros in
// version 1, so the version stays 1 and older readers read the new shards.
// A file without the magic is read as nanoGPT's headerless uint16 train.bin.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zt {

constexpr char kShardMagic[8] = {'Z', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 64;
constexpr uint32_t kShardFlagChecksums = 1;
constexpr uint32_t kShardChunkLog2 = 14;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t count = 0;
  uint32_t vocab_size = 0;
  int32_t eos_id = -1;
};

// A token file's layout as its header gives it, checked.
struct ShardLayout {
  bool shard = false;          // false: a headerless uint16 file
  ShardHeader header;          // (shard) the header's fields
  size_t data_offset = 0;      // where the tokens start
  uint64_t data_bytes = 0;     // token bytes
  size_t chunk_bytes = 0;      // 0: no checksums (a raw file or an older shard)
  std::vector<uint64_t> sums;  // per chunk, copied out of the file once their own checksum matched
};

// Reads and checks the header (and the checksum table) of a token file of `bytes` bytes mapped at
// base. Throws an Error naming path when the header is damaged; a file whose first 8 bytes are
// almost the magic (one or two bytes off) is a shard with a flipped byte, not a raw file.
ShardLayout shard_layout(const unsigned char* base, size_t bytes, const std::string& path);

// The checksum of chunk `index` (its bytes p[0, n)).
uint64_t shard_chunk_hash(const void* p, size_t n, uint64_t index);

// Streams tokens into path.tmp (hashing each chunk as it goes), then writes the checksum table,
// fsyncs, writes the final header and renames to path, so a reader never sees a half-written shard.
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
  void put(const void* bytes, size_t n);  // writes token bytes, hashing each completed chunk
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  ShardHeader header_;
  std::vector<unsigned char> chunk_;  // the token bytes of the chunk being filled
  std::vector<uint64_t> sums_;
};

}  // namespace zt
