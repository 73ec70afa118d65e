// flash_snapshot.cpp: see flash_snapshot.h.
#include "checkpoint/flash_snapshot.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/content_hash.h"
#include "core/hash.h"
#include <filesystem>

namespace zt {
namespace {

constexpr uint64_t kDataOffset = 4096;
constexpr uint64_t kAlign = 64;
// 2: the checksum is over block hashes (XXH3); snapshots of format 1 are "another format".
constexpr char kMagic[8] = {'Z', 'T', 'F', 'L', 'A', 'S', 'H', '2'};
constexpr uint64_t kPage = 4096;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

struct FlashSnapshot::Header {
  char magic[8];
  uint64_t complete;  // 1: whole and checksummed; 0 while a copy is under way (or was, if torn)
  int64_t step;
  int32_t rank, world, shard_index, shard_count;
  char save_id[32];
  uint64_t data_bytes;  // the pieces, from kDataOffset
  uint64_t meta_bytes;  // the JSON, right after the data
  uint64_t checksum;    // over the fields above it (complete excluded), the data's block hashes and the JSON
};

void StateCollector::put_tensor(const StatePiece& p) {
  ZT_ASSERT(p.slice.dim < 0 && p.dtype == DType::f32, "flash snapshots hold fp32 element ranges (", p.tensor, ")");
  ZT_ASSERT(p.data, "flash snapshots copy pieces in memory (", p.tensor, "): state on disk is refused before");
  pieces.push_back(p);
}

void StateCollector::put_json(const std::string& key, const nlohmann::json& value) {
  JsonStateWriter(&json).put_json(key, value);
}

std::string FlashSnapshot::path_for(const std::string& output_dir, const std::string& run_id, int rank) {
  const char* dir = std::getenv("ZT_FLASH_DIR");
  // The folder's resolved path, hashed: a copy of a run folder (same run id) gets its own snapshot.
  std::error_code ec;
  std::string folder =
      std::filesystem::weakly_canonical(std::filesystem::absolute(output_dir).lexically_normal(), ec).string();
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();  // "out/" and "out" are one folder
  const std::string key = hex64(hash64(folder.data(), folder.size())).substr(0, 8);
  return str_cat(dir && *dir ? dir : "/dev/shm", "/ztrain-", key, "-", run_id, "-r", rank);
}

int64_t FlashSnapshot::complete_step(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  Header h{};
  const bool read = ::pread(fd, &h, sizeof h, 0) == ssize_t(sizeof h);
  ::close(fd);
  return read && std::memcmp(h.magic, kMagic, 8) == 0 && h.complete == 1 ? h.step : -1;
}

FlashSnapshot::FlashSnapshot(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  ZT_CHECK(fd_ >= 0, "cannot open the flash snapshot ", path_, ": ", std::strerror(errno),
           "; check that /dev/shm is writable, or run without --flash_checkpoint");
  struct stat st {};
  ::fstat(fd_, &st);
  // Shared memory is a shared folder: a file someone else planted under the name is not ours.
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd_);
    fd_ = -1;
    throw Error(str_cat("the flash snapshot ", path_,
                        " is not a regular file of this user; remove it, or run without "
                        "--flash_checkpoint"));
  }
  map_size(std::max<uint64_t>(uint64_t(st.st_size), kDataOffset));
}

