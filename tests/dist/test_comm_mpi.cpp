// test_comm_mpi.cpp: the communicator under MPI (ctest runs it with mpirun -np 2 and -np 4)
// and alone (the size-1 local communicator): every collective's result and counters,
// sub-groups from split, point-to-point, ordering of queued non-blocking operations, that a
// non-blocking all-reduce completes while the caller computes without calling MPI, and the
// process grid's groups (ProcessGrid) against the pure rank layout.
// With --mode=throw | hang | exit it instead plays a failing rank for abort_test.sh.
// It is not a benchmark (ztrain bench-comm is).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/parallel_dims.h"

using namespace zt::dist;
using Clock = std::chrono::steady_clock;

namespace {

Communicator* g_world = nullptr;

double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A fixed amount of busy arithmetic with no MPI calls: stands in for a backward pass.
double compute_work(int64_t units) {
  double acc = 0;
  for (int64_t u = 0; u < units; ++u)
    for (int i = 0; i < 1000; ++i) acc += std::sqrt(double(i) + acc * 1e-9);
  return acc;
}

// The checks every communicator (world, sub-groups, local) must pass.
void check_all_reduce(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t(0), size_t(1), size_t(1001), size_t(1) << 20}) {
    std::vector<float> f(count);
    std::vector<double> d(count);
    std::vector<int64_t> l(count);
    for (size_t i = 0; i < count; ++i) {
      f[i] = float((r + 1) * int(i % 7));
      d[i] = (r + 1) * 0.25 * double(i % 11);
      l[i] = int64_t(r + 1) << 33;
    }
    c.all_reduce(f.data(), count);
    c.all_reduce(d.data(), count);
    c.iall_reduce(l.data(), count).wait();
    const double tri = n * (n + 1) / 2.0;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(f[i], float(tri * (i % 7))) << "count " << count << " i " << i;
      ASSERT_EQ(d[i], tri * 0.25 * double(i % 11)) << "count " << count << " i " << i;
      ASSERT_EQ(l[i], int64_t(tri) << 33);
    }
  }
  float mx = float(r), mn = float(r);
  c.all_reduce(&mx, 1, ReduceOp::max);
  c.all_reduce(&mn, 1, ReduceOp::min);
  EXPECT_EQ(mx, float(n - 1));
  EXPECT_EQ(mn, 0.f);
}

void check_reduce_scatter(Communicator& c) {
  const int n = c.size(), r = c.rank();
  const double tri = n * (n + 1) / 2.0;
  for (size_t count : {size_t(1), size_t(777), size_t(1) << 18}) {
    std::vector<float> in(n * count), out(count);
    for (size_t j = 0; j < in.size(); ++j) in[j] = float((r + 1) * int(j % 5 + 1));
    c.reduce_scatter(in.data(), out.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], float(tri * ((r * count + i) % 5 + 1))) << i;
    // In place: the result lands in this rank's block of the input.
    c.ireduce_scatter(in.data(), in.data() + r * count, count).wait();
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(in[r * count + i], out[i]) << "in place, " << i;
  }
}

void check_all_gather(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (size_t bytes : {size_t(1), size_t(3), size_t(4096), size_t(3) << 20}) {
    std::vector<uint8_t> in(bytes), out(n * bytes);
    for (size_t k = 0; k < bytes; ++k) in[k] = uint8_t(r * 31 + k);
    c.all_gather(in.data(), out.data(), bytes);
    for (int p = 0; p < n; ++p)
      for (size_t k = 0; k < bytes; ++k) ASSERT_EQ(out[p * bytes + k], uint8_t(p * 31 + k)) << p << " " << k;
    // In place (this rank's slot already holds its part), as ZeRO-3 gathers into the
    // flat parameter buffer; bf16-sized elements to show dtypes do not matter.
    std::vector<uint16_t> flat(n * 100, 0);
    for (int k = 0; k < 100; ++k) flat[r * 100 + k] = uint16_t(0x3f80 + r + k);
    c.iall_gather(flat.data() + r * 100, flat.data(), 100 * sizeof(uint16_t)).wait();
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < 100; ++k) ASSERT_EQ(flat[p * 100 + k], uint16_t(0x3f80 + p + k));
  }
}

