// test_data.cpp: the data loader: its order equals the window sampler's, any split of a
// step over ranks and micro-batches covers exactly the sequences of one process with the
// same global batch, a loader started at step s continues the exact sequence (resume),
// packing positions restart after EOS, many loaders alive at once each deliver their own
// order and stop their threads; a token file cut or rewritten while mapped is an error
// naming it (from the loader thread, or the SIGBUS handler apps/ installs).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/shard_format.h"
#include "data/token_data.h"
#include "signals.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

std::string token_file(int n, int vocab) {
  std::string p = (fs::temp_directory_path() / ("zt_data_" + std::to_string(n) + ".bin")).string();
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = uint16_t((i * 7919 + 13) % vocab);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 2));
  return p;
}

// All sequences (rows of inputs) a configuration sees in one step, sorted.
std::vector<std::vector<int32_t>> step_rows(const TokenFile& f, LoaderConfig c, int64_t step) {
  std::vector<std::vector<int32_t>> rows;
  for (int r = 0; r < c.world; ++r) {
    c.rank = r;
    DataLoader dl(f, c, step);
    for (int m = 0; m < c.accumulation; ++m) {
      const MicroBatch& mb = dl.next();
      EXPECT_EQ(mb.step, step);
      EXPECT_EQ(mb.micro, m);
      for (int b = 0; b < c.B; ++b) rows.emplace_back(mb.inputs.begin() + b * c.T, mb.inputs.begin() + (b + 1) * c.T);
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

TEST(DataLoader, FollowsTheSamplerInOrder) {
  TokenFile f(token_file(5000, 1000), 1000);
  LoaderConfig c;
  c.B = 3;
  c.T = 16;
  c.accumulation = 2;
  c.shuffle = true;
  c.seed = 7;
  DataLoader dl(f, c, 0);
  WindowSampler s(f, c.T, true, 7);
  std::vector<int32_t> in(size_t(c.B * c.T)), tg(in.size());
  for (int64_t k = 0; k < 200; ++k) {  // several epochs: 5000/16 = 312 windows, 6 per step
    const MicroBatch& mb = dl.next();
    s.fill(in.data(), tg.data(), k * c.B, c.B);
    ASSERT_EQ(mb.inputs, in) << k;
    ASSERT_EQ(mb.targets, tg) << k;
  }
  EXPECT_GE(dl.wait_seconds(), 0.0);
}

TEST(DataLoader, RanksAndMicroBatchesSplitTheSameGlobalBatch) {
  TokenFile f(token_file(20000, 3000), 3000);
  LoaderConfig one;
  one.B = 2;
  one.T = 8;
  one.accumulation = 8;  // 16 sequences per step in one process
  one.seed = 3;
  for (int64_t step : {0, 5, 77}) {
    auto ref = step_rows(f, one, step);
    for (auto [world, accum, B] : {std::tuple{2, 4, 2}, {4, 2, 2}, {4, 1, 4}, {2, 1, 8}}) {
      LoaderConfig c = one;
      c.world = world;
      c.accumulation = accum;
      c.B = B;
      EXPECT_EQ(step_rows(f, c, step), ref) << "world " << world << " accum " << accum << " B " << B;
    }
  }
  // And rank r's micro m is the single process's micro m*world + r, so the grouping is too.
  LoaderConfig c = one;
  c.world = 2;
  c.accumulation = 4;
  c.rank = 1;
  EXPECT_EQ(DataLoader::first_sequence(c, 3, 2), DataLoader::first_sequence(one, 3, 5));
}

TEST(DataLoader, StartingAtAStepContinuesTheSameStream) {
  TokenFile f(token_file(9000, 500), 500);
  LoaderConfig c;
  c.B = 4;
  c.T = 10;
  c.accumulation = 3;
  c.seed = 11;
  DataLoader full(f, c, 0);
  std::vector<std::vector<int32_t>> stream;
  for (int k = 0; k < 60; ++k) stream.push_back(full.next().inputs);
  DataLoader resumed(f, c, 9);  // step 9 = micro-batch 27
  for (int k = 27; k < 60; ++k) ASSERT_EQ(resumed.next().inputs, stream[size_t(k)]) << k;
}

TEST(DataLoader, PackingPositionsRestartAfterEos) {
  const int32_t eos = 9;
  std::vector<int32_t> in = {5, 6, 9, 1, 2, 3, 9, 9,   // row 0
                             1, 1, 1, 1, 9, 4, 4, 4};  // row 1
  std::vector<int32_t> pos(in.size());
  packing_positions(pos.data(), in.data(), 2, 8, eos);
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 0, 1, 2}));

  // Through the loader: positions come with every micro-batch when packing is on.
  TokenFile f(token_file(4000, 50), 50);
  LoaderConfig c;
  c.B = 2;
  c.T = 32;
  c.packing = true;
  c.eos_id = 7;
  c.shuffle = false;
  DataLoader dl(f, c, 0);
  const MicroBatch& mb = dl.next();
  ASSERT_NE(mb.pos(), nullptr);
  std::vector<int32_t> expect(mb.inputs.size());
  packing_positions(expect.data(), mb.inputs.data(), c.B, c.T, c.eos_id);
  EXPECT_EQ(mb.positions, expect);
}

