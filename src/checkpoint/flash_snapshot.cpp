// flash_snapshot.cpp: see flash_snapshot.h.
#include "checkpoint/flash_snapshot.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/hash.h"

namespace zt {
namespace {

constexpr uint64_t kDataOffset = 4096;
constexpr uint64_t kAlign = 64;
constexpr char kMagic[8] = {'Z', 'T', 'F', 'L', 'A', 'S', 'H', '1'};

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
  uint64_t checksum;    // over the fields above it (complete excluded), the data and the JSON
};

void StateCollector::put_tensor(const StatePiece& p) {
  ZT_ASSERT(p.slice.dim < 0 && p.dtype == DType::f32, "flash snapshots hold fp32 element ranges (", p.tensor, ")");
  pieces.push_back(p);
}

void StateCollector::put_json(const std::string& key, const nlohmann::json& value) {
  JsonStateWriter(&json).put_json(key, value);
}

std::string FlashSnapshot::path_for(const std::string& run_id, int rank) {
  const char* dir = std::getenv("ZT_FLASH_DIR");
  return str_cat(dir && *dir ? dir : "/dev/shm", "/ztrain-", run_id, "-r", rank);
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
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT, 0600);
  ZT_CHECK(fd_ >= 0, "cannot open the flash snapshot ", path_, ": ", std::strerror(errno),
           "; check that /dev/shm is writable, or run without --flash_checkpoint");
  struct stat st {};
  ::fstat(fd_, &st);
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

void FlashSnapshot::write(const SnapshotInfo& info, const StateCollector& c, const nlohmann::json& config, int threads,
                          const std::function<void()>& midway) {
  std::atomic_ref<uint64_t>(header()->complete).store(0, std::memory_order_release);
  nlohmann::json table = nlohmann::json::array();
  uint64_t off = 0;
  for (const StatePiece& p : c.pieces) {
    table.push_back({{"tensor", p.tensor},
                     {"slot", p.slot},
                     {"shape", p.shape},
                     {"begin", p.slice.begin},
                     {"count", p.slice.count},
                     {"offset", off}});
    off = align_up(off + uint64_t(p.slice.count) * 4, kAlign);
  }
  const uint64_t data_bytes = off;
  meta_ = {{"pieces", std::move(table)}, {"state", c.json}, {"config", config}};
  const std::string meta = meta_.dump();
  map_size(kDataOffset + data_bytes + meta.size());
  // Chunks of at most 4 MiB, copied by the OpenMP threads (one thread's memcpy is far from
  // the memory bandwidth); the hook runs between the two halves.
  struct Chunk {
    const uint8_t* src;
    uint64_t dst, bytes;
  };
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    const uint64_t bytes = uint64_t(c.pieces[i].slice.count) * 4, dst = meta_["pieces"][i]["offset"].get<uint64_t>();
    for (uint64_t b = 0; b < bytes; b += 4u << 20)
      chunks.push_back(
          {reinterpret_cast<const uint8_t*>(c.pieces[i].data) + b, dst + b, std::min<uint64_t>(4u << 20, bytes - b)});
  }
  uint8_t* data = map_ + kDataOffset;
  auto copy = [&](size_t lo, size_t hi) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, threads))
    for (int64_t k = int64_t(lo); k < int64_t(hi); ++k)
      std::memcpy(data + chunks[k].dst, chunks[k].src, chunks[k].bytes);
  };
  copy(0, chunks.size() / 2);
  if (midway) midway();
  copy(chunks.size() / 2, chunks.size());
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

uint64_t FlashSnapshot::checksum() const {
  const Header* h = header();
  Header fields = *h;
  fields.complete = 0;
  fields.checksum = 0;
  return hash64(map_ + kDataOffset, h->data_bytes + h->meta_bytes, hash64(&fields, sizeof fields));
}

void FlashSnapshot::seal() {
  header()->checksum = checksum();
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
  if (checksum() != h->checksum) return no("its checksum does not match (damaged)");
  const_cast<FlashSnapshot*>(this)->parse_meta(why);
  return !meta_.is_null() || no("its JSON is damaged");
}

bool FlashSnapshot::parse_meta(std::string* why) {
  const Header* h = header();
  meta_ = nlohmann::json::parse(map_ + kDataOffset + h->data_bytes, map_ + kDataOffset + h->data_bytes + h->meta_bytes,
                                nullptr, false);
  if (meta_.is_discarded() || !meta_.is_object() || !meta_.contains("pieces") || !meta_.contains("state")) {
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