void check_broadcast_all_to_all(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (int root = 0; root < n; ++root) {
    std::vector<int32_t> v(1000, r == root ? 7 * root + 1 : -1);
    c.broadcast(v.data(), v.size() * sizeof(int32_t), root);
    for (auto x : v) ASSERT_EQ(x, 7 * root + 1);
  }
  const size_t per = 513;  // int32 values per peer
  std::vector<int32_t> in(n * per), out(n * per, -1);
  for (int p = 0; p < n; ++p)
    for (size_t k = 0; k < per; ++k) in[p * per + k] = int32_t(r * 1000000 + p * 1000 + k);
  c.iall_to_all(in.data(), out.data(), per * sizeof(int32_t)).wait();
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < per; ++k) ASSERT_EQ(out[q * per + k], int32_t(q * 1000000 + r * 1000 + k));
  c.barrier();
  c.ibarrier().wait();
}

void check_send_recv(Communicator& c) {
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring with both directions posted before waiting: must not deadlock.
  for (size_t count : {size_t(1), size_t(100000)}) {
    std::vector<float> out(count, float(r)), in(count, -1.f), in2(count, -1.f);
    Request rr = c.irecv(in.data(), count * 4, prev, 3);
    Request rr2 = c.irecv(in2.data(), count * 4, prev, 4);
    Request sr2 = c.isend(out.data(), count * 4, next, 4);
    Request sr = c.isend(out.data(), count * 4, next, 3);
    sr.wait();
    sr2.wait();
    rr.wait();
    rr2.wait();
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(in[i], float(prev));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(in2[i], float(prev));
  }
  // Blocking pairs ordered to avoid deadlock (even ranks send first), as pipeline stages do.
  if (n > 1) {
    int64_t v = r, got = -1;
    if (r % 2 == 0) {
      if (next != r) c.send(&v, sizeof v, next);
      if (prev != r) c.recv(&got, sizeof got, prev);
    } else {
      c.recv(&got, sizeof got, prev);
      c.send(&v, sizeof v, next);
    }
    EXPECT_EQ(got, prev);
  }
}

void check_counters(Communicator& c) {
  const int n = c.size();
  c.reset_stats();
  std::vector<float> a(1024), rs(n * 256), rso(256);
  std::vector<char> ag(n * 100), a2a_in(n * 10), a2a_out(n * 10);
  c.all_reduce(a.data(), a.size());
  c.iall_reduce(a.data(), a.size()).wait();
  c.reduce_scatter(rs.data(), rso.data(), 256);
  c.all_gather(ag.data() + c.rank() * 100, ag.data(), 100);
  c.broadcast(a.data(), 4096, 0);
  c.all_to_all(a2a_in.data(), a2a_out.data(), 10);
  c.barrier();
  CommStats s = c.stats();
  const double f = n > 1 ? double(n - 1) / n : 0, b = n > 1 ? 1 : 0;
  EXPECT_EQ(s[Collective::all_reduce].calls, 2);
  EXPECT_EQ(s[Collective::all_reduce].bytes, 2 * 4096.0);
  EXPECT_DOUBLE_EQ(s[Collective::all_reduce].bus_bytes, 2 * 2 * f * 4096);
  EXPECT_EQ(s[Collective::reduce_scatter].bytes, n * 256 * 4.0);
  EXPECT_DOUBLE_EQ(s[Collective::reduce_scatter].bus_bytes, f * n * 256 * 4);
  EXPECT_EQ(s[Collective::all_gather].bytes, n * 100.0);
  EXPECT_DOUBLE_EQ(s[Collective::all_gather].bus_bytes, f * n * 100);
  EXPECT_EQ(s[Collective::broadcast].bytes, 4096.0);
  EXPECT_DOUBLE_EQ(s[Collective::broadcast].bus_bytes, b * 4096);
  EXPECT_DOUBLE_EQ(s[Collective::all_to_all].bus_bytes, f * n * 10);
  EXPECT_EQ(s[Collective::barrier].calls, 1);
  EXPECT_EQ(s.total().calls, 7);
  EXPECT_GT(s[Collective::all_reduce].seconds, 0);
  EXPECT_GE(s[Collective::all_reduce].wait_seconds, 0);
  if (n > 1) {
    int64_t v = 1, got = 0;
    c.reset_stats();
    Request rr = c.irecv(&got, 8, (c.rank() + n - 1) % n);
    c.isend(&v, 8, (c.rank() + 1) % n).wait();
    rr.wait();
    s = c.stats();
    EXPECT_EQ(s[Collective::send].calls, 1);
    EXPECT_EQ(s[Collective::recv].bytes, 8.0);
    EXPECT_EQ(s[Collective::send].bus_bytes, 8.0);
  }
}

