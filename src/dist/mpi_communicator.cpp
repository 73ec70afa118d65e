// mpi_communicator.cpp: the MPI communicator. Each communicator owns a communication
// thread that executes its operations in submission order (so every rank runs the same
// sequence, as MPI requires) and a watchdog thread for operations that hang.
//
// Waiting. A blocking MPI call spins a core for as long as a peer is missing (with
// yield_when_idle too: a yield returns at once when nothing else runs). So every collective
// is the non-blocking MPI call (or, for reduce_scatter, a ring of Isend / Irecv) waited for by
// polling: back to back while the data should still be moving, then with sleeps that grow to
// 1 ms (backoff.h). A rank waiting for a stopped, hung or slow peer then uses about 1% of a
// core (tests/dist/wait_cpu.sh). The same loop enforces the timeout and throws naming the
// ranks that hold the collective up (mpi_progress.h). The library never ends the process: a
// thread stuck inside MPI (a split, a point-to-point peer that never comes, MPI_Finalize),
// where no exception can reach the caller, calls the hang handler apps/ installed
// (communicator.h).
//
// It deliberately is not: a scheduler that reorders operations, or a fallback for MPI
// libraries without MPI_THREAD_MULTIPLE (it refuses them with a clear error).
#include <mpi.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/run_control.h"
#include "dist/backends.h"
#include "dist/backoff.h"
#include "dist/mpi_progress.h"

namespace zt::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<HangHandler> g_hang_handler{nullptr};
std::atomic<bool> g_finalizing{false};  // MPI_Abort is not allowed inside MPI_Finalize
std::atomic<int> g_world_rank{0};       // for messages once MPI calls are no longer allowed

// A hang no exception can report: the handler apps/ installed ends the job; without one the
// message is printed (once per hang) and the wait goes on.
void report_hang(const std::string& msg) {
  if (HangHandler h = g_hang_handler.load()) {
    h(msg);
    return;
  }
  std::fprintf(stderr, "error: %s (no hang handler installed: still waiting)\n", msg.c_str());
  std::fflush(stderr);
}

// MPI is process-wide: initialised by the first MPI communicator, finalised when the last
// one is gone. This weak_ptr is the only global state of the communicator layer.
class MpiRuntime {
 public:
  static std::shared_ptr<MpiRuntime> acquire() {
    static std::mutex m;
    static std::weak_ptr<MpiRuntime> current;
    std::lock_guard<std::mutex> g(m);
    if (auto rt = current.lock()) return rt;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    ZT_CHECK(!fin,
             "MPI was already finalised in this process and cannot start again; keep the world "
             "communicator alive for the whole run");
    auto rt = std::make_shared<MpiRuntime>();
    int provided = 0;
    if (!init) {
      // A communication thread shares the cores with the compute threads. While it waits
      // for a late rank, OpenMPI would spin at full speed and take a core the computation
      // needs; yielding when idle hid a 30 ms skew fully here (86 -> 55 ms, against 71 ms
      // spinning; docs/distributed.md). The user's own setting wins (no overwrite).
      setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
      // Collectives are non-blocking calls waited by polling (Engine::wait_polled). libnbc's
      // default all-reduce on 2-3 ranks is binomial: 90 ms for 64 MiB against 51 ms for the
      // blocking call; its ring takes 53 ms, and 4 / 8 us instead of 2 / 4 us at 8 B / 1 KiB
      // (docs/distributed.md).
      setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      rt->owns_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    ZT_CHECK(provided >= MPI_THREAD_MULTIPLE, "the MPI library provides thread level ", provided,
             " but ztrain's communication threads need MPI_THREAD_MULTIPLE (", int(MPI_THREAD_MULTIPLE),
             "); use an OpenMPI built with thread support (Debian's openmpi-bin is)");
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    g_world_rank = world_rank;
    current = rt;
    return rt;
  }
  // MPI_Finalize waits for every rank. A rank that failed without abort_job() leaves the
  // others waiting there (or them waiting for it), so it is guarded like a collective.
  ~MpiRuntime() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!owns_ || fin) return;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::thread guard([&] {
      std::unique_lock<std::mutex> lk(m);
      if (finalize_timeout_s <= 0) return;
      if (cv.wait_for(lk, std::chrono::duration<double>(finalize_timeout_s), [&] { return done; })) return;
      report_hang(str_cat("MPI_Finalize has not completed after ", finalize_timeout_s,
                          " s (--ddp_timeout / ZT_COMM_TIMEOUT_S): another rank is still busy, hung, or failed "
                          "without aborting the job"));
    });
    g_finalizing = true;
    MPI_Finalize();
    {
      std::lock_guard<std::mutex> g(m);
      done = true;
    }
    cv.notify_all();
    guard.join();
  }
  double finalize_timeout_s = 300;

 private:
  bool owns_ = false;
};

