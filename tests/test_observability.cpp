// test_observability.cpp: metrics.jsonl on resume, the TensorBoard event writer and the PNG
// loss plot, the last two read back
// by an independent reader written here (bit-at-a-time CRCs, a generic protobuf field walker,
// a PNG chunk walker and row unfilter; zlib's inflate, not libpng, decompresses), so a shared
// mistake in the writers' tables cannot hide.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "observe/jsonl_log.h"
#include "observe/plot_png.h"
#include "observe/tfevents.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

// A new empty folder per test, removed with everything in it when the test ends.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name)
      : path((fs::temp_directory_path() / ("zt_obs_" + std::to_string(::getpid()) + "_" + name)).string()) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Reflected CRCs one bit at a time: slow, obviously right, and unlike the writers' tables.
uint32_t crc_bitwise(const std::string& s, size_t pos, size_t n, uint32_t poly) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = pos; i < pos + n; ++i) {
    c ^= uint8_t(s[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (poly & (0u - (c & 1)));
  }
  return ~c;
}
constexpr uint32_t kCastagnoli = 0x82F63B78u, kIeee = 0xEDB88320u;

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | uint8_t(s[pos + i]);
  return v;
}
uint32_t be32(const std::string& s, size_t pos) {
  return uint32_t(uint8_t(s[pos])) << 24 | uint32_t(uint8_t(s[pos + 1])) << 16 | uint32_t(uint8_t(s[pos + 2])) << 8 |
         uint8_t(s[pos + 3]);
}

// ---- TFRecord + protobuf reader ----

std::vector<std::string> read_tfrecords(const std::string& file) {
  std::vector<std::string> out;
  auto mask = [](uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; };
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_LE(pos + 12, file.size()) << "truncated record header at " << pos;
    if (pos + 12 > file.size()) break;
    const uint64_t n = le(file, pos, 8);
    EXPECT_EQ(le(file, pos + 8, 4), mask(crc_bitwise(file, pos, 8, kCastagnoli))) << "length CRC at " << pos;
    EXPECT_LE(pos + 12 + n + 4, file.size()) << "truncated record at " << pos;
    if (pos + 12 + n + 4 > file.size()) break;
    EXPECT_EQ(le(file, pos + 12 + n, 4), mask(crc_bitwise(file, pos + 12, n, kCastagnoli))) << "data CRC at " << pos;
    out.push_back(file.substr(pos + 12, n));
    pos += 12 + n + 4;
  }
  return out;
}

struct Field {
  int wire;
  uint64_t num;       // varint, fixed64 or fixed32 payload
  std::string bytes;  // length-delimited payload
};

