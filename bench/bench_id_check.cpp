// bench_id_check.cpp: what the per-batch checks of token files cost (issue 21: a bad id must never
// reach the kernels, and a flipped byte is caught before it is used). Times WindowSampler::fill
// (every id range-checked; for a shard with checksums, the chunks each window lies in copied and
// hashed) against the unchecked copy the sampler did before, on the same shuffled windows.
// bench/bench_id_check.sh divides the difference by a measured training step.
// usage: zt_bench_id_check B T VOCAB [TOKENS] [BATCHES]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/shard_format.h"
#include "data/token_data.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median of `reps` timings of fn, in seconds.
template <class F>
double median_seconds(int reps, F fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s B T VOCAB [TOKENS] [BATCHES]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), V = std::atoi(argv[3]);
  const int64_t n = argc > 4 ? std::atoll(argv[4]) : 50'000'000;
  const int batches = argc > 5 ? std::atoi(argv[5]) : 2000;
  namespace fs = std::filesystem;
  const std::string shard = (fs::temp_directory_path() / "zt_bench_id_shard.bin").string();
  const std::string raw = (fs::temp_directory_path() / "zt_bench_id_raw.bin").string();
  {
    zt::Rng rng(1, 2);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = int32_t(rng.below(uint64_t(V)));
    zt::ShardWriter w(shard, uint32_t(V), 0);
    w.append(ids.data(), ids.size());
    w.close();
    if (V <= 65536) {
      std::vector<uint16_t> u(ids.begin(), ids.end());
      std::ofstream(raw, std::ios::binary).write(reinterpret_cast<const char*>(u.data()), std::streamsize(u.size() * 2));
    }
  }
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  std::printf("B %d, T %d, vocab %d, %lld tokens, %d micro-batches of shuffled windows; microseconds per micro-batch:\n",
              B, T, V, (long long)n, batches);
  for (const std::string& path : {shard, raw}) {
    if (path == raw && V > 65536) continue;
    zt::TokenFile f(path, V);
    zt::WindowSampler checked(f, T, true, 7), unchecked(f, T, true, 7);
    // Before issue 21: ids copied straight from the mapping, none checked.
    auto fill_unchecked = [&](int64_t g) {
      for (int s = 0; s < B; ++s) {
        const int64_t w = unchecked.window_of(g + s) * T;
        for (int t = 0; t < T; ++t) {
          in[size_t(s) * T + t] = int32_t(f.at(w + t));
          tg[size_t(s) * T + t] = int32_t(f.at(w + t + 1));
        }
      }
    };
    for (int k = 0; k < 50; ++k) checked.fill(in.data(), tg.data(), int64_t(k) * B, B), fill_unchecked(int64_t(k) * B);
    const double a = median_seconds(5, [&] {
      for (int k = 0; k < batches; ++k) fill_unchecked(int64_t(k) * B);
    });
    const double b = median_seconds(5, [&] {
      for (int k = 0; k < batches; ++k) checked.fill(in.data(), tg.data(), int64_t(k) * B, B);
    });
    std::printf("  %-34s unchecked %8.2f  checked %8.2f  cost %8.2f\n",
                f.has_checksums() ? "shard (ids + chunk checksums):" : "raw uint16 (ids only):", 1e6 * a / batches,
                1e6 * b / batches, 1e6 * (b - a) / batches);
  }
  fs::remove(shard);
  fs::remove(raw);
  return 0;
}
