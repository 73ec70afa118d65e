// test_offload.cpp: the pieces of offload to disk (docs/offload.md) below the engine: the io_uring
// scratch file (core/async_file.h) and an elementwise optimizer stepping windows of external state
// (Optimizer::bind_window) against the same optimizer holding its state whole. The engine itself
// is tested end to end, bit for bit against in-memory runs, by tests/cli/offload.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/async_file.h"
#include "core/error.h"
#include "core/memory.h"
#include "optim/optimizer.h"
#include "test_util.h"

namespace zt {
namespace {

TEST(AsyncFile, WritesAndReadsBackThroughSmallBlocks) {
  AioOptions o;
  o.block_size = 64 << 10;  // 48 pieces of 64 KiB per request, 4 in flight
  o.queue_depth = 4;
  AsyncFile f(testing::TempDir(), "zt-test-aio", o, "--nvme_path");
  const int64_t n = int64_t(3) << 20;
  f.reserve(2 * n);
  Buffer a(size_t(n), MemCategory::temporary), b(size_t(n), MemCategory::temporary);
  for (int64_t i = 0; i < n; ++i) a.as<uint8_t>()[i] = uint8_t(i * 7 + 3);
  const AsyncFile::Ticket w = f.write(a.data(), n, n);  // the second half of the file
  f.wait(w);
  EXPECT_TRUE(f.done(w));
  f.wait(f.read(b.data(), n, n));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(n)), 0);
  const AioStats st = f.stats();
  EXPECT_EQ(st.bytes_read, n);
  EXPECT_EQ(st.bytes_written, n);
  EXPECT_FALSE(std::filesystem::exists(f.path()));  // unlinked at once: scratch
}

TEST(AsyncFile, BadFoldersAndOptionsAreOneLine) {
  const std::string missing = test::error_of([] { AsyncFile f("/nonexistent/zt", "x", AioOptions{}, "--nvme_path"); });
  EXPECT_NE(missing.find("--nvme_path \"/nonexistent/zt\" does not exist"), std::string::npos) << missing;
  AioOptions odd;
  odd.block_size = 1000;
  EXPECT_NE(test::error_of([&] { check_aio_options(odd); }).find("aio.block_size 1000"), std::string::npos);
  AioOptions threads;
  threads.thread_count = 2;
  EXPECT_NE(test::error_of([&] { check_aio_options(threads); }).find("aio.thread_count 2"), std::string::npos);
}

TEST(AsyncFile, BenchDiskMeasuresBothWays) {
  const DiskBench r = bench_disk(testing::TempDir(), int64_t(8) << 20, int64_t(1) << 20, AioOptions{});
  EXPECT_GT(r.write_gbps, 0);
  EXPECT_GT(r.read_gbps, 0);
  EXPECT_GT(r.mixed_gbps, 0);
}

// An optimizer stepping its state in windows of `chunk` coordinates (the offload engine's loop,
// without the file) ends with the parameters and state of the same optimizer stepping it whole.
void expect_windows_match(const std::string& name, optim::OptimizerConfig cfg, int64_t chunk) {
  const int64_t n = 10000;
  cfg.tokens_per_step = 64;  // Sophia's bs
  std::unique_ptr<optim::Optimizer> whole = optim::make_optimizer(name, cfg, n);
  optim::OptimizerConfig ext = cfg;
  ext.external_state = true;
  std::unique_ptr<optim::Optimizer> win = optim::make_optimizer(name, ext, n);
  const size_t slots = whole->slot_names().size(), es = dtype_size(cfg.state_dtype);
  std::vector<std::vector<char>> state(slots, std::vector<char>(size_t(n) * es, 0));
  std::vector<float> p1(static_cast<size_t>(n)), p2(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p1[size_t(i)] = p2[size_t(i)] = 0.01f * float(i % 97) - 0.4f;
  const std::vector<optim::ParamRange> ranges = {{0, 6000, true}, {6000, 4000, false}};
  for (int step = 0; step < 4; ++step) {
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = 0.001f * float((i * (step + 3)) % 41) - 0.02f;
    whole->step(optim::flat_pieces(p1.data(), g.data(), ranges), 1e-2);
    if (whole->curvature_interval() > 0) whole->update_curvature(optim::flat_pieces(p1.data(), g.data(), ranges));
    for (int pass = 0; pass < (whole->curvature_interval() > 0 ? 2 : 1); ++pass)
      for (int64_t c = 0; c < n; c += chunk) {
        const int64_t m = std::min(chunk, n - c);
        std::vector<void*> ptrs;
        for (auto& s : state) ptrs.push_back(s.data() + size_t(c) * es);
        std::vector<optim::StepPiece> pieces;
        for (const optim::ParamRange& r : ranges) {
          const int64_t a = std::max(r.offset, c), b = std::min(r.offset + r.numel, c + m);
          if (a < b) pieces.push_back({p2.data() + a, g.data() + a, a, b - a, r.decay});
        }
        win->bind_window(c, m, ptrs);
        if (pass == 1)
          win->update_curvature(pieces);
        else if (c == 0)
          win->step(pieces, 1e-2);
        else
          win->step_continued(pieces, 1e-2);
        win->unbind_window();
      }
  }
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), p1.size() * 4), 0) << name;
  for (size_t s = 0; s < slots; ++s)
    EXPECT_EQ(std::memcmp(whole->slot_data(s), state[s].data(), state[s].size()), 0) << name << " slot " << s;
  EXPECT_EQ(whole->steps(), win->steps());
}

TEST(OptimizerWindows, ElementwiseOptimizersStepWindowsExactly) {
  optim::OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  expect_windows_match("adamw_torch", cfg, 3000);
  expect_windows_match("lion_32bit", cfg, 2500);
  expect_windows_match("sophia", cfg, 4096);
  optim::OptimizerConfig sgd = cfg;
  sgd.args = {{"momentum", "0.9"}, {"nesterov", "true"}};
  expect_windows_match("sgd", sgd, 1234);
  optim::OptimizerConfig bf16 = cfg;
  bf16.state_dtype = DType::bf16;
  expect_windows_match("adamw_torch", bf16, 3000);  // stochastic rounding keyed by state coordinate
}

TEST(OptimizerWindows, OthersRefuseExternalState) {
  optim::OptimizerConfig cfg;
  cfg.external_state = true;
  for (const char* name : {"adafactor", "adamw_8bit", "muon"}) {
    const std::string e = test::error_of([&] { optim::make_optimizer(name, cfg, 100); });
    EXPECT_NE(e.find("cannot be offloaded to disk"), std::string::npos) << name << ": " << e;
  }
}

}  // namespace
}  // namespace zt
