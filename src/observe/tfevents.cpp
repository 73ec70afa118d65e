// tfevents.cpp: see tfevents.h. Protobuf wire format used here: a key is (field << 3 | wire
// type) as a varint; wire type 0 = varint, 1 = 8 bytes little-endian, 2 = varint length +
// bytes, 5 = 4 bytes little-endian.
#include "observe/tfevents.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace zt {
namespace {

// Table-driven, one byte at a time: event records are tens of bytes, so neither SSE4.2 nor
// slicing-by-8 would be measurable next to a training step.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

const std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field << 3 | wire_type)); }

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double_field(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char b[256] = {};
  if (::gethostname(b, sizeof b - 1) != 0 || b[0] == 0) return "localhost";
  return b;
}

// Numbers the writers of this process, like TensorBoard's own writers do, so two writers opened
// in the same second into the same folder never share a file.
std::atomic<int> g_writer_count{0};

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t crc32c_masked(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TfEventsWriter::TfEventsWriter(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  ZT_CHECK(!ec, "cannot create the TensorBoard folder ", logdir, ": ", ec.message(),
           " (check that the folder is writable)");
  const long long secs = (long long)std::time(nullptr);
  const std::string stem = logdir + "/events.out.tfevents." + std::to_string(secs) + "." + host_name() + "." +
                           std::to_string(::getpid()) + ".";
  // "x": never truncate an existing log (say, a restart in the same second that reused the pid).
  for (int tries = 0; tries < 1000 && !file_; ++tries) {
    path_ = stem + std::to_string(g_writer_count.fetch_add(1));
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST) break;
  }
  ZT_CHECK(file_, "cannot create the TensorBoard event file ", path_, ": ", std::strerror(errno),
           " (check that the folder is writable)");
  std::string ev;
  put_double_field(ev, 1, now_seconds());
  put_bytes_field(ev, 3, "brain.Event:2");
  write_record(ev);
  flush();
}

TfEventsWriter::~TfEventsWriter() {
  if (file_) std::fclose(file_);  // fclose flushes
}

void TfEventsWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  float v = float(value);
  uint32_t vbits;
  std::memcpy(&vbits, &v, 4);
  std::string val;  // Summary.Value { string tag = 1; float simple_value = 2; }
  put_bytes_field(val, 1, tag);
  put_key(val, 2, 5);
  put_le(val, vbits, 4);
  std::string summary;  // Summary { repeated Value value = 1; }
  put_bytes_field(summary, 1, val);
  std::string ev;  // Event { double wall_time = 1; int64 step = 2; Summary summary = 5; }
  put_double_field(ev, 1, now_seconds());
  put_key(ev, 2, 0);
  put_varint(ev, uint64_t(step));  // int64 is a plain varint: negatives take 10 bytes
  put_bytes_field(ev, 5, summary);
  write_record(ev);
}

void TfEventsWriter::write_record(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  put_le(rec, data.size(), 8);
  put_le(rec, crc32c_masked(rec.data(), 8), 4);
  rec += data;
  put_le(rec, crc32c_masked(data.data(), data.size()), 4);
  ZT_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(), "cannot write the TensorBoard event file ",
           path_, ": ", std::strerror(errno), " (is the disk full?)");
}

void TfEventsWriter::flush() {
  ZT_CHECK(std::fflush(file_) == 0, "cannot write the TensorBoard event file ", path_, ": ", std::strerror(errno),
           " (is the disk full?)");
}

}  // namespace zt