FlashSnapshot::~FlashSnapshot() {
  if (map_) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

FlashSnapshot::Header* FlashSnapshot::header() const {
  static_assert(sizeof(Header) <= kDataOffset);
  return reinterpret_cast<Header*>(map_);
}

// The file is at least `bytes` long and mapped whole (a larger file stays larger).
void FlashSnapshot::map_size(uint64_t bytes) {
  struct stat st {};
  ::fstat(fd_, &st);
  if (uint64_t(st.st_size) < bytes)
    ZT_CHECK(::ftruncate(fd_, off_t(bytes)) == 0, "cannot grow the flash snapshot ", path_, ": ", std::strerror(errno));
  bytes = std::max<uint64_t>(bytes, uint64_t(st.st_size));
  if (map_ && bytes == size_) return;
  if (map_) ::munmap(map_, size_);
  // MAP_POPULATE: a resume reads every page of the snapshot; faulting them in one call is faster.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  ZT_CHECK(p != MAP_FAILED, "cannot map the flash snapshot ", path_, ": ", std::strerror(errno));
  map_ = static_cast<uint8_t*>(p);
  size_ = bytes;
}

void FlashSnapshot::reserve(uint64_t data_bytes) {
  const uint64_t want = kDataOffset + align_up(data_bytes, kAlign) + (1 << 20);  // + room for the JSON
  // Allocates the tmpfs pages (a full /dev/shm fails here, not with SIGBUS mid-copy); existing
  // contents are kept, so a snapshot still being persisted is not harmed.
  const int rc = ::posix_fallocate(fd_, 0, off_t(want));
  ZT_CHECK(rc == 0, "cannot reserve ", want >> 20, " MiB for the flash snapshot ", path_, ": ", std::strerror(rc),
           "; free space in /dev/shm (or enlarge it), or run without --flash_checkpoint");
  map_size(want);
  // Maps every page now (reading one word per page maps tmpfs pages that exist), so the
  // copy in the training loop takes no page faults.
  volatile uint8_t sink = 0;
  for (uint64_t off = 0; off < size_; off += 4096) sink = sink + map_[off];
  (void)sink;
}

namespace {

// A run of bytes the copy puts at `dst` (an offset from the data's start).
struct CopySegment {
  const uint8_t* src;
  uint64_t dst, bytes;
};

// Where write() puts everything: each file's image (its header, then its pieces back to back)
// from a 4096-byte boundary, as it will be on disk; then the pieces in no file (a rank that owns
// no checkpoint shard), 64-byte aligned. Segments in order of their place; regions are what is
// checksummed.
struct SnapshotLayout {
  std::vector<CopySegment> segs;
  std::vector<std::pair<uint64_t, uint64_t>> regions;  // offset, bytes
  std::vector<uint64_t> at;                            // each piece's offset
  nlohmann::json file_table = nlohmann::json::array();
  std::vector<std::string> headers;  // the segments point into them until the copy ends
  uint64_t data_bytes = 0;
};

void lay_out_snapshot(const StateCollector& c, const std::vector<ShardFile>& files, SnapshotLayout& lay) {
  lay.at.assign(c.pieces.size(), ~uint64_t(0));
  uint64_t off = 0;
  auto put = [&](const void* src, uint64_t bytes) {
    if (bytes > 0) lay.segs.push_back({static_cast<const uint8_t*>(src), off, bytes});
    off += bytes;
  };
  lay.headers.reserve(files.size());
  for (const ShardFile& f : files) {
    off = align_up(off, kPage);
    const uint64_t start = off;
    lay.headers.push_back(safetensors_header(f.tensors, DType::f32, f.metadata));
    put(lay.headers.back().data(), lay.headers.back().size());
    for (size_t i : f.pieces) lay.at[i] = off, put(c.pieces[i].data, uint64_t(c.pieces[i].slice.count) * 4);
    // The checksum's place holds 16 hex digits now, so the JSON's size is known before the copy.
    lay.file_table.push_back({{"name", f.name}, {"offset", start}, {"bytes", off - start}, {"checksum", hex64(0)}});
    lay.regions.push_back({start, off - start});
  }
  off = align_up(off, kPage);
  const uint64_t loose = off;
  for (size_t i = 0; i < c.pieces.size(); ++i)
    if (lay.at[i] == ~uint64_t(0))
      off = align_up(off, kAlign), lay.at[i] = off, put(c.pieces[i].data, uint64_t(c.pieces[i].slice.count) * 4);
  if (off > loose) lay.regions.push_back({loose, off - loose});
  lay.data_bytes = align_up(off, kPage);  // an image's last block is readable whole (O_DIRECT)
}

// The snapshot's JSON: the pieces (where each lies), the files, the regions, the state and config.
nlohmann::json snapshot_meta(const StateCollector& c, SnapshotLayout& lay, const nlohmann::json& config) {
  nlohmann::json table = nlohmann::json::array();
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    const StatePiece& p = c.pieces[i];
    table.push_back({{"tensor", p.tensor},
                     {"slot", p.slot},
                     {"shape", p.shape},
                     {"begin", p.slice.begin},
                     {"count", p.slice.count},
                     {"offset", lay.at[i]}});
  }
  nlohmann::json region_table = nlohmann::json::array();
  for (const auto& [o, n] : lay.regions) region_table.push_back({o, n});
  return {{"pieces", std::move(table)},
          {"files", std::move(lay.file_table)},
          {"regions", std::move(region_table)},
          {"state", c.json},
          {"config", config}};
}

// A block of kChecksumBlock bytes (less at a region's end): copied and hashed by one thread.
struct CopyBlock {
  uint64_t b0, b1;
};

// Each region in blocks; first_block gets each region's first block (and the total at the end).
std::vector<CopyBlock> checksum_blocks(const std::vector<std::pair<uint64_t, uint64_t>>& regions,
                                       std::vector<size_t>& first_block) {
  std::vector<CopyBlock> blocks;
  for (const auto& [o, n] : regions) {
    first_block.push_back(blocks.size());
    for (uint64_t b = 0; b < n; b += kChecksumBlock)
      blocks.push_back({o + b, o + std::min<uint64_t>(n, b + kChecksumBlock)});
  }
  first_block.push_back(blocks.size());
  return blocks;
}

// Copies blocks [lo, hi) into data from the segments and hashes each while it is in that core's
// cache, on `threads` OpenMP threads.
void copy_and_hash(const std::vector<CopyBlock>& blocks, const std::vector<CopySegment>& segs, uint8_t* data,
                   std::vector<uint64_t>& hashes, int threads, int64_t lo, int64_t hi) {
#pragma omp parallel for schedule(dynamic, 4) num_threads(std::max(1, threads))
  for (int64_t k = lo; k < hi; ++k) {
    const uint64_t b0 = blocks[size_t(k)].b0, b1 = blocks[size_t(k)].b1;
    auto it = std::upper_bound(segs.begin(), segs.end(), b0,
                               [](uint64_t v, const CopySegment& g) { return v < g.dst + g.bytes; });
    for (; it != segs.end() && it->dst < b1; ++it) {
      const uint64_t s0 = std::max(b0, it->dst), s1 = std::min(b1, it->dst + it->bytes);
      std::memcpy(data + s0, it->src + (s0 - it->dst), s1 - s0);
    }
    hashes[size_t(k)] = content_hash(data + b0, b1 - b0);
  }
}

}  // namespace