void check_everything(Communicator& c) {
  check_all_reduce(c);
  check_reduce_scatter(c);
  check_all_gather(c);
  check_broadcast_all_to_all(c);
  check_send_recv(c);
  check_counters(c);
}

}  // namespace

TEST(DistComm, World) {
  const char* env = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(g_world->size(), env ? std::atoi(env) : 1);
  check_everything(*g_world);
}

TEST(DistComm, LocalCommunicatorShortCircuits) {
  auto local = make_world(Backend::local);
  ASSERT_EQ(local->size(), 1);
  check_everything(*local);
  // Sends to self: buffered, matched by tag, receives posted first complete later.
  int a = 5, b = 0, c = 0;
  local->send(&a, 4, 0, 1);
  Request pending = local->irecv(&c, 4, 0, 2);
  EXPECT_FALSE(pending.test());
  EXPECT_THROW(pending.wait(), zt::Error);  // would block forever: it says so instead
  local->recv(&b, 4, 0, 1);
  EXPECT_EQ(b, 5);
  local->send(&a, 4, 0, 2);
  EXPECT_TRUE(pending.test());
  EXPECT_EQ(c, 5);
  EXPECT_EQ(local->stats()[Collective::all_reduce].bus_bytes, 0.0);
  auto sub = local->split(0, 0, "sub");
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_FALSE(local->split(-1, 0, "none"));
}

TEST(DistComm, SplitIntoGroups) {
  const int n = g_world->size(), r = g_world->rank();
  // Two interleaved groups, ranked in reverse order of world rank (key = -rank).
  auto g = g_world->split(r % 2, -r, "parity");
  ASSERT_TRUE(g);
  const int gsize = (n - r % 2 + 1) / 2;
  EXPECT_EQ(g->size(), gsize);
  EXPECT_EQ(g->rank(), gsize - 1 - r / 2);
  EXPECT_EQ(g->name(), "parity");
  int64_t sum = r;
  g->all_reduce(&sum, 1);
  int64_t want = 0;
  for (int q = r % 2; q < n; q += 2) want += q;
  EXPECT_EQ(sum, want);
  check_everything(*g);
  // Size-1 groups (color = rank) short-circuit inside the MPI implementation.
  auto solo = g_world->split(r, 0, "solo");
  ASSERT_TRUE(solo);
  EXPECT_EQ(solo->size(), 1);
  check_everything(*solo);
  // Ranks passing a negative color join nothing.
  auto some = g_world->split(r == 0 ? -1 : 0, r, "some");
  EXPECT_EQ(bool(some), r != 0);
  if (some) {
    EXPECT_EQ(some->size(), n - 1);
  }
  // Groups and the world used at the same time: each has its own thread and order.
  std::vector<float> a(1 << 16, 1.f), b(1 << 16, 1.f);
  Request ra = g->iall_reduce(a.data(), a.size());
  Request rb = g_world->iall_reduce(b.data(), b.size());
  rb.wait();
  ra.wait();
  EXPECT_EQ(a[123], float(g->size()));
  EXPECT_EQ(b[123], float(n));
}