uint64_t varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; pos < s.size() && shift < 64; shift += 7) {
    const uint8_t b = uint8_t(s[pos++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  ADD_FAILURE() << "bad varint";
  return v;
}

std::multimap<int, Field> decode_message(const std::string& s) {
  std::multimap<int, Field> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = varint(s, pos);
    Field f{int(key & 7), 0, {}};
    if (f.wire == 0) {
      f.num = varint(s, pos);
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      if (pos + n > s.size()) break;
      f.num = le(s, pos, n);
      pos += n;
    } else if (f.wire == 2) {
      const uint64_t n = varint(s, pos);
      if (pos + n > s.size()) break;
      f.bytes = s.substr(pos, n);
      pos += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    out.emplace(int(key >> 3), f);
  }
  EXPECT_EQ(pos, s.size()) << "message does not end on a field boundary";
  return out;
}

struct Scalar {
  std::string tag;
  int64_t step;
  float value;
  double wall_time;
};

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Decodes Events: the first must be the file_version record, every later one a single scalar.
std::vector<Scalar> decode_events(const std::vector<std::string>& records, double t0, double t1) {
  std::vector<Scalar> out;
  EXPECT_FALSE(records.empty());
  for (size_t i = 0; i < records.size(); ++i) {
    auto ev = decode_message(records[i]);
    EXPECT_EQ(ev.count(1), 1u);
    const double wall = as_double(ev.find(1)->second.num);
    EXPECT_GE(wall, t0 - 1);
    EXPECT_LE(wall, t1 + 1);
    if (i == 0) {
      EXPECT_EQ(ev.count(3), 1u);
      EXPECT_EQ(ev.find(3)->second.bytes, "brain.Event:2");
      continue;
    }
    EXPECT_EQ(ev.count(3), 0u);
    EXPECT_EQ(ev.count(2), 1u);
    EXPECT_EQ(ev.count(5), 1u);
    if (!ev.count(5) || !ev.count(2)) continue;
    auto summary = decode_message(ev.find(5)->second.bytes);
    EXPECT_EQ(summary.count(1), 1u);
    auto value = decode_message(summary.find(1)->second.bytes);
    EXPECT_EQ(value.find(2)->second.wire, 5);
    float v;
    uint32_t bits = uint32_t(value.find(2)->second.num);
    std::memcpy(&v, &bits, 4);
    out.push_back({value.find(1)->second.bytes, int64_t(ev.find(2)->second.num), v, wall});
  }
  return out;
}

double now_s() { return double(std::time(nullptr)); }

TEST(TfEvents, Crc32cMatchesPublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);  // chaining
}

TEST(TfEvents, ScalarsReadBackWithValidCrcs) {
  TempDir tmp("tfevents");
  const std::string dir = tmp.path + "/runs/a";  // the writer creates missing folders
  const double t0 = now_s();
  const std::vector<Scalar> want = {{"train/loss", 1, 10.75f, 0},
                                    {"train/learning_rate", 1, 6e-4f, 0},
                                    {"train/grad_norm", 2, 1.5f, 0},
                                    {"eval/loss", 300, 3.25f, 0},
                                    {"train/loss", int64_t(1) << 40, -0.0f, 0},  // multi-byte varint
                                    {"eval/perplexity", 0, std::numeric_limits<float>::infinity(), 0}};
  TfEventsWriter w(dir);
  const std::string name = fs::path(w.path()).filename().string();
  EXPECT_EQ(fs::path(w.path()).parent_path(), fs::path(dir));
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + "."), std::string::npos) << name;
  for (const auto& s : want) w.add_scalar(s.tag, s.step, s.value);
  w.add_scalar("train/loss", 7, std::nan(""));
  w.flush();  // everything must be on disk now, before the writer closes

  const auto got = decode_events(read_tfrecords(read_all(w.path())), t0, now_s());
  ASSERT_EQ(got.size(), want.size() + 1);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tag, want[i].tag);
    EXPECT_EQ(got[i].step, want[i].step);
    EXPECT_EQ(std::memcmp(&got[i].value, &want[i].value, 4), 0) << got[i].value << " vs " << want[i].value;
  }
  EXPECT_TRUE(std::isnan(got.back().value));
  EXPECT_EQ(got.back().step, 7);
}

TEST(TfEvents, WritersNeverShareAFileAndCloseCleanly) {
  TempDir tmp("tfevents2");
  const std::string& dir = tmp.path;
  std::string p1, p2;
  {
    TfEventsWriter a(dir), b(dir);
    p1 = a.path();
    p2 = b.path();
    a.add_scalar("x", 1, 1.0);
    b.add_scalar("y", 2, 2.0);
  }  // destructors flush
  EXPECT_NE(p1, p2);
  auto ga = decode_events(read_tfrecords(read_all(p1)), 0, 1e12);
  auto gb = decode_events(read_tfrecords(read_all(p2)), 0, 1e12);
  ASSERT_EQ(ga.size(), 1u);
  ASSERT_EQ(gb.size(), 1u);
  EXPECT_EQ(ga[0].tag, "x");
  EXPECT_EQ(gb[0].tag, "y");
}

TEST(TfEvents, UnwritableFolderIsAnError) {
  TempDir tmp("tfevents3");
  const std::string file = tmp.path + "/plain_file";
  std::ofstream(file) << "x";
  EXPECT_THROW(TfEventsWriter w(file + "/logs"), Error);
}

// ---- PNG reader ----

struct Image {
  int w = 0, h = 0;
  std::string rgb;  // (h, w, 3)
  const uint8_t* at(int x, int y) const { return reinterpret_cast<const uint8_t*>(&rgb[(size_t(y) * w + x) * 3]); }
};

