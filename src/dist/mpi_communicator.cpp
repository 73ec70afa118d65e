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
//
// The collectives (the polled waits, the ring reduce-scatter, the MPI types and reduction
// operations) are in mpi_collectives.cpp; the Engine class the two files share in mpi_engine.h.
#include <mpi.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/backends.h"
#include "dist/backoff.h"
#include "dist/mpi_engine.h"
#include "dist/mpi_progress.h"

namespace zt::dist {
namespace {

std::atomic<HangHandler> g_hang_handler{nullptr};
std::atomic<bool> g_finalizing{false};  // MPI_Abort is not allowed inside MPI_Finalize
std::atomic<int> g_world_rank{0};       // for messages once MPI calls are no longer allowed

}  // namespace

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

Engine::Engine(std::shared_ptr<MpiRuntime> rt, MPI_Comm comm, std::string name, double timeout_s,
               Communicator::Recorder rec)
    : rt_(std::move(rt)), comm_(comm), name_(std::move(name)), rec_(std::move(rec)), timeout_s_(timeout_s) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  progress_ = std::make_unique<ProgressTable>(comm_, rank_, size_);  // collective, before the threads
  comm_thread_ = std::thread([this] { comm_main(); });
  watchdog_ = std::thread([this] { watchdog_main(); });
}

Engine::~Engine() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Engine::set_timeout(double s) {
  std::lock_guard<std::mutex> g(watchdog_mutex_);
  timeout_s_ = s;
  wcv_.notify_all();
}

void Engine::enqueue(Item it) {
  {
    std::lock_guard<std::mutex> g(queue_mutex_);
    queue_.push_back(std::move(it));
  }
  cv_.notify_all();
}

void Engine::run_blocking(Item it) {
  bool inline_ok;
  {
    std::lock_guard<std::mutex> g(queue_mutex_);
    inline_ok = queue_.empty() && !busy_;
    if (inline_ok) busy_ = true;
  }
  auto req = it.req;
  if (inline_ok) {
    execute(it, true);
    {
      std::lock_guard<std::mutex> g(queue_mutex_);
      busy_ = false;
    }
    cv_.notify_all();
  } else {
    enqueue(std::move(it));
  }
  Request(req).wait();
}

bool Engine::shutdown(bool unwinding) {
  bool stuck;
  {
    std::lock_guard<std::mutex> g(queue_mutex_);
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
    std::lock_guard<std::mutex> g(watchdog_mutex_);
    wstop_ = true;
  }
  wcv_.notify_all();
  watchdog_.join();
  return false;
}

void Engine::begin_flight(const Item& it) {
  std::lock_guard<std::mutex> g(watchdog_mutex_);
  inflight_[it.op.seq] = {it.what, size_t(it.op.payload), Clock::now(), is_p2p(it.op.kind) ? it.op.peer : -1};
}
void Engine::end_flight(uint64_t seq) {
  std::lock_guard<std::mutex> g(watchdog_mutex_);
  inflight_.erase(seq);
}

// Posts a send or receive; its completion is found by poll().
void Engine::post(Item& it) {
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
int Engine::poll() {
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
        err = str_cat("recv from rank ", it.op.peer, " (tag ", it.op.tag, ") expected ", it.op.count, " bytes and got ",
                      got, "; a receive must name the exact size sent");
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

void Engine::comm_main() {
  Backoff backoff;  // between polls of posted sends / receives: spin briefly, then sleep
  for (;;) {
    Item it;
    bool have = false;
    {
      std::unique_lock<std::mutex> lk(queue_mutex_);
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
        std::lock_guard<std::mutex> g(queue_mutex_);
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
void Engine::watchdog_main() {
  std::unique_lock<std::mutex> lk(watchdog_mutex_);
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

namespace {

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
