// communicator.h: the thin communicator every distributed strategy talks to: rank, size,
// split, the collectives (all_reduce, reduce_scatter, all_gather, broadcast, all_to_all,
// barrier) and point-to-point send/recv, each blocking or non-blocking (a Request), with
// per-collective counters (calls, payload bytes, bus bytes, time) and a timeout that names
// the ranks missing from a collective that hangs.
//
// Two implementations: MPI (mpi_communicator.cpp; a dedicated communication thread per
// communicator executes operations in submission order, so non-blocking operations
// progress while the caller computes) and a size-1 local one (local_communicator.cpp)
// where every collective short-circuits, so the serial path runs the same code.
//
// It deliberately is not: a tensor library (it moves raw buffers described by a count and
// a dtype), thread-safe for concurrent submitters (one thread owns a communicator; all
// ranks must submit the same collectives in the same order, as with MPI), or a global
// (communicators are passed explicitly; only MPI's process-wide init is shared).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace zt::dist {

// Element types are core's (core/tensor.h); reductions take f32, f64, i32 and i64, and the
// byte-moving collectives any type.
using zt::DType;
enum class ReduceOp { sum, max, min };
// reduce_scatter runs its ring over chunks of this many bytes per block, so its scratch is two
// chunks whatever the message (the memory estimator counts it).
constexpr size_t kRingChunkBytes = size_t(8) << 20;

// What the counters are kept for. split is not counted (it is setup, not traffic).
enum class Collective { all_reduce, reduce_scatter, all_gather, broadcast, all_to_all, send, recv, barrier, count };
constexpr size_t kNumCollectives = static_cast<size_t>(Collective::count);
const char* collective_name(Collective c);

// Counters, following nccl-tests' conventions (doc/PERFORMANCE.md there). S is the
// payload size in bytes of one call, N the communicator size:
//   all_reduce      S = count * dtype size (the whole tensor)       bus = 2 (N-1)/N * S
//   reduce_scatter  S = N * count * dtype size (the whole input)    bus = (N-1)/N * S
//   all_gather      S = N * bytes per rank (the whole output)       bus = (N-1)/N * S
//   all_to_all      S = N * bytes per peer (what one rank holds)    bus = (N-1)/N * S
//   broadcast       S = bytes                                       bus = S
//   send / recv     S = bytes                                       bus = S
//   barrier         S = 0                                           bus = 0
// Bus bytes are what each rank must move over its slowest link with a ring algorithm, so
// bus bytes / time is comparable across collectives and sizes and against the link's
// peak (busbw). With N = 1 nothing leaves the rank and bus bytes are 0 for every kind.
struct CollectiveStats {
  int64_t calls = 0;
  double bytes = 0;         // sum of S
  double bus_bytes = 0;     // sum of the per-rank bus bytes above
  double seconds = 0;       // time the operations took to execute (start to completion)
  double wait_seconds = 0;  // time callers were blocked on them (blocking calls + Request::wait):
                            // seconds - wait_seconds is how much communication was hidden
  void add(const CollectiveStats& o);
};
struct CommStats {
  std::array<CollectiveStats, kNumCollectives> by_kind{};
  const CollectiveStats& operator[](Collective c) const { return by_kind[static_cast<size_t>(c)]; }
  CollectiveStats total() const;
};
// The formulas above: S for one call and the per-rank bus bytes for S on N ranks.
double bus_bytes(Collective c, double payload_bytes, int n);

namespace detail {
struct RequestState;
struct StatsBox;
}  // namespace detail

// A handle on a non-blocking operation. Buffers passed to the operation must stay
// valid and untouched until wait() returns or test() returned true. A default-constructed
// Request is complete. Errors of the operation are rethrown (as zt::Error) by wait() and
// test(). test() makes no MPI call: it reads a flag the communication thread sets.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::RequestState> s) : state_(std::move(s)) {}
  void wait();
  bool test();

 private:
  std::shared_ptr<detail::RequestState> state_;
};

