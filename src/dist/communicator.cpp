// communicator.cpp: the implementation-independent half of the communicator: argument
// checks, sequence numbers, counters, requests, size-1 data movement and the choice of
// backend. The MPI and local halves are in mpi_communicator.cpp / local_communicator.cpp.
#include "dist/communicator.h"

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "dist/backends.h"

namespace zt::dist {

namespace detail {

struct StatsBox {
  std::mutex m;
  CommStats s;
};

struct RequestState {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool cannot_block = false;
  std::string error;
  Collective kind = Collective::barrier;
  std::shared_ptr<StatsBox> stats;  // to charge wait time; shared so a request may outlive its communicator
};

}  // namespace detail

namespace {
// Reductions need arithmetic MPI (and the local ring) can do on the element type.
// bf16 / fp16 sums are for mixed precision's gradient reductions (DeepSpeed's
// communication_data_type): each partial sum is rounded back to the 16-bit type, as NCCL does.
bool reducible(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64 || t == DType::bf16 ||
         t == DType::f16;
}
}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::send:
      return "send";
    case Collective::recv:
      return "recv";
    case Collective::barrier:
      return "barrier";
    case Collective::count:
      break;
  }
  return "?";
}

void CollectiveStats::add(const CollectiveStats& o) {
  calls += o.calls;
  bytes += o.bytes;
  bus_bytes += o.bus_bytes;
  seconds += o.seconds;
  wait_seconds += o.wait_seconds;
}

CollectiveStats CommStats::total() const {
  CollectiveStats t;
  for (auto& s : by_kind) t.add(s);
  return t;
}

double bus_bytes(Collective c, double s, int n) {
  if (n <= 1) return 0;
  double f = double(n - 1) / n;
  switch (c) {
    case Collective::all_reduce:
      return 2 * f * s;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return f * s;
    case Collective::broadcast:
    case Collective::send:
    case Collective::recv:
      return s;
    default:
      return 0;
  }
}

void Request::wait() {
  if (!state_) return;
  auto& r = *state_;
  std::unique_lock<std::mutex> lk(r.m);
  if (!r.done) {
    ZT_CHECK(!r.cannot_block, collective_name(r.kind),
             " can never complete: it waits for a message that this rank has not sent to itself yet "
             "(send before waiting on the receive)");
    auto t0 = std::chrono::steady_clock::now();
    r.cv.wait(lk, [&] { return r.done; });
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.stats) {
      std::lock_guard<std::mutex> g(r.stats->m);
      r.stats->s.by_kind[static_cast<size_t>(r.kind)].wait_seconds += dt;
    }
  }
  if (!r.error.empty()) throw Error(r.error);
}

bool Request::test() {
  if (!state_) return true;
  std::lock_guard<std::mutex> lk(state_->m);
  if (state_->done && !state_->error.empty()) throw Error(state_->error);
  return state_->done;
}

void complete_request(detail::RequestState& r, const std::string& err) {
  {
    std::lock_guard<std::mutex> lk(r.m);
    r.done = true;
    r.error = err;
  }
  r.cv.notify_all();
}

bool request_done(const detail::RequestState& r) {
  auto& m = const_cast<std::mutex&>(r.m);
  std::lock_guard<std::mutex> lk(m);
  return r.done;
}

void request_set_cannot_block(detail::RequestState& r) {
  std::lock_guard<std::mutex> lk(r.m);
  r.cannot_block = true;
}

Communicator::Communicator(std::string name, double timeout_s)
    : name_(std::move(name)), timeout_s_(timeout_s), stats_(std::make_shared<detail::StatsBox>()) {}

Communicator::~Communicator() = default;

std::shared_ptr<detail::RequestState> Communicator::make_request(const CommOp& op) const {
  auto r = std::make_shared<detail::RequestState>();
  r->kind = op.kind;
  r->stats = stats_;
  return r;
}