TEST(DistComm, QueuedNonBlockingKeepOrder) {
  const int n = g_world->size();
  std::vector<std::vector<float>> bufs(6, std::vector<float>(50000));
  std::vector<Request> reqs;
  for (size_t k = 0; k < bufs.size(); ++k) {
    std::fill(bufs[k].begin(), bufs[k].end(), float(k + 1));
    reqs.push_back(g_world->iall_reduce(bufs[k].data(), bufs[k].size()));
  }
  // A blocking call after queued ones runs after them (through the queue).
  float x = 1.f;
  g_world->all_reduce(&x, 1);
  EXPECT_EQ(x, float(n));
  for (size_t k = bufs.size(); k-- > 0;) {
    reqs[k].wait();
    EXPECT_EQ(bufs[k][777], float(n * (k + 1)));
  }
}

namespace {

struct OverlapTimes {
  double serial = 0, overlapped = 0;  // rank 0's wall time for all-reduce + computation
  bool progressed = false;            // completed with no MPI call from the computing thread
};

// All-reduce of buf next to `units` of computation, first one after the other (blocking
// call), then overlapped (start, compute, wait). Ranks other than 0 first compute
// skew_units, as a rank that finishes its backward later does.
OverlapTimes measure_overlap(std::vector<float>& buf, int64_t units, int64_t skew_units) {
  OverlapTimes t;
  volatile double sink = 0;
  const bool late = g_world->rank() != 0;
  g_world->barrier();
  auto t0 = Clock::now();
  if (late) sink = sink + compute_work(skew_units);
  g_world->all_reduce(buf.data(), buf.size());
  sink = sink + compute_work(units);
  t.serial = secs_since(t0);
  g_world->barrier();
  t0 = Clock::now();
  if (late) sink = sink + compute_work(skew_units);
  Request req = g_world->iall_reduce(buf.data(), buf.size());
  for (int64_t u = 0; u < units; u += 100) sink = sink + compute_work(std::min<int64_t>(100, units - u));
  // Request::test makes no MPI call: completion here proves the all-reduce progressed on
  // its own while this thread computed.
  while (!req.test() && secs_since(t0) < 30) std::this_thread::sleep_for(std::chrono::microseconds(50));
  t.progressed = req.test();
  t.overlapped = secs_since(t0);
  return t;
}

}  // namespace

TEST(DistComm, NonBlockingProgressesWhileComputing) {
  const int n = g_world->size();
  if (n == 1) GTEST_SKIP() << "needs MPI ranks";
  std::vector<float> buf(4 << 20, 1.f);         // 16 MiB, a large DDP bucket
  g_world->all_reduce(buf.data(), buf.size());  // warm up (page faults, MPI buffers)
  auto t0 = Clock::now();
  g_world->all_reduce(buf.data(), buf.size());
  double t_comm = secs_since(t0);
  // Fixed work of about 50 ms; the same on every rank (rank 0's calibration is broadcast).
  t0 = Clock::now();
  volatile double sink = compute_work(1000);
  (void)sink;
  int64_t units = int64_t(0.05 / (secs_since(t0) / 1000));
  g_world->broadcast(&units, sizeof units, 0);
  OverlapTimes even = measure_overlap(buf, units, 0);
  OverlapTimes skew = measure_overlap(buf, units, units * 3 / 5);
  EXPECT_TRUE(even.progressed && skew.progressed) << "a non-blocking all-reduce made no progress without MPI calls";
  std::fill(buf.begin(), buf.end(), 1.f);
  g_world->iall_reduce(buf.data(), buf.size()).wait();
  EXPECT_EQ(buf[12345], float(n));
  if (g_world->rank() == 0)
    std::printf(
        "[overlap] N=%d, 16 MiB all_reduce (%.1f ms alone) + %lld units of compute (about 50 ms): ranks in "
        "step: serial %.1f ms, overlapped %.1f ms; other ranks 30 ms late: serial %.1f ms, overlapped %.1f ms\n",
        n, t_comm * 1e3, (long long)units, even.serial * 1e3, even.overlapped * 1e3, skew.serial * 1e3,
        skew.overlapped * 1e3);
}