// One operation as the implementations see it (built by the Communicator methods below).
struct CommOp {
  Collective kind = Collective::barrier;
  const void* in = nullptr;
  void* out = nullptr;  // in-place ops use out only
  // Elements for typed ops (all_reduce: the tensor; reduce_scatter: per rank), bytes for
  // the byte ops (all_gather: per rank; all_to_all: per peer; broadcast, send, recv: all).
  size_t count = 0;
  DType dtype = DType::u8;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0, peer = 0, tag = 0;
  uint64_t seq = 0;    // per communicator, in submission order (for the watchdog)
  double payload = 0;  // S, see CollectiveStats
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }
  // Collective over this communicator: ranks with the same color form a new one, ordered
  // by key (ties by rank). A negative color joins none and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
  // Timeout (HF's --ddp_timeout): a collective whose ranks have not all arrived after this many
  // seconds throws naming the missing ranks; an operation stuck after that (see
  // set_hang_handler) calls the hang handler. 0 turns both off. Default: ZT_COMM_TIMEOUT_S from
  // the environment, else 300. Children inherit it; on the world it also guards MPI_Finalize.
  virtual void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // Non-blocking operations. Every rank of the communicator must call the same sequence.
  // all_reduce: in place over count elements.
  Request iall_reduce(void* data, size_t count, DType t, ReduceOp op = ReduceOp::sum);
  Request iall_reduce(float* data, size_t count, ReduceOp op = ReduceOp::sum) {
    return iall_reduce(data, count, DType::f32, op);
  }
  Request iall_reduce(double* data, size_t count, ReduceOp op = ReduceOp::sum) {
    return iall_reduce(data, count, DType::f64, op);
  }
  Request iall_reduce(int64_t* data, size_t count, ReduceOp op = ReduceOp::sum) {
    return iall_reduce(data, count, DType::i64, op);
  }
  // reduce_scatter: in holds size()*count elements; rank r gets the reduction of block r
  // in out (count elements). out may be in + rank()*count (in place); the rest of in is
  // then left unspecified.
  Request ireduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp op = ReduceOp::sum);
  Request ireduce_scatter(const float* in, float* out, size_t count) {
    return ireduce_scatter(in, out, count, DType::f32);
  }
  // all_gather of raw bytes (any dtype): out holds size()*bytes, rank r's in lands at
  // out + r*bytes. in may be out + rank()*bytes (in place).
  Request iall_gather(const void* in, void* out, size_t bytes_per_rank);
  Request ibroadcast(void* data, size_t bytes, int root);
  // all_to_all: in and out hold size() blocks of bytes_per_peer; block p of in goes to
  // rank p and arrives at block rank() of its out. in and out must not overlap.
  Request iall_to_all(const void* in, void* out, size_t bytes_per_peer);
  // Point-to-point: messages between two ranks with the same tag arrive in order. The
  // receive must name the exact size sent. Tags are 0..32766 (32767 is used internally).
  Request isend(const void* data, size_t bytes, int peer, int tag = 0);
  Request irecv(void* data, size_t bytes, int peer, int tag = 0);
  Request ibarrier();

  // Blocking versions: the same operations, complete on return.
  void all_reduce(void* data, size_t count, DType t, ReduceOp op = ReduceOp::sum);
  void all_reduce(float* data, size_t count, ReduceOp op = ReduceOp::sum) { all_reduce(data, count, DType::f32, op); }
  void all_reduce(double* data, size_t count, ReduceOp op = ReduceOp::sum) { all_reduce(data, count, DType::f64, op); }
  void all_reduce(int64_t* data, size_t count, ReduceOp op = ReduceOp::sum) { all_reduce(data, count, DType::i64, op); }
  void reduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp op = ReduceOp::sum);
  void reduce_scatter(const float* in, float* out, size_t count) { reduce_scatter(in, out, count, DType::f32); }
  void all_gather(const void* in, void* out, size_t bytes_per_rank);
  void broadcast(void* data, size_t bytes, int root);
  void all_to_all(const void* in, void* out, size_t bytes_per_peer);
  void send(const void* data, size_t bytes, int peer, int tag = 0);
  void recv(void* data, size_t bytes, int peer, int tag = 0);
  void barrier();

  CommStats stats() const;
  void reset_stats();

  // Counts one executed operation (for implementations; see recorder()).
  using Recorder = std::function<void(const CommOp& op, double seconds, double wait_seconds)>;

 protected:
  Communicator(std::string name, double timeout_s);
  // Starts op (already validated, seq and payload set); the implementation records its
  // execution with record() and completes the request.
  virtual Request start(const CommOp& op) = 0;
  // Runs op to completion; the default is start(op).wait(). MPI overrides it to run on the
  // calling thread when nothing is queued (saves a thread hand-off per blocking call).
  virtual void run_blocking(const CommOp& op);
  // Creates the request of op, whose wait() charges its blocked time to op.kind.
  std::shared_ptr<detail::RequestState> make_request(const CommOp& op) const;
  void record(const CommOp& op, double seconds, double wait_seconds = 0) const;
  // The same as record(), for threads that may outlive this object (it holds the counters).
  Recorder recorder() const;
  // A sequence number for operations that are not counted (split).
  uint64_t next_seq() { return next_seq_++; }

 private:
  CommOp prepare(CommOp op);
  std::string name_;
  double timeout_s_;
  uint64_t next_seq_ = 0;
  std::shared_ptr<detail::StatsBox> stats_;
};