namespace {
void record_into(detail::StatsBox& box, int n, const CommOp& op, double seconds, double wait_seconds) {
  std::lock_guard<std::mutex> g(box.m);
  auto& s = box.s.by_kind[static_cast<size_t>(op.kind)];
  s.calls += 1;
  s.bytes += op.payload;
  s.bus_bytes += bus_bytes(op.kind, op.payload, n);
  s.seconds += seconds;
  s.wait_seconds += wait_seconds;
}
}  // namespace

void Communicator::record(const CommOp& op, double seconds, double wait_seconds) const {
  record_into(*stats_, size(), op, seconds, wait_seconds);
}

Communicator::Recorder Communicator::recorder() const {
  return [box = stats_, n = size()](const CommOp& op, double s, double w) { record_into(*box, n, op, s, w); };
}

CommStats Communicator::stats() const {
  std::lock_guard<std::mutex> g(stats_->m);
  return stats_->s;
}

void Communicator::reset_stats() {
  std::lock_guard<std::mutex> g(stats_->m);
  stats_->s = CommStats{};
}

// Checks arguments once for every backend and fills in seq and the payload S.
CommOp Communicator::prepare(CommOp op) {
  const int n = size();
  const char* what = collective_name(op.kind);
  size_t es = dtype_size(op.dtype);
  ZT_CHECK(op.count == 0 || op.out || op.in, what, " on communicator \"", name_, "\": null buffer for ", op.count,
           " elements");
  switch (op.kind) {
    case Collective::all_reduce:
      op.payload = double(op.count) * es;
      break;
    case Collective::reduce_scatter:
      ZT_CHECK(op.count == 0 || (op.in && op.out), what, ": null input or output buffer");
      op.payload = double(n) * op.count * es;
      break;
    case Collective::all_gather:
    case Collective::all_to_all:
      ZT_CHECK(op.count == 0 || (op.in && op.out), what, ": null input or output buffer");
      op.payload = double(n) * op.count;
      break;
    case Collective::broadcast:
      ZT_CHECK(op.root >= 0 && op.root < n, "broadcast root ", op.root, " is not a rank of communicator \"", name_,
               "\" (size ", n, ")");
      op.payload = double(op.count);
      break;
    case Collective::send:
    case Collective::recv:
      ZT_CHECK(op.peer >= 0 && op.peer < n, what, " peer ", op.peer, " is not a rank of communicator \"", name_,
               "\" (size ", n, ")");
      ZT_CHECK(op.tag >= 0 && op.tag <= 32766, what, " tag ", op.tag, " must be in [0, 32766] (32767 is internal)");
      op.payload = double(op.count);
      break;
    default:
      op.payload = 0;
  }
  op.seq = next_seq_++;
  return op;
}

void Communicator::run_blocking(const CommOp& op) { start(op).wait(); }

Request Communicator::iall_reduce(void* data, size_t count, DType t, ReduceOp r) {
  ZT_CHECK(reducible(t), "all_reduce sums f32, f64, i32, i64, bf16 or f16 elements, not ", dtype_name(t));
  CommOp op{Collective::all_reduce, nullptr, data, count, t, r};
  return start(prepare(op));
}
Request Communicator::ireduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp r) {
  ZT_CHECK(reducible(t), "reduce_scatter sums f32, f64, i32, i64, bf16 or f16 elements, not ", dtype_name(t));
  CommOp op{Collective::reduce_scatter, in, out, count, t, r};
  return start(prepare(op));
}
Request Communicator::iall_gather(const void* in, void* out, size_t bytes) {
  return start(prepare(CommOp{Collective::all_gather, in, out, bytes}));
}
Request Communicator::ibroadcast(void* data, size_t bytes, int root) {
  CommOp op{Collective::broadcast, nullptr, data, bytes};
  op.root = root;
  return start(prepare(op));
}
Request Communicator::iall_to_all(const void* in, void* out, size_t bytes) {
  return start(prepare(CommOp{Collective::all_to_all, in, out, bytes}));
}
Request Communicator::isend(const void* data, size_t bytes, int peer, int tag) {
  CommOp op{Collective::send, data, nullptr, bytes};
  op.peer = peer;
  op.tag = tag;
  return start(prepare(op));
}
Request Communicator::irecv(void* data, size_t bytes, int peer, int tag) {
  CommOp op{Collective::recv, nullptr, data, bytes};
  op.peer = peer;
  op.tag = tag;
  return start(prepare(op));
}
Request Communicator::ibarrier() { return start(prepare(CommOp{Collective::barrier})); }