TEST(DistComm, BadArgumentsThrowBeforeCommunicating) {
  const int n = g_world->size();
  std::vector<char> v(8);
  EXPECT_THROW(g_world->broadcast(v.data(), v.size(), n), zt::Error);
  EXPECT_THROW(g_world->send(v.data(), v.size(), -1), zt::Error);
  EXPECT_THROW(g_world->iall_reduce(v.data(), 8, DType::u8), zt::Error);
  g_world->barrier();  // every rank is still in step
  // A receive naming the wrong size fails on the receiving rank, with both sizes named.
  if (n > 1) {
    int64_t small = 1;
    std::vector<int64_t> big(4);
    if (g_world->rank() == 0) g_world->send(&small, sizeof small, 1, 9);
    if (g_world->rank() == 1) {
      try {
        g_world->recv(big.data(), sizeof(int64_t) * 4, 0, 9);
        ADD_FAILURE() << "a short message was accepted";
      } catch (const zt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("expected 32 bytes and got 8"), std::string::npos) << e.what();
      }
    }
    g_world->barrier();
  }
}

namespace {

// A grid group against the pure membership: size, rank, the members in order (all_gather of
// world ranks) and an all-reduce that sums the members' world ranks and nobody else's.
void check_grid_group(const ProcessGrid& grid, Group g) {
  const std::vector<int> members = group_ranks(grid.dims(), g, g_world->rank());
  Communicator& c = grid.group(g);
  ASSERT_EQ(c.size(), int(members.size())) << group_name(g) << " " << grid.dims().to_string();
  ASSERT_EQ(members[c.rank()], g_world->rank()) << group_name(g);
  EXPECT_EQ(c.name(), group_name(g));
  const int32_t me = g_world->rank();
  std::vector<int32_t> got(c.size());
  c.all_gather(&me, got.data(), sizeof me);
  EXPECT_EQ(std::vector<int>(got.begin(), got.end()), members) << group_name(g) << " " << grid.dims().to_string();
  int64_t sum = me;
  c.all_reduce(&sum, 1);
  EXPECT_EQ(sum, std::accumulate(members.begin(), members.end(), int64_t(0))) << group_name(g);
}

}  // namespace

// Every way to factor the world into pp x dp_replicate x dp_shard x cp x tp (15 at 4 ranks),
// with ep as large as it may be: every group of every grid matches group_ranks.
TEST(DistGrid, EveryFactorizationMatchesThePureLayout) {
  const int n = g_world->size();
  for (int pp = 1; pp <= n; ++pp)
    for (int r = 1; r <= n; ++r)
      for (int s = 1; s <= n; ++s)
        for (int cp = 1; cp <= n; ++cp)
          for (int tp = 1; tp <= n; ++tp) {
            if (pp * r * s * cp * tp != n) continue;
            ParallelDims d{.dp_replicate = r, .dp_shard = s, .cp = cp, .tp = tp, .pp = pp, .ep = s * cp};
            ProcessGrid grid(*g_world, d);
            EXPECT_EQ(grid_rank(grid.dims(), grid.coords()), g_world->rank());
            for (size_t g = 0; g < kNumGroups; ++g) check_grid_group(grid, static_cast<Group>(g));
          }
}