void FlashSnapshot::write(const SnapshotInfo& info, const StateCollector& c, const nlohmann::json& config, int threads,
                          const std::vector<ShardFile>& files, const std::function<void()>& midway) {
  std::atomic_ref<uint64_t>(header()->complete).store(0, std::memory_order_release);
  SnapshotLayout lay;
  lay_out_snapshot(c, files, lay);
  const uint64_t data_bytes = lay.data_bytes;
  meta_ = snapshot_meta(c, lay, config);
  const size_t meta_size = meta_.dump().size();
  map_size(kDataOffset + data_bytes + meta_size);
  std::vector<size_t> first_block;  // of each region
  const std::vector<CopyBlock> blocks = checksum_blocks(lay.regions, first_block);
  uint8_t* data = map_ + kDataOffset;
  block_hashes_.assign(blocks.size(), 0);
  wrote_ = true;
  const int64_t nb = int64_t(blocks.size());
  copy_and_hash(blocks, lay.segs, data, block_hashes_, threads, 0, nb / 2);
  if (midway) midway();
  copy_and_hash(blocks, lay.segs, data, block_hashes_, threads, nb / 2, nb);
  for (size_t f = 0; f < files.size(); ++f)
    meta_["files"][f]["checksum"] = hex64(tree_checksum_of_blocks(
        std::vector<uint64_t>(block_hashes_.begin() + first_block[f], block_hashes_.begin() + first_block[f + 1])));
  const std::string meta = meta_.dump();
  ZT_ASSERT(meta.size() == meta_size, "the flash snapshot's JSON changed size");
  std::memcpy(data + data_bytes, meta.data(), meta.size());
  Header* h = header();
  std::memcpy(h->magic, kMagic, 8);
  h->step = info.step;
  h->rank = info.rank;
  h->world = info.world;
  h->shard_index = info.shard.index;
  h->shard_count = info.shard.count;
  std::memset(h->save_id, 0, sizeof h->save_id);
  std::memcpy(h->save_id, info.save_id.data(), std::min(info.save_id.size(), sizeof h->save_id - 1));
  h->data_bytes = data_bytes;
  h->meta_bytes = meta.size();
  h->checksum = 0;
  info_ = info;
}

