// mpi_collectives.cpp: the collectives of the MPI communicator's Engine (mpi_engine.h): each
// a non-blocking MPI call (or, for reduce_scatter, a ring of Isend / Irecv) waited for by
// polling (wait_polled: the timeout that names the ranks holding a collective up), the MPI
// types and reduction operations, including the user-defined ones for bf16 / fp16. Not here:
// the MPI runtime, the queue and its threads, point-to-point, the watchdog and the Communicator
// (mpi_communicator.cpp).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <exception>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/run_control.h"
#include "dist/backoff.h"
#include "dist/mpi_engine.h"
#include "dist/mpi_progress.h"

namespace zt::dist {
namespace {

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

}  // namespace

void Engine::execute(Item& it, bool caller_blocked) {
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
void Engine::wait_polled(MPI_Request* reqs, int n, const char* what, const CommOp& op) {
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

// Every collective is a non-blocking MPI call waited for by polling (wait_polled). For large
// all-reduces libnbc's ring is as fast as the blocking tuned algorithm (MpiRuntime sets it).
void Engine::run_collective(const CommOp& op) {
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
      mpi_check(MPI_Iallgather(send, bt.count, bt.type, out, bt.count, bt.type, comm_, &req), "MPI_Iallgather", name_);
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
void Engine::ring_reduce_scatter(const CommOp& op) {
  // Large blocks go through the ring in chunks, so the scratch stays at 2 x kRingChunkBytes
  // (a ZeRO bucket holding GPT-2's 154 MiB embedding would otherwise pin 2 x 77 MiB).
  const size_t es = dtype_size(op.dtype), blk = op.count * es;
  if (blk == 0) return;
  const size_t chunk = std::max<size_t>(1, kRingChunkBytes / es);
  for (size_t c = 0; c < op.count; c += chunk) ring_reduce_scatter_chunk(op, c, std::min(chunk, op.count - c));
}
// Elements [c, c + sub) of every block. Each exchange is an Irecv + Isend waited by polling.
void Engine::ring_reduce_scatter_chunk(const CommOp& op, size_t c, size_t sub) {
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
void Engine::combine_typed(T* dst, const T* a, const T* b, size_t n, ReduceOp op) {
  if (op == ReduceOp::sum)
    for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  else if (op == ReduceOp::max)
    for (size_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
  else
    for (size_t i = 0; i < n; ++i) dst[i] = std::min(a[i], b[i]);
}
void Engine::combine(void* dst, const void* a, const void* b, size_t n, DType t, ReduceOp op) {
  switch (t) {
    case DType::f32:
      return combine_typed(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n, op);
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

}  // namespace zt::dist