// The 2 x 2 grid spelled out (dp 2 x tp 2 at 4 ranks): tp peers are neighbours, dp peers are
// 2 apart, and the two groups run concurrently without mixing their sums.
TEST(DistGrid, DpTwoByTpTwo) {
  if (g_world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int r = g_world->rank();
  ProcessGrid grid(*g_world, ParallelDims{.tp = 2});
  EXPECT_EQ(grid.dims().dp_shard, 2);
  EXPECT_EQ(grid.coords(), (GridCoords{.dp_shard = r / 2, .tp = r % 2}));
  EXPECT_EQ(grid.tp().size(), 2);
  EXPECT_EQ(grid.tp().rank(), r % 2);
  EXPECT_EQ(grid.dp().size(), 2);
  EXPECT_EQ(grid.dp().rank(), r / 2);
  EXPECT_EQ(grid.dp_replicate().size(), 1);
  EXPECT_EQ(grid.pp().size(), 1);
  EXPECT_EQ(grid.cp().size(), 1);
  std::vector<float> t(1 << 14, float(1 << r)), d(1 << 14, float(1 << r));  // rank r contributes bit r
  Request rt = grid.tp().iall_reduce(t.data(), t.size());
  Request rd = grid.dp().iall_reduce(d.data(), d.size());
  rd.wait();
  rt.wait();
  EXPECT_EQ(t[77], float(r < 2 ? 1 + 2 : 4 + 8));                               // tp group {0, 1} or {2, 3}
  EXPECT_EQ(d[77], float(r % 2 == 0 ? 1 + 4 : 2 + 8));                          // dp group {0, 2} or {1, 3}
  EXPECT_THROW(ProcessGrid(*g_world, ParallelDims{.dp_shard = 3}), zt::Error);  // before any split
  g_world->barrier();
}

namespace {

// On ranks other than 0, only failures are printed (prefixed with the rank), so the log
// of an N-rank run reads like one run.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

// The failing ranks abort_test.sh needs.
int play_failure(const std::string& mode) {
  const int r = g_world->rank();
  g_world->barrier();
  if (mode == "hang") {
    // Rank 1 never joins the all-reduce: rank 0's watchdog must end the job.
    g_world->set_timeout(1.0);
    if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    float x = 1;
    g_world->all_reduce(&x, 1);
    return 0;
  }
  if (mode == "throw" || mode == "exit") {
    if (r == 1) {
      auto sub = g_world->split(0, r, "sub");
      std::vector<float> v(1000);
      if (mode == "throw") {
        // An operation in flight while the error unwinds its communicator: the destructor
        // must not hang on it.
        Request pending = sub->iall_reduce(v.data(), v.size());
        (void)pending;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it start: it is now stuck in MPI
      }
      throw zt::Error("deliberate failure on rank 1");
    }
    float x = 0;
    auto sub = g_world->split(0, r, "sub");
    g_world->recv(&x, sizeof x, 1);  // never sent: only the abort ends this
    return 0;
  }
  throw zt::Error("unknown --mode=" + mode + " (throw | hang | exit)");
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // This binary is the application here: it decides that a hang ends the job (as apps/ does).
  set_hang_handler([](const std::string& msg) {
    abort_job(msg);
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    std::_Exit(1);
  });
  std::string mode;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--mode=", 7) == 0) mode = argv[i] + 7;
  std::unique_ptr<Communicator> world;
  try {
    world = make_world();
    g_world = world.get();
    if (!mode.empty()) return play_failure(mode);
    if (world->rank() != 0) {
      auto& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(world->rank()));
    }
    int rc = RUN_ALL_TESTS();
    int64_t bad = rc != 0;
    world->all_reduce(&bad, 1, ReduceOp::max);  // every rank exits with the same verdict
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    // "exit" plays a rank that returns an error code without aborting the job.
    if (mode != "exit") abort_job(e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