// Completes a request (implementations only): err empty means success.
void complete_request(detail::RequestState& r, const std::string& err = "");
// Whether a request made by make_request() has completed (implementations only).
bool request_done(const detail::RequestState& r);
// Marks a request that can only be completed by a later operation of the same thread (a
// local receive waiting for a send to self): wait() on it before then throws instead of
// blocking forever.
void request_set_cannot_block(detail::RequestState& r);

// Size-1 data movement shared by the local communicator and size-1 MPI groups: copies
// where out differs from in, nothing otherwise. Not for send/recv.
void execute_single_rank(const CommOp& op);

// The watchdog timeout from ZT_COMM_TIMEOUT_S (seconds, 0 = off), else 300.
double default_timeout_seconds();

// True when this process was started by an MPI launcher (mpirun / srun / hydra).
bool launched_by_mpi();

enum class Backend { auto_detect, local, mpi };
// The world communicator. auto_detect uses MPI when launched_by_mpi(), the size-1 local
// communicator otherwise: a singleton MPI_Init costs about 0.5 s here (docs/distributed.md)
// and a plain `ztrain train` should not pay it. MPI is initialised with
// MPI_THREAD_MULTIPLE (the communication threads need it) and finalised when the last
// MPI communicator is destroyed.
std::unique_ptr<Communicator> make_world(Backend backend = Backend::auto_detect);

// For the CLI's error handler: under MPI prints "[rank R] error: msg" to stderr and
// aborts the whole job (MPI_Abort(MPI_COMM_WORLD, 1)), so the other ranks do not hang in
// their next collective. Returns when MPI is not running (doing nothing: false) or is
// finalizing (MPI_Abort is not allowed then: true when it printed the line), so the caller
// reports the error itself unless it was printed, and exits as usual.
// print = false aborts without the line (a rank whose error another rank reports: a JobError).
bool abort_job(const std::string& msg, bool print = true);

// Root's s on every rank of comm (a collective: its size, then its bytes).
std::string broadcast_string(Communicator& comm, const std::string& s, int root);

// A collective whose ranks do not all arrive within the timeout throws (naming the missing
// ranks). Some hangs cannot throw: a thread blocked inside MPI (a rank stopped inside a
// collective, a send or receive whose peer never comes, MPI_Finalize waiting for a failed
// rank). For those the library calls this handler with a one-line message; apps/ installs one
// that ends the job (abort_job, then exit). Without a handler the message is printed and the
// wait goes on: library code never ends the process. Process-wide, like signal handlers.
using HangHandler = void (*)(const std::string& message);
void set_hang_handler(HangHandler h);

}  // namespace zt::dist
