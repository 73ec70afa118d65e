// test_flash.cpp: flash snapshots (checkpoint/flash_snapshot.h) without a trainer: a snapshot
// round-trips pieces and JSON, components read slices of it in any split, and an unsealed
// (torn), damaged or foreign file is refused with the reason the restart prints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "checkpoint/flash_snapshot.h"
#include "core/content_hash.h"
#include "core/file_io.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

class FlashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zt_flash_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "snap").string();
    a_.resize(1000);
    b_.resize(77);
    std::iota(a_.begin(), a_.end(), 1.0f);
    std::iota(b_.begin(), b_.end(), -5.0f);
    // a: elements [200, 1200) of a 10x120 tensor; b: all of a 77-element optimizer slot.
    c_.put_tensor({"w", {10, 120}, "params", {200, 1000}, a_.data()});
    c_.put_tensor({"w", {77}, "exp_avg", {0, 77}, b_.data()});
    c_.put_json("ztrain.step", 12);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_sealed(FlashSnapshot& s) {
    s.reserve(8192);
    s.write({12, "abc", 0, 1, {0, 1}}, c_, {{"n_embd", 8}}, 2);
    s.seal();
  }

  fs::path dir_;
  std::string path_;
  std::vector<float> a_, b_;
  StateCollector c_;
};

TEST_F(FlashTest, RoundTripsAndReadsSlices) {
  {
    FlashSnapshot s(path_);
    write_sealed(s);
  }
  FlashSnapshot s(path_);  // as a restarted process opens it
  std::string why;
  ASSERT_TRUE(s.verify(&why)) << why;
  EXPECT_EQ(s.info().step, 12);
  EXPECT_EQ(s.info().save_id, "abc");
  EXPECT_EQ(s.config()["n_embd"], 8);
  auto r = s.reader();
  EXPECT_EQ(r->get_int("ztrain.step"), 12);
  std::vector<float> got(300);
  r->get_tensor({"w", {10, 120}, "params", {500, 300}, got.data()});  // a slice inside the piece
  EXPECT_EQ(0, std::memcmp(got.data(), a_.data() + 300, 300 * 4));
  std::vector<float> slot(77);
  r->get_tensor({"w", {77}, "exp_avg", {0, 77}, slot.data()});
  EXPECT_EQ(slot, b_);
  std::vector<float> outside(10);
  EXPECT_THROW(r->get_tensor({"w", {10, 120}, "params", {0, 10}, outside.data()}), Error);
  ASSERT_EQ(s.pieces().size(), 2u);
  EXPECT_EQ(s.pieces()[0].slice.begin, 200);
}

TEST_F(FlashTest, TornDamagedAndEmptyAreRefused) {
  std::string why;
  {
    FlashSnapshot s(path_);
    EXPECT_FALSE(s.verify(&why));
    EXPECT_NE(why.find("no snapshot"), std::string::npos) << why;
    write_sealed(s);
    // A second save killed mid-copy: the complete mark was cleared first.
    s.write({24, "def", 0, 1, {0, 1}}, c_, {{"n_embd", 8}}, 1, {}, [] {});
  }
  {
    FlashSnapshot s(path_);
    EXPECT_FALSE(s.verify(&why));
    EXPECT_NE(why.find("incomplete (torn"), std::string::npos) << why;
    s.seal();
    EXPECT_TRUE(s.verify(&why)) << why;
    EXPECT_EQ(s.info().step, 24);
  }
  {  // one flipped bit in the data
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 40);
    f.put(char(0x55));
  }
  FlashSnapshot s(path_);
  EXPECT_FALSE(s.verify(&why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
}

// Issue 21: a byte flipped anywhere in a snapshot is detected before it is used. Every position
// of the file is flipped in turn (a stride that visits the header, the data and the JSON): the
// snapshot either fails verification, or the byte was one nothing reads (alignment padding), and
// then everything a restart reads from it is exactly what was written.
TEST_F(FlashTest, AByteFlippedAnywhereIsDetectedBeforeUse) {
  {
    FlashSnapshot s(path_);
    write_sealed(s);
  }
  const uint64_t size = fs::file_size(path_);
  int detected = 0, unused = 0;
  // Densely over the part that holds anything (the 4 KiB header, the data reserved at 8 KiB, the
  // JSON after it), then sparsely over the rest of the mapping.
  for (uint64_t pos = 0; pos < size; pos += pos < 24576 ? 11 : 4099) {
    char orig = 0;
    {
      std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(std::streamoff(pos));
      f.get(orig);
      f.seekp(std::streamoff(pos));
      f.put(char(orig ^ 0x5a));
    }
    {
      FlashSnapshot s(path_);
      std::string why;
      if (!s.verify(&why)) {
        ++detected;
      } else {  // nothing read changed
        ++unused;
        EXPECT_EQ(s.info().step, 12) << "byte " << pos;
        EXPECT_EQ(s.info().save_id, "abc") << "byte " << pos;
        EXPECT_EQ(s.config()["n_embd"], 8) << "byte " << pos;
        const auto r = s.reader();
        EXPECT_EQ(r->get_int("ztrain.step"), 12) << "byte " << pos;
        std::vector<float> got(1000), slot(77);
        r->get_tensor({"w", {10, 120}, "params", {200, 1000}, got.data()});
        r->get_tensor({"w", {77}, "exp_avg", {0, 77}, slot.data()});
        EXPECT_EQ(got, a_) << "byte " << pos;
        EXPECT_EQ(slot, b_) << "byte " << pos;
      }
    }
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(pos));
    f.put(orig);
  }
  EXPECT_GT(detected, 0);
  std::printf("%d flips detected, %d in bytes nothing reads (file of %llu bytes)\n", detected, unused,
              (unsigned long long)size);
}