// Inflates a zlib stream with zlib's own inflate (which checks the Adler-32), after checking the header.
std::string inflate_zlib(const std::string& z, size_t expected) {
  EXPECT_GE(z.size(), 6u);
  if (z.size() < 6) return {};
  EXPECT_EQ(uint8_t(z[0]) & 0x0F, 8) << "CM must be deflate";
  EXPECT_EQ((uint8_t(z[0]) * 256 + uint8_t(z[1])) % 31, 0) << "FCHECK";
  EXPECT_EQ(uint8_t(z[1]) & 0x20, 0) << "no preset dictionary";
  std::string out(expected + 1, '\0');  // one byte more: a longer stream shows as a size mismatch
  uLongf n = uLongf(out.size());
  const int rc =
      uncompress(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(z.data()), uLong(z.size()));
  EXPECT_EQ(rc, Z_OK) << "inflate";
  out.resize(rc == Z_OK ? size_t(n) : 0);
  return out;
}

// Undoes the PNG row filters (None, Sub, Up, Average, Paeth) of 8-bit RGB rows in place.
void unfilter_rows(const std::string& raw, int w, int h, std::string* rgb) {
  const size_t stride = size_t(w) * 3;
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  for (int y = 0; y < h; ++y) {
    const uint8_t type = uint8_t(raw[y * (stride + 1)]);
    EXPECT_LE(type, 4) << "row " << y << " filter";
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 3 ? cur[i - 3] : 0, b = prev[i], c = i >= 3 ? prev[i - 3] : 0;
      int pred = 0;
      if (type == 1) pred = a;
      if (type == 2) pred = b;
      if (type == 3) pred = (a + b) / 2;
      if (type == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = uint8_t(uint8_t(raw[y * (stride + 1) + 1 + i]) + pred);
    }
    rgb->append(reinterpret_cast<const char*>(cur.data()), stride);
    std::swap(prev, cur);
  }
}