// content_hash of the header's fields (complete and checksum excluded), the JSON, and the block
// hashes of the data's regions (those write() computed, or recomputed when verifying).
uint64_t FlashSnapshot::checksum(const std::vector<uint64_t>& blocks) const {
  const Header* h = header();
  Header fields = *h;
  fields.complete = 0;
  fields.checksum = 0;
  const uint64_t seed =
      content_hash(map_ + kDataOffset + h->data_bytes, h->meta_bytes, content_hash(&fields, sizeof fields));
  return content_hash(blocks.data(), blocks.size() * sizeof(uint64_t), seed);
}

std::vector<uint64_t> FlashSnapshot::hash_blocks() const {
  std::vector<uint64_t> out;
  for (const auto& r : meta_["regions"]) {
    const std::vector<uint64_t> h = block_hashes(map_ + kDataOffset + r[0].get<uint64_t>(), r[1].get<uint64_t>());
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

void FlashSnapshot::seal() {
  if (!wrote_) {  // sealing a snapshot this object did not write (tests): hash it now
    ZT_CHECK(parse_meta(nullptr), "the flash snapshot ", path_, " has no valid JSON to seal");
    block_hashes_ = hash_blocks();
  }
  header()->checksum = checksum(block_hashes_);
  std::atomic_ref<uint64_t>(header()->complete).store(1, std::memory_order_release);
}

bool FlashSnapshot::verify(std::string* why) const {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  struct stat st {};
  ::fstat(fd_, &st);
  const Header* h = header();
  if (st.st_size < off_t(kDataOffset) || std::memcmp(h->magic, kMagic, 8) != 0)
    return no("it holds no snapshot (empty or another format)");
  if (std::atomic_ref<uint64_t>(const_cast<Header*>(h)->complete).load(std::memory_order_acquire) != 1)
    return no("it is incomplete (torn: the process ended while copying it)");
  if (h->data_bytes > uint64_t(st.st_size) || h->meta_bytes > uint64_t(st.st_size) ||
      kDataOffset + h->data_bytes + h->meta_bytes > uint64_t(st.st_size))
    return no("its sizes exceed the file (truncated)");
  if (!const_cast<FlashSnapshot*>(this)->parse_meta(why)) return no("its JSON is damaged");
  if (checksum(hash_blocks()) != h->checksum) return no("its checksum does not match (damaged)");
  return true;
}

bool FlashSnapshot::parse_meta(std::string* why) {
  const Header* h = header();
  meta_ = nlohmann::json::parse(map_ + kDataOffset + h->data_bytes, map_ + kDataOffset + h->data_bytes + h->meta_bytes,
                                nullptr, false);
  // The regions and files are checked here, before the checksum is computed from them.
  auto within = [&](const nlohmann::json& o, const nlohmann::json& n) {
    return o.is_number_unsigned() && n.is_number_unsigned() && o.get<uint64_t>() <= h->data_bytes &&
           n.get<uint64_t>() <= h->data_bytes - o.get<uint64_t>();
  };
  bool ok = !meta_.is_discarded() && meta_.is_object() && meta_.contains("pieces") && meta_.contains("state") &&
            meta_.contains("regions") && meta_["regions"].is_array() && meta_.contains("files") &&
            meta_["files"].is_array();
  for (size_t i = 0; ok && i < meta_["regions"].size(); ++i) {
    const nlohmann::json& r = meta_["regions"][i];
    ok = r.is_array() && r.size() == 2 && within(r[0], r[1]);
  }
  for (size_t i = 0; ok && i < meta_["files"].size(); ++i) {
    const nlohmann::json& f = meta_["files"][i];
    ok = f.is_object() && f.contains("name") && f["name"].is_string() && f.contains("offset") && f.contains("bytes") &&
         within(f["offset"], f["bytes"]) && f["offset"].get<uint64_t>() % kPage == 0 && f.contains("checksum") &&
         f["checksum"].is_string() && f["checksum"].get<std::string>().size() == 16;
  }
  if (!ok) {
    meta_ = nullptr;
    return false;
  }
  info_.step = h->step;
  info_.rank = h->rank;
  info_.world = h->world;
  info_.shard = {h->shard_index, h->shard_count};
  info_.save_id = std::string(h->save_id, strnlen(h->save_id, sizeof h->save_id));
  return true;
}

std::vector<SnapshotFile> FlashSnapshot::files() const {
  std::vector<SnapshotFile> out;
  for (const auto& f : meta_["files"])
    out.push_back({f["name"].get<std::string>(), map_ + kDataOffset + f["offset"].get<uint64_t>(),
                   f["bytes"].get<uint64_t>(), std::stoull(f["checksum"].get<std::string>(), nullptr, 16)});
  return out;
}

std::vector<StatePiece> FlashSnapshot::pieces() const {
  std::vector<StatePiece> out;
  uint8_t* data = map_ + kDataOffset;
  for (const auto& e : meta_["pieces"]) {
    StatePiece p;
    p.tensor = e["tensor"].get<std::string>();
    p.slot = e["slot"].get<std::string>();
    p.shape = e["shape"].get<std::vector<int64_t>>();
    p.slice.begin = e["begin"].get<int64_t>();
    p.slice.count = e["count"].get<int64_t>();
    p.data = reinterpret_cast<float*>(data + e["offset"].get<uint64_t>());
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// Components load from a snapshot of the same layout: each requested slice is assembled from
// the stored pieces of that tensor (normally one piece equal to the slice).
class SnapshotReader final : public StateReader {
 public:
  SnapshotReader(std::vector<StatePiece> pieces, const nlohmann::json* state, std::string source)
      : state_(state), source_(std::move(source)) {
    for (StatePiece& p : pieces) index_[{p.slot, p.tensor}].push_back(std::move(p));
  }
  void get_tensor(const StatePiece& want) override {
    auto it = index_.find({want.slot, want.tensor});
    ZT_CHECK(it != index_.end(), source_, ": no ", want.slot, " of ", quote(want.tensor),
             "; the snapshot belongs to another model or optimizer");
    const int64_t b = want.slice.begin, e = b + want.slice.count;
    int64_t covered = 0;
    for (const StatePiece& s : it->second) {
      ZT_CHECK(s.shape == want.shape, source_, ": ", quote(want.tensor), " has another shape in the snapshot");
      const int64_t lo = std::max(b, s.slice.begin), hi = std::min(e, s.slice.begin + s.slice.count);
      if (lo >= hi) continue;
      std::memcpy(want.data + (lo - b), s.data + (lo - s.slice.begin), size_t(hi - lo) * 4);
      covered += hi - lo;
    }
    ZT_CHECK(covered == want.slice.count, source_, ": the snapshot holds ", covered, " of the ", want.slice.count,
             " values of ", want.slot, " of ", quote(want.tensor), " this rank needs");
  }
  const nlohmann::json* find_json(const std::string& key) const override {
    const nlohmann::json::json_pointer ptr(JsonStateWriter::json_pointer(key));
    return state_->contains(ptr) ? &state_->at(ptr) : nullptr;
  }
  std::string source() const override { return source_; }

 private:
  const nlohmann::json* state_;
  std::string source_;
  std::map<std::pair<std::string, std::string>, std::vector<StatePiece>> index_;
};

}  // namespace

std::unique_ptr<StateReader> FlashSnapshot::reader() const {
  return std::make_unique<SnapshotReader>(pieces(), &meta_["state"], "the flash snapshot " + path_);
}

void FlashSnapshot::unlink() { ::unlink(path_.c_str()); }

}  // namespace zt