// Threads of this process, from the kernel's count.
int process_threads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// Fifty loaders alive at once, with different seeds, first steps, ring depths and rank splits:
// each runs its own producer thread, each delivers exactly the sampler's sequences for its
// (seed, step), and destroying them in any state (never read, ring full; read mid-stream) stops
// and joins every thread. A destructor that deadlocked would hang here (ctest's timeout catches it).
TEST(DataLoader, ManyLoadersStartAndStopCleanly) {
  TokenFile f(token_file(3000, 100), 100);
  const int threads_before = process_threads();
  ASSERT_GT(threads_before, 0);
  const int n = 50;
  std::vector<LoaderConfig> cs(n);
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int i = 0; i < n; ++i) {
    LoaderConfig& c = cs[size_t(i)];
    c.B = 1 + i % 3;
    c.T = 4 + i % 5;
    c.accumulation = 1 + i % 2;
    c.world = 1 + i % 4;
    c.rank = i % c.world;
    c.shuffle = i % 5 != 0;
    c.seed = uint64_t(i);
    c.depth = 1 + i % 4;
    loaders.push_back(std::make_unique<DataLoader>(f, c, int64_t(i) * 3));
  }
  EXPECT_EQ(process_threads(), threads_before + n) << "one producer thread per loader";
  // Interleaved reads: loaders i % 3 == 0 are never read (their producers block on a full ring).
  for (int k = 0; k < 7; ++k) {
    for (int i = 0; i < n; ++i) {
      if (i % 3 == 0 || k > i % 7) continue;
      const LoaderConfig& c = cs[size_t(i)];
      const int64_t step = int64_t(i) * 3 + k / c.accumulation;
      const int micro = k % c.accumulation;
      WindowSampler s(f, c.T, c.shuffle, c.seed);
      std::vector<int32_t> in(size_t(c.B * c.T)), tg(in.size());
      s.fill(in.data(), tg.data(), DataLoader::first_sequence(c, step, micro), c.B);
      const MicroBatch& mb = loaders[size_t(i)]->next();
      ASSERT_EQ(mb.step, step) << "loader " << i << " read " << k;
      ASSERT_EQ(mb.micro, micro) << "loader " << i << " read " << k;
      ASSERT_EQ(mb.inputs, in) << "loader " << i << " read " << k;
      ASSERT_EQ(mb.targets, tg) << "loader " << i << " read " << k;
    }
  }
  // Destroy in an order unrelated to creation.
  for (int i = 0; i < n; ++i) loaders[size_t((i * 17) % n)].reset();
  // join() returns once the thread has exited, but the kernel removes the finished task from
  // /proc a moment later, so the count is polled; a leaked thread would never go away.
  int threads_after = process_threads();
  for (int tries = 0; tries < 10000 && threads_after != threads_before; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    threads_after = process_threads();
  }
  EXPECT_EQ(threads_after, threads_before);
}

// Truncated under a running loader: next() rethrows the producer thread's error naming the file.
TEST(DataLoader, TruncatedFileIsAnErrorNamingIt) {
  const std::string p = token_file(20000, 100);
  TokenFile f(p, 100);
  LoaderConfig c;
  c.B = 2;
  c.T = 16;
  c.depth = 2;
  // Cut before the loader's thread starts: its check before the first batch must see it. (Cut
  // while the thread runs, a read could land between its check and the cut: SIGBUS, which only
  // the apps/ handler turns into a message; that path has its own death test below.)
  ASSERT_EQ(::truncate(p.c_str(), 100), 0);
  DataLoader dl(f, c, 0);
  try {
    for (int i = 0; i < 10; ++i) dl.next();
    ADD_FAILURE() << "a truncated token file went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p + " changed while it was being read (truncated"), std::string::npos)
        << e.what();
  }
  fs::remove(p);
}

// Issue 21 item 1, token files: a byte flipped anywhere in a shard `ztrain tokenize` wrote (header,
// tokens, checksum table) is an Error naming the file when it is opened.
TEST(TokenFile, ShardChecksumsCatchAFlippedByteAnywhere) {
  for (uint32_t vocab : {1000u, 70000u}) {  // 2- and 4-byte tokens
    const std::string p = (fs::temp_directory_path() / ("zt_shard_" + std::to_string(::getpid()) + ".bin")).string();
    {
      ShardWriter w(p, vocab, 0);
      std::vector<int32_t> ids(30000);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % vocab);
      w.append(ids.data(), ids.size());
      w.close();
    }
    std::string good;
    {
      std::ifstream in(p, std::ios::binary);
      good.assign(std::istreambuf_iterator<char>(in), {});
    }
    { TokenFile ok(p, int(vocab)); }  // intact
    const size_t data_end = 64 + 30000 * (vocab > 65536 ? 4 : 2);
    for (size_t pos : {size_t(1), size_t(7), size_t(8), size_t(13), size_t(17), size_t(25), size_t(29), size_t(32),
                       size_t(37), size_t(41), size_t(50), size_t(58), size_t(64), size_t(64 + 16384 + 3),
                       data_end - 1, data_end, good.size() - 1}) {
      std::string bad = good;
      bad[pos] ^= 0x01;
      std::ofstream(p, std::ios::binary) << bad;
      try {
        TokenFile f(p, int(vocab));
        ADD_FAILURE() << "a flipped byte at " << pos << " went unnoticed (vocab " << vocab << ")";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(p), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        if (pos >= 64 && pos < data_end) {
          EXPECT_NE(m.find("fail their checksum"), std::string::npos) << m;
        }
      }
    }
    fs::remove(p);
  }
}

