// mpi_engine.h: internal to src/dist (needs <mpi.h>): the Engine behind each MPI communicator
// (its queue, communication thread, watchdog, posted sends / receives and the collectives it
// runs), which mpi_communicator.cpp (the runtime, the queue and threads, point-to-point, the
// watchdog, the Communicator) and mpi_collectives.cpp (the polled collectives, the ring
// reduce-scatter, the 16-bit reductions) share. Not an interface: only those two files include
// it; users of the communicator see communicator.h.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/mpi_progress.h"

namespace zt::dist {

using Clock = std::chrono::steady_clock;

// A hang no exception can report (mpi_communicator.cpp).
void report_hang(const std::string& msg);

class MpiRuntime;  // MPI's process-wide init / finalize (mpi_communicator.cpp)

// Throws an Error naming the call and the communicator unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* call, const std::string& comm_name);

inline bool is_p2p(Collective c) { return c == Collective::send || c == Collective::recv; }

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
  Engine(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, std::string name, double timeout_s, Communicator::Recorder rec);
  ~Engine();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  const std::shared_ptr<MpiRuntime>& runtime() const { return rt_; }

  void set_timeout(double s);

  void enqueue(Item it);

  // Runs a blocking collective (or split) on the caller's thread when nothing is queued
  // or executing, else through the queue; either way in submission order.
  void run_blocking(Item it);

  // Normal destruction drains the queue (every rank submitted the same operations, so
  // they complete; the watchdog still guards them). During exception unwinding the queue
  // is cancelled, and if an operation is stuck inside MPI the threads are detached and
  // this engine is leaked: the error handler's abort_job() is about to end the process,
  // and joining would hang it instead (the watchdog stays armed in case nothing does).
  // Returns true when the threads were detached.
  bool shutdown(bool unwinding);

 private:
  struct InFlight {
    const char* what;
    size_t bytes;
    Clock::time_point start;
    int peer;  // send / recv: the other rank (of this communicator); -1 for collectives
  };

  // The watchdog's view of what is in flight (mpi_communicator.cpp).
  void begin_flight(const Item& it);
  void end_flight(uint64_t seq);

  // Collectives, and the split's wait (mpi_collectives.cpp).
  void execute(Item& it, bool caller_blocked);
  void wait_polled(MPI_Request* reqs, int n, const char* what, const CommOp& op);
  double timeout() {
    std::lock_guard<std::mutex> g(watchdog_mutex_);
    return timeout_s_;
  }
  void run_collective(const CommOp& op);
  void ring_reduce_scatter(const CommOp& op);
  void ring_reduce_scatter_chunk(const CommOp& op, size_t c, size_t sub);
  template <class T>
  static void combine_typed(T* dst, const T* a, const T* b, size_t n, ReduceOp op);
  static void combine(void* dst, const void* a, const void* b, size_t n, DType t, ReduceOp op);

  // Point-to-point and the threads (mpi_communicator.cpp).
  void post(Item& it);
  int poll();
  void comm_main();
  void watchdog_main();

  // Internal messages (the reduce-scatter ring) use a tag users cannot (communicator.h
  // limits theirs to [0, 32766]), so they never match a user's receive.
  static constexpr int kRingTag = 32767;

  std::shared_ptr<MpiRuntime> rt_;
  MPI_Comm comm_;
  std::vector<char> scratch_;  // reduce-scatter ring blocks; used by the executing thread only
  std::string name_;
  Communicator::Recorder rec_;
  int rank_ = 0, size_ = 1;

  std::mutex queue_mutex_;  // guards queue_, busy_, stop_
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a collective is executing (on the comm thread or inline)
  bool stop_ = false;
  // Posted sends / receives: touched by the communication thread only.
  std::vector<MPI_Request> active_reqs_;
  std::vector<Item> active_items_;
  std::vector<Clock::time_point> active_start_;
  std::atomic<int> active_count_{0};

  std::mutex watchdog_mutex_;  // guards the watchdog's view
  std::condition_variable wcv_;
  std::map<uint64_t, InFlight> inflight_;
  double timeout_s_;
  bool wstop_ = false;

  std::unique_ptr<ProgressTable> progress_;  // who has entered which collective (timeout messages)
  uint64_t entered_ = 0;                     // collectives (and splits) this rank has entered
  uint64_t current_ = 0;                     // the one executing now (used by the executing thread only)

  std::thread comm_thread_, watchdog_;
};

}  // namespace zt::dist
