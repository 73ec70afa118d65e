// cmd_health.cpp: `ztrain health-check`, the pre-flight check DLRover runs before a job (and
// `ztrain launch --health_check` runs before the command). Under mpirun every rank times a GEMM,
// then all-gathers in pairs over two pairings ((0,1),(2,3)... then (1,2),(3,4)...,(n-1,0)): a
// slow or broken link shows in both pairs of the rank behind it, a healthy partner in one only.
// Rank 0 prints one row per rank and names the ranks whose GEMM or whose both pairs are slower
// than --slow_factor of the median; the exit code is 1 when it names any.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "flags.h"
#include "kernels/gemm.h"

namespace zt::app {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Test hooks (tests/dist/health_check.sh): ZT_TEST_SLOW_GEMM_RANK=r makes rank r's GEMM take 10x
// as long; ZT_TEST_SLOW_LINK_RANK=r sleeps in each of rank r's all-gathers as a slow link would.
bool hook_is(const char* name, int rank) {
  const char* v = std::getenv(name);
  return v && *v && std::atoi(v) == rank;
}

}  // namespace

int cmd_health_check(const Args& args) {
  int gemm_size = 1024, allgather_mb = 16;
  double seconds = 0.3, slow_factor = 0.5;
  FlagSet f("health-check");
  f.add("gemm_size", &gemm_size, "n of the n x n x n fp32 GEMM each rank times (1024)", range::closed(64, 8192));
  f.add("seconds", &seconds, "time spent on the GEMM per rank (0.3)", range::above(0, 600));
  f.add("allgather_mb", &allgather_mb, "MiB each rank contributes to a pair's all-gather (16)", range::closed(1, 4096));
  f.add("slow_factor", &slow_factor, "a rank below this fraction of the median is slow (0.5)", range::above(0, 1));
  if (wants_help(args, f.help() + "\nRun under MPI: ztrain launch --nproc_per_node N -- health-check, or "
                                  "ztrain launch --health_check ... -- train ... (checks first).\n"))
    return 0;
  f.parse(args);
  std::unique_ptr<dist::Communicator> world = dist::make_world();
  const int rank = world->rank(), n = world->size();

  // 1. GEMM speed.
  const int64_t m = gemm_size;
  std::vector<float> a(size_t(m * m), 0.5f), b(size_t(m * m), 0.25f), c(size_t(m * m));
  kernels::gemm(false, false, m, m, m, 1.f, a.data(), m, b.data(), m, 0.f, c.data(), m);  // warm-up
  int reps = 0;
  const double t0 = now_s();
  while (reps < 3 || now_s() - t0 < seconds) {
    const double g0 = now_s();
    kernels::gemm(false, false, m, m, m, 1.f, a.data(), m, b.data(), m, 0.f, c.data(), m);
    if (hook_is("ZT_TEST_SLOW_GEMM_RANK", rank))
      std::this_thread::sleep_for(std::chrono::duration<double>(9 * (now_s() - g0)));
    ++reps;
  }
  const double gflops = 2.0 * double(m) * m * m * reps / (now_s() - t0) / 1e9;

  // 2. All-gather in pairs, two pairings. partner(i) in pairing p: shift by p, pair neighbours.
  const size_t bytes = size_t(allgather_mb) << 20;
  std::vector<char> in(bytes, char(rank)), out(2 * bytes);
  double pair_gbs[2] = {0, 0};
  int partner[2] = {-1, -1};
  for (int p = 0; p < 2 && n > 1; ++p) {
    const int i = ((rank - p) % n + n) % n;
    const int j = i ^ 1;
    partner[p] = j < n && !(p == 1 && n == 2) ? (j + p) % n : -1;
    const int color = partner[p] < 0 ? n + rank : std::min(rank, partner[p]);
    std::unique_ptr<dist::Communicator> pair = world->split(color, rank, "health-pair");
    if (pair->size() == 2) {
      pair->all_gather(in.data(), out.data(), bytes);  // warm-up
      const double s0 = now_s();
      for (int r = 0; r < 3; ++r) {
        pair->all_gather(in.data(), out.data(), bytes);
        if (hook_is("ZT_TEST_SLOW_LINK_RANK", rank) || hook_is("ZT_TEST_SLOW_LINK_RANK", partner[p]))
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      pair_gbs[p] = 3.0 * 2 * bytes / (now_s() - s0) / 1e9;
    }
    world->barrier();
  }

  // 3. Rank 0 reports.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  struct Row {
    double gflops, gbs[2];
    int partner[2];
    char host[64];
  } mine{gflops, {pair_gbs[0], pair_gbs[1]}, {partner[0], partner[1]}, {}};
  std::snprintf(mine.host, sizeof mine.host, "%s", host);
  std::vector<Row> rows(static_cast<size_t>(n));
  world->all_gather(&mine, rows.data(), sizeof(Row));
  if (rank != 0) return 0;
  std::vector<double> g, links;
  for (const Row& r : rows) {
    g.push_back(r.gflops);
    for (int p = 0; p < 2; ++p)
      if (r.partner[p] >= 0) links.push_back(r.gbs[p]);
  }
  const double g_med = median(g), l_med = median(links);
  std::printf("health check: %d ranks; GEMM %lld^3 fp32, all-gather %d MiB per rank in pairs\n", n,
              static_cast<long long>(m), allgather_mb);
  std::printf("%-6s %-20s %12s %20s %20s\n", "rank", "host", "GEMM GFLOP/s", "pair 1 (GB/s)", "pair 2 (GB/s)");
  std::vector<std::string> verdicts;
  for (int r = 0; r < n; ++r) {
    const Row& x = rows[size_t(r)];
    char p1[32] = "-", p2[32] = "-";
    if (x.partner[0] >= 0) std::snprintf(p1, sizeof p1, "with %d: %.2f", x.partner[0], x.gbs[0]);
    if (x.partner[1] >= 0) std::snprintf(p2, sizeof p2, "with %d: %.2f", x.partner[1], x.gbs[1]);
    std::printf("%-6d %-20s %12.1f %20s %20s\n", r, x.host, x.gflops, p1, p2);
    if (x.gflops < slow_factor * g_med)
      verdicts.push_back(str_cat("rank ", r, " (", x.host, ") is slow: GEMM ", int(x.gflops),
                                 " GFLOP/s against a median of ", int(g_med)));
    int slow_pairs = 0, pairs = 0;
    for (int p = 0; p < 2; ++p)
      if (x.partner[p] >= 0) {
        ++pairs;
        slow_pairs += x.gbs[p] < slow_factor * l_med;
      }
    if (pairs > 0 && slow_pairs == pairs && n > 2)
      verdicts.push_back(str_cat("rank ", r, " (", x.host, ") has a slow link: its all-gathers ran below ", slow_factor,
                                 " of the median ", l_med, " GB/s with every partner"));
  }
  for (const std::string& v : verdicts) std::printf("health check: %s\n", v.c_str());
  if (verdicts.empty()) std::printf("health check: every rank is healthy\n");
  std::fflush(stdout);
  return verdicts.empty() ? 0 : 1;
}

}  // namespace zt::app