void mpi_check(int rc, const char* call, const std::string& comm_name) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(str_cat(call, " failed on communicator \"", comm_name, "\": ", std::string(msg, len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
    case DType::i8:
      return MPI_BYTE;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;  // reduced by the user-defined ops below
  }
  return MPI_BYTE;
}

// 16-bit floats travel as MPI_UINT16_T and are combined by user-defined operations (MPI has
// no bf16 / fp16 type): widen, combine in fp32, round back, so each partial sum is rounded as in
// a bf16 / fp16 reduction.
template <bool kBf16>
float widen16(uint16_t h) {
  return kBf16 ? bf16_to_f32(h) : f16_to_f32(h);
}
template <bool kBf16>
uint16_t narrow16(float f) {
  return kBf16 ? f32_to_bf16(f) : f32_to_f16(f);
}
template <bool kBf16, int kOp>
void combine16(const uint16_t* a, const uint16_t* b, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = widen16<kBf16>(a[i]), y = widen16<kBf16>(b[i]);
    dst[i] = narrow16<kBf16>(kOp == 0 ? x + y : kOp == 1 ? std::max(x, y) : std::min(x, y));
  }
}
template <bool kBf16, int kOp>
void mpi_user_op16(void* in, void* inout, int* len, MPI_Datatype*) {
  combine16<kBf16, kOp>(static_cast<const uint16_t*>(in), static_cast<const uint16_t*>(inout),
                        static_cast<uint16_t*>(inout), size_t(*len));
}