// A shard owner's checkpoint files are laid out in the snapshot as they will be on disk: each
// image is its planned header and pieces, 4096-byte aligned, with the tree checksum of its bytes,
// and written from there it reads back byte for byte.
TEST_F(FlashTest, HoldsTheCheckpointFilesImages) {
  StateCollector c;
  std::vector<float> w(3000), m(3000);
  std::iota(w.begin(), w.end(), 0.5f);
  std::iota(m.begin(), m.end(), -7.0f);
  c.put_tensor({"wte", {3000}, "params", {0, 3000}, w.data()});   // whole: model.safetensors
  c.put_tensor({"wte", {3000}, "exp_avg", {0, 3000}, m.data()});  // the state file
  c.put_tensor({"wpe", {6000}, "params", {100, 50}, w.data()});   // a slice: the state file
  const std::vector<ShardFile> plan = checkpoint_shard_files({0, 1}, c.pieces, "abc", ModelConfig{});
  ASSERT_EQ(plan.size(), 2u);
  FlashSnapshot s(path_);
  s.reserve(1 << 16);
  s.write({3, "abc", 0, 1, {0, 1}}, c, {{"n_embd", 8}}, 2, plan);
  s.seal();
  const std::vector<SnapshotFile> files = s.files();
  ASSERT_EQ(files.size(), 2u);
  for (size_t i = 0; i < files.size(); ++i) {
    std::string want = safetensors_header(plan[i].tensors, DType::f32, plan[i].metadata);
    for (size_t k : plan[i].pieces)
      want.append(reinterpret_cast<const char*>(c.pieces[k].data), size_t(c.pieces[k].slice.count) * 4);
    EXPECT_EQ(files[i].name, plan[i].name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(files[i].image) % 4096, 0u);
    ASSERT_EQ(files[i].bytes, want.size());
    EXPECT_EQ(0, std::memcmp(files[i].image, want.data(), want.size())) << files[i].name;
    EXPECT_EQ(files[i].checksum, tree_checksum(want.data(), want.size()));
    const std::string out = (dir_ / files[i].name).string();
    const FileDigest d = write_image_file(out, files[i].image, files[i].bytes, files[i].checksum);
    std::ifstream f(out, std::ios::binary);
    const std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(back == want) << files[i].name;
    EXPECT_EQ(checkpoint_file_digest(out), std::make_pair(d.hash, uint64_t(want.size())));
  }
  // The pieces read back from their places inside the images.
  FlashSnapshot again(path_);
  std::string why;
  ASSERT_TRUE(again.verify(&why)) << why;
  std::vector<float> got(50);
  again.reader()->get_tensor({"wpe", {6000}, "params", {100, 50}, got.data()});
  EXPECT_EQ(0, std::memcmp(got.data(), w.data(), 50 * 4));
}

// The name holds the output folder (hashed), the run and the rank: a fork (its own run id) and a
// copied folder (the same run id elsewhere) never share a snapshot with their origin.
TEST_F(FlashTest, PathNamesFolderRunAndRank) {
  ::setenv("ZT_FLASH_DIR", dir_.c_str(), 1);
  const std::string p = FlashSnapshot::path_for("out", "0123abcd", 3);
  EXPECT_EQ(p.rfind((dir_ / "ztrain-").string(), 0), 0u) << p;
  EXPECT_NE(p.find("-0123abcd-r3"), std::string::npos) << p;
  EXPECT_EQ(p, FlashSnapshot::path_for("./out/", "0123abcd", 3));  // the same folder, spelled otherwise
  EXPECT_NE(p, FlashSnapshot::path_for("out2", "0123abcd", 3));
  EXPECT_NE(p, FlashSnapshot::path_for("out", "0123abce", 3));
  ::unsetenv("ZT_FLASH_DIR");
  EXPECT_EQ(FlashSnapshot::path_for("x", "y", 0).rfind("/dev/shm/ztrain-", 0), 0u);
}

}  // namespace
}  // namespace zt