// Rewrites byte `pos` of p in place and puts its size and mtime back, as a tool that rewrites a
// file and restores its times would: the per-batch fstat check cannot see it.
void rewrite_in_place(const std::string& p, size_t pos, const std::string& bytes) {
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(pos));
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
}

// Issue 21 item 1: a token file rewritten in place after the start-up check (same size and mtime)
// crashed the run in the embedding kernel. Every batch's ids are checked as they are read: the
// loader's error names the file, the id and its offset; no id >= vocab reaches a kernel.
TEST(TokenFile, RewrittenInPlaceIsCaughtInTheBatchThatReadsIt) {
  const std::string p = token_file(4000, 100);
  TokenFile f(p, 100);
  rewrite_in_place(p, 2 * 1000, std::string("\xff\xff", 2));  // id 65535 at token 1000
  f.check_unchanged();                                       // the cheap check cannot see it
  LoaderConfig c;
  c.B = 4;
  c.T = 16;
  c.shuffle = false;
  DataLoader dl(f, c, 0);
  try {
    for (int i = 0; i < 100; ++i) {
      const MicroBatch& mb = dl.next();
      for (int32_t id : mb.inputs) ASSERT_TRUE(id >= 0 && id < 100);
      for (int32_t id : mb.targets) ASSERT_TRUE(id >= 0 && id < 100);
    }
    ADD_FAILURE() << "id 65535 reached a batch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p + " changed while it was being read: token id 65535 at position 1000 "
                                             "(byte 2000) is >= the model's vocab_size 100"),
              std::string::npos)
        << e.what();
  }
  fs::remove(p);
  // A shard with checksums: an in-range change is caught too, by its chunk's checksum.
  const std::string s = (fs::temp_directory_path() / ("zt_shard_rw_" + std::to_string(::getpid()) + ".bin")).string();
  {
    ShardWriter w(s, 100, 0);
    std::vector<int32_t> ids(40000, 5);
    w.append(ids.data(), ids.size());
    w.close();
  }
  TokenFile g(s, 100);
  WindowSampler ws(g, 16, false, 0);
  std::vector<int32_t> in(16), tg(16);
  ws.fill(in.data(), tg.data(), 0, 1);
  rewrite_in_place(s, 64 + 2 * 17000, std::string("\x06\x00", 2));  // token 17000: 5 -> 6, chunk 2
  ws.fill(in.data(), tg.data(), 0, 1);                                // chunk 0 is intact
  try {
    ws.fill(in.data(), tg.data(), 17000 / 16, 1);
    ADD_FAILURE() << "an in-range rewrite went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(s + " changed while it was being read: bytes 32832 to 49215 (chunk 2 of 5) "
                                             "fail their checksum"),
              std::string::npos)
        << e.what();
  }
  fs::remove(s);
}

// A read past the cut with no check before it (the race the checks cannot close) raises SIGBUS:
// the handler names the file and exits with 1, not 135.
TEST(TokenFileDeathTest, SigbusOnATruncatedMappingNamesTheFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string p = token_file(40000, 100);
  EXPECT_EXIT(
      {
        app::install_signal_handlers();
        TokenFile f(p, 100);
        if (::truncate(p.c_str(), 0) != 0) std::_Exit(3);
        volatile uint32_t x = f.at(f.size() - 1);
        (void)x;
        std::_Exit(4);
      },
      testing::ExitedWithCode(1), "zt_data_40000.bin was truncated while it was being read");
  fs::remove(p);
}

}  // namespace
}  // namespace zt