void Communicator::all_reduce(void* data, size_t count, DType t, ReduceOp r) {
  ZT_CHECK(reducible(t), "all_reduce sums f32, f64, i32, i64, bf16 or f16 elements, not ", dtype_name(t));
  run_blocking(prepare(CommOp{Collective::all_reduce, nullptr, data, count, t, r}));
}
void Communicator::reduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp r) {
  ZT_CHECK(reducible(t), "reduce_scatter sums f32, f64, i32, i64, bf16 or f16 elements, not ", dtype_name(t));
  run_blocking(prepare(CommOp{Collective::reduce_scatter, in, out, count, t, r}));
}
void Communicator::all_gather(const void* in, void* out, size_t bytes) {
  run_blocking(prepare(CommOp{Collective::all_gather, in, out, bytes}));
}
void Communicator::broadcast(void* data, size_t bytes, int root) {
  CommOp op{Collective::broadcast, nullptr, data, bytes};
  op.root = root;
  run_blocking(prepare(op));
}
void Communicator::all_to_all(const void* in, void* out, size_t bytes) {
  run_blocking(prepare(CommOp{Collective::all_to_all, in, out, bytes}));
}
void Communicator::send(const void* data, size_t bytes, int peer, int tag) { isend(data, bytes, peer, tag).wait(); }
void Communicator::recv(void* data, size_t bytes, int peer, int tag) { irecv(data, bytes, peer, tag).wait(); }
void Communicator::barrier() { run_blocking(prepare(CommOp{Collective::barrier})); }

void execute_single_rank(const CommOp& op) {
  // memmove: in-place forms may alias exactly (then nothing moves) and are otherwise
  // allowed to overlap in the size-1 case without harm.
  auto move = [](void* dst, const void* src, size_t bytes) {
    if (dst != src && bytes) std::memmove(dst, src, bytes);
  };
  switch (op.kind) {
    case Collective::reduce_scatter:
      move(op.out, op.in, op.count * dtype_size(op.dtype));
      break;
    case Collective::all_gather:
    case Collective::all_to_all:
      move(op.out, op.in, op.count);
      break;
    default:
      break;  // all_reduce, broadcast, barrier: the data already is the result
  }
}

double default_timeout_seconds() {
  const char* e = std::getenv("ZT_COMM_TIMEOUT_S");
  if (!e || !*e) return 300;
  char* end = nullptr;
  double v = std::strtod(e, &end);
  ZT_CHECK(end && *end == 0 && v >= 0, "ZT_COMM_TIMEOUT_S=\"", e,
           "\" is not a number of seconds >= 0 (0 turns the communication watchdog off)");
  return v;
}

bool launched_by_mpi() {
  // OpenMPI's mpirun, PMIx launchers (prterun, srun --mpi=pmix), MPICH hydra / PMI-2.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::unique_ptr<Communicator> make_world(Backend backend) {
  double timeout = default_timeout_seconds();
  if (backend == Backend::auto_detect) backend = launched_by_mpi() ? Backend::mpi : Backend::local;
  if (backend == Backend::local) return make_local_world(timeout);
  return make_mpi_world(timeout);
}

std::string broadcast_string(Communicator& comm, const std::string& s, int root) {
  uint64_t n = comm.rank() == root ? s.size() : 0;
  comm.broadcast(&n, sizeof n, root);
  std::string r = comm.rank() == root ? s : std::string(n, '\0');
  if (n > 0) comm.broadcast(r.data(), n, root);
  return r;
}

}  // namespace zt::dist