MPI_Op mpi_op(ReduceOp r, DType t) {
  if (t == DType::bf16 || t == DType::f16) {
    // Created once, after MPI_Init (the first collective of a 16-bit type), never freed.
    static MPI_Op ops[2][3] = {};
    static std::once_flag once;
    std::call_once(once, [] {
      MPI_Op_create(&mpi_user_op16<true, 0>, 1, &ops[0][0]);
      MPI_Op_create(&mpi_user_op16<true, 1>, 1, &ops[0][1]);
      MPI_Op_create(&mpi_user_op16<true, 2>, 1, &ops[0][2]);
      MPI_Op_create(&mpi_user_op16<false, 0>, 1, &ops[1][0]);
      MPI_Op_create(&mpi_user_op16<false, 1>, 1, &ops[1][1]);
      MPI_Op_create(&mpi_user_op16<false, 2>, 1, &ops[1][2]);
    });
    return ops[t == DType::bf16 ? 0 : 1][r == ReduceOp::sum ? 0 : r == ReduceOp::max ? 1 : 2];
  }
  return r == ReduceOp::sum ? MPI_SUM : r == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

// MPI counts are int: messages over 2 GiB go as a count of larger contiguous units.
class ByteType {
 public:
  explicit ByteType(size_t bytes) {
    if (bytes <= size_t(INT_MAX)) {
      count = int(bytes);
      return;
    }
    size_t unit = 2;
    while (unit <= (size_t(1) << 30) && (bytes % unit || bytes / unit > size_t(INT_MAX))) unit *= 2;
    ZT_CHECK(unit <= (size_t(1) << 30), "a message of ", bytes,
             " bytes is too large for MPI unless it is a multiple of a power of two; split it");
    MPI_Type_contiguous(int(unit), MPI_BYTE, &type);
    MPI_Type_commit(&type);
    owned_ = true;
    count = int(bytes / unit);
  }
  ~ByteType() {
    if (owned_) MPI_Type_free(&type);
  }
  ByteType(const ByteType&) = delete;
  ByteType& operator=(const ByteType&) = delete;
  MPI_Datatype type = MPI_BYTE;
  int count = 0;

 private:
  bool owned_ = false;
};

bool is_p2p(Collective c) { return c == Collective::send || c == Collective::recv; }

struct Item {
  CommOp op;
  const char* what = nullptr;  // collective name, or "split"
  std::function<void()> task;  // set for split: runs instead of a collective
  std::shared_ptr<detail::RequestState> req;
};

// Everything the threads touch, so that it can outlive the communicator when a thread is
// stuck inside MPI while an exception unwinds (see shutdown()).
class Engine {
 public:
  Engine(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, std::string name, double timeout_s, Communicator::Recorder rec)
      : rt_(std::move(rt)), comm_(comm), name_(std::move(name)), rec_(std::move(rec)), timeout_s_(timeout_s) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    progress_ = std::make_unique<ProgressTable>(comm_, rank_, size_);  // collective, before the threads
    comm_thread_ = std::thread([this] { comm_main(); });
    watchdog_ = std::thread([this] { watchdog_main(); });
  }
  ~Engine() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  const std::shared_ptr<MpiRuntime>& runtime() const { return rt_; }

  void set_timeout(double s) {
    std::lock_guard<std::mutex> g(wm_);
    timeout_s_ = s;
    wcv_.notify_all();
  }

  void enqueue(Item it) {
    {
      std::lock_guard<std::mutex> g(m_);
      queue_.push_back(std::move(it));
    }
    cv_.notify_all();
  }

  // Runs a blocking collective (or split) on the caller's thread when nothing is queued
  // or executing, else through the queue; either way in submission order.
  void run_blocking(Item it) {
    bool inline_ok;
    {
      std::lock_guard<std::mutex> g(m_);
      inline_ok = queue_.empty() && !busy_;
      if (inline_ok) busy_ = true;
    }
    auto req = it.req;
    if (inline_ok) {
      execute(it, true);
      {
        std::lock_guard<std::mutex> g(m_);
        busy_ = false;
      }
      cv_.notify_all();
    } else {
      enqueue(std::move(it));
    }
    Request(req).wait();
  }

  // Normal destruction drains the queue (every rank submitted the same operations, so
  // they complete; the watchdog still guards them). During exception unwinding the queue
  // is cancelled, and if an operation is stuck inside MPI the threads are detached and
  // this engine is leaked: the error handler's abort_job() is about to end the process,
  // and joining would hang it instead (the watchdog stays armed in case nothing does).
  // Returns true when the threads were detached.
  bool shutdown(bool unwinding) {
    bool stuck;
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
      if (unwinding) {
        for (auto& it : queue_) complete_request(*it.req, "cancelled: the communicator was destroyed by an error");
        queue_.clear();
      }
      stuck = busy_ || active_count_.load() > 0;
    }
    cv_.notify_all();
    if (unwinding && stuck) {
      comm_thread_.detach();
      watchdog_.detach();
      return true;
    }
    comm_thread_.join();
    {
      std::lock_guard<std::mutex> g(wm_);
      wstop_ = true;
    }
    wcv_.notify_all();
    watchdog_.join();
    return false;
  }

 private:
  struct InFlight {
    const char* what;
    size_t bytes;
    Clock::time_point start;
    int peer;  // send / recv: the other rank (of this communicator); -1 for collectives
  };

  void begin_flight(const Item& it) {
    std::lock_guard<std::mutex> g(wm_);
    inflight_[it.op.seq] = {it.what, size_t(it.op.payload), Clock::now(), is_p2p(it.op.kind) ? it.op.peer : -1};
  }
  void end_flight(uint64_t seq) {
    std::lock_guard<std::mutex> g(wm_);
    inflight_.erase(seq);
  }

  void execute(Item& it, bool caller_blocked) {
    auto t0 = Clock::now();
    std::string err;
    // The n-th collective (or split) of this communicator, the same n on every rank.
    current_ = ++entered_;
    progress_->entered(current_);
    if (it.task) begin_flight(it);  // a split blocks inside MPI_Comm_split: the watchdog guards it
    try {
      if (it.task) {
        MPI_Request req;  // first wait, polled, for every rank to arrive; then the blocking split
        mpi_check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", name_);
        wait_polled(&req, 1, it.what, it.op);
        it.task();
      } else {
        run_collective(it.op);
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (it.task) end_flight(it.op.seq);
    if (!it.task) rec_(it.op, dt, caller_blocked ? dt : 0);
    complete_request(*it.req, err);
  }

  // Waits for MPI requests by polling (MPI_Testall), never inside a blocking MPI call, which
  // spins a core for as long as a peer is missing. Polls back to back for the time the data
  // should take at a pessimistic 0.25 GB/s (at least 2 ms: progress happens only inside the
  // polls), then sleeps between polls (backoff.h). After the timeout throws naming the ranks
  // that hold the collective up; the communicator is then unusable (its requests are still
  // pending): end the job.
  void wait_polled(MPI_Request* reqs, int n, const char* what, const CommOp& op) {
    const auto spin = std::chrono::microseconds(std::clamp<int64_t>(int64_t(op.payload / 250.0), 2000, 10000000));
    Backoff backoff(spin);
    const auto t0 = Clock::now();
    auto last_beat = t0;
    for (int done = 0;;) {
      mpi_check(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what, name_);
      if (done) return;
      // The heartbeat and the timeout need millisecond resolution, not one clock read, table
      // write and lock per poll (polls run back to back while spinning).
      const auto now = Clock::now();
      if (now - last_beat < std::chrono::milliseconds(1)) {
        backoff.pause();
        continue;
      }
      last_beat = now;
      progress_->heartbeat();
      const double waited = std::chrono::duration<double>(now - t0).count(), to = timeout();
      if (to > 0 && waited > to)
        throw Error(str_cat("communication timeout: ", collective_name(op.kind), " #", op.seq, " (", size_t(op.payload),
                            " bytes) on communicator \"", name_, "\" (rank ", rank_, " of ", size_, ")",
                            train_step_current() >= 0 ? str_cat(" in training step ", train_step_current()) : "",
                            " waited ", int(waited), " s (--ddp_timeout ", to,
                            "): ", progress_->describe_missing(current_),
                            "; a stopped, hung or failed rank, or raise --ddp_timeout for a legitimately long wait"));
      backoff.pause();
    }
  }
  double timeout() {
    std::lock_guard<std::mutex> g(wm_);
    return timeout_s_;
  }

  // Every collective is a non-blocking MPI call waited for by polling (wait_polled). For large
  // all-reduces libnbc's ring is as fast as the blocking tuned algorithm (MpiRuntime sets it).
  void run_collective(const CommOp& op) {
    const char* what = collective_name(op.kind);
    const size_t es = dtype_size(op.dtype);
    MPI_Request req = MPI_REQUEST_NULL;
    switch (op.kind) {
      case Collective::all_reduce: {
        // Chunks keep the int count in range; element-wise reductions split freely.
        const size_t chunk = size_t(1) << 30;
        for (size_t done = 0; done < op.count; done += chunk) {
          int n = int(std::min(chunk, op.count - done));
          mpi_check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(op.out) + done * es, n, mpi_type(op.dtype),
                                   mpi_op(op.reduce, op.dtype), comm_, &req),
                    "MPI_Iallreduce", name_);
          wait_polled(&req, 1, "MPI_Iallreduce", op);
        }
        return;
      }
      case Collective::reduce_scatter:
        ZT_CHECK(op.count <= size_t(INT_MAX), "reduce_scatter of ", op.count,
                 " elements per rank exceeds MPI's int count; split the buffer");
        return ring_reduce_scatter(op);
      case Collective::all_gather: {
        ByteType bt(op.count);
        char* out = static_cast<char*>(op.out);
        const void* send = op.in == out + size_t(rank_) * op.count ? MPI_IN_PLACE : op.in;
        mpi_check(MPI_Iallgather(send, bt.count, bt.type, out, bt.count, bt.type, comm_, &req), "MPI_Iallgather",
                  name_);
        return wait_polled(&req, 1, "MPI_Iallgather", op);
      }
      case Collective::broadcast: {
        ByteType bt(op.count);
        mpi_check(MPI_Ibcast(op.out, bt.count, bt.type, op.root, comm_, &req), "MPI_Ibcast", name_);
        return wait_polled(&req, 1, "MPI_Ibcast", op);
      }
      case Collective::all_to_all: {
        ByteType bt(op.count);
        mpi_check(MPI_Ialltoall(op.in, bt.count, bt.type, op.out, bt.count, bt.type, comm_, &req), "MPI_Ialltoall",
                  name_);
        return wait_polled(&req, 1, "MPI_Ialltoall", op);
      }
      case Collective::barrier:
        mpi_check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", name_);
        return wait_polled(&req, 1, "MPI_Ibarrier", op);
      default:
        ZT_ASSERT(false, what);
    }
  }

  // Ring reduce-scatter. OpenMPI 4.1's MPI_Reduce_scatter_block reduces to one rank and
  // scatters: on 2 ranks here 58 ms for 64 MiB, slower than a whole all-reduce (33 ms).
  // The ring moves (N-1)/N of the data per rank in N-1 neighbour exchanges: 16 ms.
  // At step k rank r sends its partial sum of block (r-k-1) mod N to r+1 and receives the
  // partial of block (r-k-2) mod N from r-1, adds its own contribution; after N-1 steps the
  // block that arrives is its own, r. Two scratch blocks: `part` (sent next) and `recv`.
  // Reads of `in` never touch block r before the last step, which writes out elementwise
  // from the same index: so out may alias in's block r (the in-place form).
  void ring_reduce_scatter(const CommOp& op) {
    // Large blocks go through the ring in chunks, so the scratch stays at 2 x kRingChunkBytes
    // (a ZeRO bucket holding GPT-2's 154 MiB embedding would otherwise pin 2 x 77 MiB).
    const size_t es = dtype_size(op.dtype), blk = op.count * es;
    if (blk == 0) return;
    const size_t chunk = std::max<size_t>(1, kRingChunkBytes / es);
    for (size_t c = 0; c < op.count; c += chunk) ring_reduce_scatter_chunk(op, c, std::min(chunk, op.count - c));
  }
  // Elements [c, c + sub) of every block. Each exchange is an Irecv + Isend waited by polling.
  void ring_reduce_scatter_chunk(const CommOp& op, size_t c, size_t sub) {
    const size_t es = dtype_size(op.dtype), blk = op.count * es, sb = sub * es;
    const char* in = static_cast<const char*>(op.in) + c * es;
    if (scratch_.size() < 2 * sb) scratch_.assign(2 * sb, 0);
    char* part = scratch_.data();
    char* recv = scratch_.data() + sb;
    const int n = size_, r = rank_, next = (r + 1) % n, prev = (r + n - 1) % n;
    const char* send = in + size_t((r + n - 1) % n) * blk;
    CommOp step = op;
    step.payload = double(2 * sb);
    for (int k = 0; k < n - 1; ++k) {
      MPI_Request q[2];
      mpi_check(MPI_Irecv(recv, int(sub), mpi_type(op.dtype), prev, kRingTag, comm_, &q[0]), "MPI_Irecv (ring)", name_);
      mpi_check(MPI_Isend(send, int(sub), mpi_type(op.dtype), next, kRingTag, comm_, &q[1]), "MPI_Isend (ring)", name_);
      wait_polled(q, 2, "reduce_scatter ring", step);
      const int b = ((r - k - 2) % n + n) % n;
      char* dst = k == n - 2 ? static_cast<char*>(op.out) + c * es : part;
      combine(dst, in + size_t(b) * blk, recv, sub, op.dtype, op.reduce);
      send = part;
    }
  }

  template <class T>
  static void combine_typed(T* dst, const T* a, const T* b, size_t n, ReduceOp op) {
    if (op == ReduceOp::sum)
      for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
    else if (op == ReduceOp::max)
      for (size_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
    else
      for (size_t i = 0; i < n; ++i) dst[i] = std::min(a[i], b[i]);
  }
  static void combine(void* dst, const void* a, const void* b, size_t n, DType t, ReduceOp op) {
    switch (t) {
      case DType::f32:
        return combine_typed(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n,
                             op);
      case DType::f64:
        return combine_typed(static_cast<double*>(dst), static_cast<const double*>(a), static_cast<const double*>(b), n,
                             op);
      case DType::i32:
        return combine_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b),
                             n, op);
      case DType::i64:
        return combine_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b),
                             n, op);
      case DType::bf16:
      case DType::f16: {
        const auto* x = static_cast<const uint16_t*>(a);
        const auto* y = static_cast<const uint16_t*>(b);
        auto* d = static_cast<uint16_t*>(dst);
        const int k = op == ReduceOp::sum ? 0 : op == ReduceOp::max ? 1 : 2;
        if (t == DType::bf16)
          k == 0   ? combine16<true, 0>(x, y, d, n)
          : k == 1 ? combine16<true, 1>(x, y, d, n)
                   : combine16<true, 2>(x, y, d, n);
        else
          k == 0   ? combine16<false, 0>(x, y, d, n)
          : k == 1 ? combine16<false, 1>(x, y, d, n)
                   : combine16<false, 2>(x, y, d, n);
        return;
      }
      default:
        break;
    }
    ZT_ASSERT(false, "no reduction over ", dtype_name(t));
  }

  // Posts a send or receive; its completion is found by poll().
  void post(Item& it) {
    const CommOp& op = it.op;
    try {
      ZT_CHECK(op.count <= size_t(INT_MAX), collective_name(op.kind), " of ", op.count,
               " bytes exceeds MPI's int count; split the message");
      MPI_Request r;
      if (op.kind == Collective::send)
        mpi_check(MPI_Isend(op.in, int(op.count), MPI_BYTE, op.peer, op.tag, comm_, &r), "MPI_Isend", name_);
      else
        mpi_check(MPI_Irecv(op.out, int(op.count), MPI_BYTE, op.peer, op.tag, comm_, &r), "MPI_Irecv", name_);
      begin_flight(it);
      active_reqs_.push_back(r);
      active_items_.push_back(std::move(it));
      active_start_.push_back(Clock::now());
      active_count_.store(int(active_items_.size()));
    } catch (const std::exception& e) {
      complete_request(*it.req, e.what());
    }
  }

  // Tests the posted sends and receives; returns how many completed.
  int poll() {
    int n = int(active_reqs_.size()), outcount = 0;
    std::vector<int> idx(n);
    std::vector<MPI_Status> st(n);
    int rc = MPI_Testsome(n, active_reqs_.data(), &outcount, idx.data(), st.data());
    if (outcount == MPI_UNDEFINED || outcount == 0) return 0;
    std::vector<bool> finished(n, false);
    for (int k = 0; k < outcount; ++k) {
      int i = idx[k];
      finished[i] = true;
      Item& it = active_items_[i];
      std::string err;
      if (rc != MPI_SUCCESS && st[k].MPI_ERROR != MPI_SUCCESS) {
        try {
          mpi_check(st[k].MPI_ERROR, it.op.kind == Collective::send ? "MPI_Isend" : "MPI_Irecv", name_);
        } catch (const std::exception& e) {
          err = e.what();
        }
      } else if (it.op.kind == Collective::recv) {
        int got = 0;
        MPI_Get_count(&st[k], MPI_BYTE, &got);
        if (size_t(got) != it.op.count)
          err = str_cat("recv from rank ", it.op.peer, " (tag ", it.op.tag, ") expected ", it.op.count,
                        " bytes and got ", got, "; a receive must name the exact size sent");
      }
      end_flight(it.op.seq);
      rec_(it.op, std::chrono::duration<double>(Clock::now() - active_start_[i]).count(), 0);
      complete_request(*it.req, err);
    }
    size_t w = 0;
    for (int i = 0; i < n; ++i) {
      if (finished[i]) continue;
      active_reqs_[w] = active_reqs_[i];
      active_items_[w] = std::move(active_items_[i]);
      active_start_[w] = active_start_[i];
      ++w;
    }
    active_reqs_.resize(w);
    active_items_.resize(w);
    active_start_.resize(w);
    active_count_.store(int(w));
    return outcount;
  }

  void comm_main() {
    Backoff backoff;  // between polls of posted sends / receives: spin briefly, then sleep
    for (;;) {
      Item it;
      bool have = false;
      {
        std::unique_lock<std::mutex> lk(m_);
        auto ready = [&] { return (!queue_.empty() && !busy_) || stop_; };
        if (active_items_.empty())
          cv_.wait(lk, ready);
        else if (auto pause = backoff.next(); pause.count() > 0)  // a new operation ends the sleep early
          cv_.wait_for(lk, pause, ready);
        if (!queue_.empty() && !busy_) {
          it = std::move(queue_.front());
          queue_.pop_front();
          have = true;
          if (!is_p2p(it.op.kind)) busy_ = true;
        } else if (stop_ && queue_.empty() && active_items_.empty()) {
          return;
        }
      }
      if (have) {
        if (is_p2p(it.op.kind)) {
          post(it);
        } else {
          execute(it, false);
          std::lock_guard<std::mutex> g(m_);
          busy_ = false;
        }
        backoff.reset();
        continue;
      }
      if (!active_items_.empty() && poll()) backoff.reset();
    }
  }

  // Splits stuck inside MPI_Comm_split and point-to-point operations whose peer never comes
  // (collectives time out in wait_polled instead): no exception can reach their caller, so
  // the hang handler is called (once per operation); for send / recv the message names the peer.
  void watchdog_main() {
    std::unique_lock<std::mutex> lk(wm_);
    uint64_t reported = ~uint64_t(0);
    while (!wstop_) {
      double to = timeout_s_;
      double period = to > 0 ? std::clamp(to / 10, 0.005, 1.0) : 1.0;
      wcv_.wait_for(lk, std::chrono::duration<double>(period));
      if (wstop_ || timeout_s_ <= 0 || inflight_.empty()) continue;
      // The oldest operation in flight (lowest sequence number) is the one that hangs.
      auto& [seq, f] = *inflight_.begin();
      double age = std::chrono::duration<double>(Clock::now() - f.start).count();
      if (age <= timeout_s_ || seq == reported) continue;
      reported = seq;
      std::string msg = str_cat("communication watchdog: ", f.what, " #", seq, " (", f.bytes,
                                " bytes) on communicator \"", name_, "\" (rank ", rank_, " of ", size_,
                                ") has not completed after ", int(age), " s (--ddp_timeout ", timeout_s_, "); ");
      msg += f.peer >= 0 ? str_cat("rank ", f.peer, " of this communicator has not matched it")
                         : std::string("every rank entered it, one is stopped or stuck inside it");
      lk.unlock();
      report_hang(msg);
      lk.lock();
    }
  }

  // Internal messages (the reduce-scatter ring) use a tag users cannot (communicator.h
  // limits theirs to [0, 32766]), so they never match a user's receive.
  static constexpr int kRingTag = 32767;

  std::shared_ptr<MpiRuntime> rt_;
  MPI_Comm comm_;
  std::vector<char> scratch_;  // reduce-scatter ring blocks; used by the executing thread only
  std::string name_;
  Communicator::Recorder rec_;
  int rank_ = 0, size_ = 1;

  std::mutex m_;  // guards queue_, busy_, stop_
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a collective is executing (on the comm thread or inline)
  bool stop_ = false;
  // Posted sends / receives: touched by the communication thread only.
  std::vector<MPI_Request> active_reqs_;
  std::vector<Item> active_items_;
  std::vector<Clock::time_point> active_start_;
  std::atomic<int> active_count_{0};

  std::mutex wm_;  // guards the watchdog's view
  std::condition_variable wcv_;
  std::map<uint64_t, InFlight> inflight_;
  double timeout_s_;
  bool wstop_ = false;

  std::unique_ptr<ProgressTable> progress_;  // who has entered which collective (timeout messages)
  uint64_t entered_ = 0;                     // collectives (and splits) this rank has entered
  uint64_t current_ = 0;                     // the one executing now (used by the executing thread only)

  std::thread comm_thread_, watchdog_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, std::string name, double timeout_s,
                  bool is_world = false)
      : Communicator(name, timeout_s), is_world_(is_world) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    eng_ = std::make_shared<Engine>(std::move(rt), comm, std::move(name), timeout_s, recorder());
  }
  ~MpiCommunicator() override {
    // A stuck engine is leaked on purpose (see Engine::shutdown): its threads still use it.
    if (eng_->shutdown(std::uncaught_exceptions() > 0)) new std::shared_ptr<Engine>(std::move(eng_));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_timeout(double s) override {
    Communicator::set_timeout(s);
    eng_->set_timeout(s);
    if (is_world_) eng_->runtime()->finalize_timeout_s = s;  // the world's timeout also guards MPI_Finalize
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    MPI_Comm child = MPI_COMM_NULL;
    Item it;
    it.op.seq = next_seq();
    it.what = "split";
    MPI_Comm parent = eng_->comm();
    std::string pname = this->name();
    it.task = [&child, parent, color, key, pname] {
      mpi_check(MPI_Comm_split(parent, color < 0 ? MPI_UNDEFINED : color, key, &child), "MPI_Comm_split", pname);
    };
    it.req = make_request(it.op);
    eng_->run_blocking(std::move(it));
    if (child == MPI_COMM_NULL) return nullptr;
    auto c =
        std::make_unique<MpiCommunicator>(eng_->runtime(), child, name.empty() ? pname + "/split" : name, timeout());
    return c;
  }

 protected:
  Request start(const CommOp& op) override {
    auto req = make_request(op);
    if (size_ == 1 && !is_p2p(op.kind)) {
      run_single(op);
      complete_request(*req);
    } else {
      eng_->enqueue(Item{op, collective_name(op.kind), nullptr, req});
    }
    return Request(req);
  }
  void run_blocking(const CommOp& op) override {
    if (size_ == 1 && !is_p2p(op.kind)) return run_single(op);
    if (is_p2p(op.kind)) return start(op).wait();
    eng_->run_blocking(Item{op, collective_name(op.kind), nullptr, make_request(op)});
  }

 private:
  void run_single(const CommOp& op) {
    auto t0 = Clock::now();
    execute_single_rank(op);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    record(op, dt, dt);
  }

  int rank_ = 0, size_ = 1;
  bool is_world_ = false;  // MPI_COMM_WORLD's duplicate: its timeout also guards MPI_Finalize
  std::shared_ptr<Engine> eng_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(double timeout_s) {
  auto rt = MpiRuntime::acquire();
  rt->finalize_timeout_s = timeout_s;
  MPI_Comm world;
  // Our own copy of MPI_COMM_WORLD, so our traffic never matches anyone else's.
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup", "world");
  return std::make_unique<MpiCommunicator>(rt, world, "world", timeout_s, /*is_world=*/true);
}

void set_hang_handler(HangHandler h) { g_hang_handler = h; }

bool abort_job(const std::string& msg, bool print) {
  if (g_finalizing) {  // MPI calls are not allowed any more: report with the rank cached at start
    if (print) std::fprintf(stderr, "[rank %d] error: %s\n", g_world_rank.load(), msg.c_str());
    std::fflush(stderr);
    return print;
  }
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return false;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (print) std::fprintf(stderr, "[rank %d] error: %s\n", rank, msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return true;
}

}  // namespace zt::dist