Image read_png(const std::string& path) {
  const std::string f = read_all(path);
  Image im;
  EXPECT_EQ(f.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  std::vector<std::string> types;
  for (size_t pos = 8; pos + 12 <= f.size();) {
    const uint32_t n = be32(f, pos);
    const std::string type = f.substr(pos + 4, 4);
    EXPECT_LE(pos + 12 + n, f.size());
    EXPECT_EQ(be32(f, pos + 8 + n), crc_bitwise(f, pos + 4, 4 + n, kIeee)) << type << " CRC";
    if (type == "IHDR") {
      im.w = int(be32(f, pos + 8));
      im.h = int(be32(f, pos + 12));
      EXPECT_EQ(f.substr(pos + 16, 5), std::string("\x08\x02\x00\x00\x00", 5));  // 8-bit RGB, no interlace
    }
    if (type == "IDAT") idat += f.substr(pos + 8, n);
    types.push_back(type);
    pos += 12 + n;
  }
  EXPECT_GE(types.size(), 3u);
  EXPECT_EQ(types.front(), "IHDR");
  EXPECT_EQ(types.back(), "IEND");
  const size_t stride = 1 + size_t(im.w) * 3;
  const std::string raw = inflate_zlib(idat, stride * im.h);
  EXPECT_EQ(raw.size(), stride * im.h);
  if (raw.size() != stride * im.h) return im;
  unfilter_rows(raw, im.w, im.h, &im.rgb);
  return im;
}

bool is_white(const uint8_t* p) { return p[0] == 255 && p[1] == 255 && p[2] == 255; }

// Pixels whose colour is within `tol` of `rgb` per channel.
int count_near(const Image& im, uint32_t rgb, int tol) {
  int n = 0;
  for (int y = 0; y < im.h; ++y)
    for (int x = 0; x < im.w; ++x) {
      const uint8_t* p = im.at(x, y);
      n += std::abs(p[0] - int(rgb >> 16 & 255)) <= tol && std::abs(p[1] - int(rgb >> 8 & 255)) <= tol &&
           std::abs(p[2] - int(rgb & 255)) <= tol;
    }
  return n;
}

void expect_white_corners(const Image& im) {
  ASSERT_GT(im.w, 0);
  for (auto [x, y] : {std::pair{0, 0}, {im.w - 1, 0}, {0, im.h - 1}, {im.w - 1, im.h - 1}})
    EXPECT_TRUE(is_white(im.at(x, y))) << "corner " << x << "," << y;
}

TEST(PlotPng, LossCurvesDecodeAndShowTheirLines) {
  TempDir tmp("png");
  const std::string path = tmp.path + "/loss.png";
  PlotSeries train{"train/loss", {}, 0x1f77b4}, eval{"eval/loss", {}, 0xd62728};
  for (int s = 1; s <= 500; ++s) train.points.push_back({double(s), 2.0 + 9.0 * std::exp(-s / 80.0)});
  train.points.push_back({501, std::numeric_limits<double>::quiet_NaN()});
  train.points.push_back({502, std::numeric_limits<double>::infinity()});
  for (int s = 100; s <= 500; s += 100) eval.points.push_back({double(s), 2.2 + 9.0 * std::exp(-s / 80.0)});
  write_loss_plot(path, {train, eval}, "gpt2 tiny: loss");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const Image im = read_png(path);
  EXPECT_EQ(im.w, 900);
  EXPECT_EQ(im.h, 500);
  EXPECT_LT(fs::file_size(path), 100u << 10) << "compressed (1.3 MiB raw)";
  expect_white_corners(im);
  EXPECT_GT(count_near(im, 0x1f77b4, 8), 1000);  // a 2 px line across the plot
  EXPECT_GT(count_near(im, 0xd62728, 8), 200);   // markers + segments
  EXPECT_GT(count_near(im, 0x202020, 8), 300);   // text
}

TEST(PlotPng, DegenerateInputsStillGiveValidImages) {
  TempDir tmp("png2");
  const std::string& dir = tmp.path;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<PlotSeries>> cases = {
      {},                                                    // no series
      {{"empty", {}, 0x2ca02c}},                             // a series without points
      {{"one", {{5, 2.5}}, 0x2ca02c}},                       // a single point
      {{"flat", {{1, 3.0}, {2, 3.0}, {3, 3.0}}, 0x2ca02c}},  // zero y-range
      {{"zero", {{0, 0.0}, {0, 0.0}}, 0x2ca02c}},            // zero x- and y-range at 0
      {{"nan", {{1, nan}, {nan, 2.0}, {2, -std::numeric_limits<double>::infinity()}}, 0x2ca02c}},
      {{"huge", {{1, -1e308}, {2, 1e308}}, 0x2ca02c}},  // range overflows a double
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string path = dir + "/case" + std::to_string(i) + ".png";
    write_loss_plot(path, cases[i], "case " + std::to_string(i));
    const Image im = read_png(path);
    EXPECT_EQ(im.w, 900);
    EXPECT_EQ(im.h, 500);
    expect_white_corners(im);
    if (i == 2 || i == 3) {
      EXPECT_GT(count_near(im, 0x2ca02c, 8), 30);  // the point / flat line shows
    }
  }
}

TEST(PlotPng, UnwritablePathIsAnError) {
  TempDir tmp("png3");
  const std::string file = tmp.path + "/plain_file";
  std::ofstream(file) << "x";
  EXPECT_THROW(write_loss_plot(file + "/plot.png", {}, "t"), Error);
}

// Resume keeps lines through the checkpoint's step, drops a torn last line (a crash mid-write),
// names a damaged line by number, and appends after the kept lines.
TEST(JsonlLog, ResumeKeepsThroughStepAndNamesDamagedLines) {
  TempDir d("jsonl");
  const std::string p = d.path + "/metrics.jsonl";
  std::ofstream(p) << "{\"step\": 1}\n{\"step\": 2, \"eval_loss\": 1}\n{\"step\": 3}\n{\"step\": 4";
  EXPECT_EQ(jsonl_lines_through(p, 2).size(), 2u);
  EXPECT_EQ(jsonl_lines_through(p, 9).size(), 3u);  // the unterminated step 4 is dropped
  {
    JsonlLog log(p, 2);
    log.append("{\"step\": 3}");
  }
  EXPECT_EQ(read_all(p), "{\"step\": 1}\n{\"step\": 2, \"eval_loss\": 1}\n{\"step\": 3}\n");
  std::ofstream(p) << "{\"step\": 1}\n[1, 2]\n";
  try {
    jsonl_lines_through(p, 9);
    ADD_FAILURE() << "a damaged line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl line 2 is damaged"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(jsonl_lines_through(d.path + "/none.jsonl", 9).empty());
}

}  // namespace
}  // namespace zt
