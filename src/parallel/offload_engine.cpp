// offload_engine.cpp: see offload_engine.h.
#include "parallel/offload_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "optim/clip.h"
#include "parallel/optimizer_layout.h"

namespace zt::parallel {
// Named, not anonymous: the unity build puts zero.cpp and gpu_engine.cpp (which has its own
// OffloadEngine, ZeRO-Offload to host memory) in the same translation unit.
namespace nvme {

constexpr int64_t kAlign = AsyncFile::kAlign;
constexpr int64_t kChunkQuantum = kAlign / 4;         // elements: a chunk start is 4 KiB aligned in fp32
constexpr int64_t kDefaultChunk = int64_t(16) << 20;  // elements per window without a cap (64 MiB of fp32)
constexpr int64_t kMinChunk = int64_t(64) << 10;      // elements: smaller windows cost more in requests than they save

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
// Host buffers for O_DIRECT: at least 1 MiB, so Buffer aligns them to 2 MiB.
Buffer io_buffer(int64_t bytes, MemCategory cat) {
  return Buffer(size_t(std::max<int64_t>(round_up(bytes, kAlign), int64_t(1) << 20)), cat);
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A record of n elements: [parameters (offload_param) | slot 0 | slot 1 ...], each 4 KiB aligned.
int64_t record_bytes_of(int64_t n, bool params, int slots, int64_t slot_bytes) {
  return (params ? round_up(n * 4, kAlign) : 0) + slots * round_up(n * slot_bytes, kAlign);
}
int64_t unit_buffer_bytes_of(int64_t largest_unit) { return round_up(largest_unit, kChunkQuantum) * 4; }

// A range of state coordinates (= flat parameter offsets: one process holds the whole model)
// inside one unit, and where its record sits in the file.
struct Chunk {
  int64_t begin, n;
  int unit;
  int64_t file_offset;
};

// Decay runs of the flat layout (neighbours merged), as DDP cuts them.
std::vector<optim::ParamRange> decay_runs(const ParamTable& t) {
  std::vector<optim::ParamRange> r;
  for (const ParamInfo& p : t.list()) {
    if (!r.empty() && r.back().decay == p.decay() && r.back().offset + r.back().numel == p.offset)
      r.back().numel += p.numel;
    else
      r.push_back({p.offset, p.numel, p.decay()});
  }
  return r;
}

class OffloadEngine final : public DataParallel, public ParamProvider, public optim::StateStore {
 public:
  OffloadEngine(Transformer& model, const dist::ProcessGrid& grid, const DataParallelOptions& o)
      : model_(model), comm_(&grid.dp_shard_cp()), options_(o), disk_(o.disk_offload), numel_(model.num_params()) {
    units_ = model.layout().units;
    runs_ = decay_runs(model.params());
    optim::OptimizerConfig oc = o.optim_config;
    oc.external_state = true;
    opt_ = optim::make_optimizer(o.optim, oc, numel_);
    slot_bytes_ = int64_t(dtype_size(oc.state_dtype));
    slots_ = int(opt_->slot_names().size());
    std::vector<int64_t> sizes;
    for (const Unit& u : units_) sizes.push_back(u.size());
    const OffloadPlan plan = plan_offload(sizes, slots_, slot_bytes_, disk_);
    max_unit_ = plan.largest_unit;
    chunk_elems_ = plan.chunk_elements;
    plan_chunks();
    ZT_ASSERT(file_bytes_ == plan.file_bytes, "offload: the file's plan and its chunks disagree");
    const int L = model.config().n_layer;
    model.runtime().forward_acquires(0, L, true, true, &pass_order_[0]);
    pass_order_[1] = pass_order_[0];
    model.runtime().backward_acquires(0, L, &pass_order_[1]);
    file_ = std::make_unique<AsyncFile>(disk_.nvme_path, "ztrain-offload", disk_.aio, "--nvme_path");
    file_->reserve(file_bytes_);
    grads_ = Buffer(size_t(numel_) * 4, MemCategory::gradients);
    if (!disk_.params) params_ = Buffer(size_t(numel_) * 4, MemCategory::parameters);
    for (int i = 0; i < disk_.buffer_count; ++i)
      windows_.push_back(io_buffer(record_bytes(chunk_elems_), MemCategory::optimizer_state));
    write_initial(o.initial_params);
    initial_ = file_->stats();
    options_.initial_params = nullptr;
    check_optimizer_fits(*opt_, model);
    opt_->set_layout({optimizer_tensors(model), {}, nullptr});
    opt_->set_state_store(this);
    set_state_pieces();
    model.runtime().drop_flat_state();
    model.runtime().set_provider(this);
  }
  ~OffloadEngine() override {
    model_.runtime().set_provider(nullptr);
    if (stream_thread_.joinable()) stream_thread_.join();  // an error there no longer matters
  }

  // ---- ParamProvider ----
  void begin_pass(bool backward) override {
    schedule_ = &pass_order_[backward ? 1 : 0];
    pos_ = 0;
  }
  TensorView acquire(int u, bool backward) override {
    const Shape shape{units_[u].size()};
    if (!disk_.params) {
      wait_unit(u, false);  // the step in flight updates the resident parameters in place
      return TensorView::of(params_.as<float>() + units_[u].begin, shape);
    }
    const AcquireOrder& order = *schedule_;
    while (pos_ < order.size() && !(order[pos_].first == u && order[pos_].second == backward)) ++pos_;
    ZT_ASSERT(pos_ < order.size(), "offload: unit acquired out of the model's pass order");
    ++pos_;
    if (!reads_.count(u) && !held_.count(u)) {
      wait_unit(u, true);
      start_unit_read(u);
    }
    finish_unit_read(u);
    // The next unit of the pass is read while this one computes.
    if (pos_ < order.size()) {
      const int next = order[pos_].first;
      const bool spare = !free_units_.empty() || int(reads_.size() + held_.size()) < disk_.param_buffer_count;
      if (!reads_.count(next) && !held_.count(next) && spare && unit_ready(next)) start_unit_read(next);
    }
    return TensorView::of(held_[u].buf.as<float>(), shape);
  }
  void release(int u) override {
    auto it = held_.find(u);
    if (it == held_.end() || --it->second.uses > 0) return;
    free_units_.push_back(std::move(it->second.buf));
    held_.erase(it);
  }
  TensorView grads(int u) override {
    return TensorView::of(grads_.as<float>() + units_[u].begin, Shape{units_[u].size()});
  }

  // ---- DataParallel ----
  void begin_step() override {
    // A step in flight zeroes each chunk's gradients once it has used them (before the pass that
    // follows can reach that unit's backward); otherwise (a skipped step, a save that borrowed
    // the buffer) they are zeroed here.
    std::lock_guard<std::mutex> l(mu_);
    if (!stream_zeroes_grads_) std::memset(grads_.data(), 0, grads_.bytes());
    stream_zeroes_grads_ = false;
  }
  void set_last_micro(bool) override {}
  void end_backward() override {}
  double grad_norm() override { return optim::grad_norm(grads_.as<float>(), numel_); }
  double grad_sq(const std::vector<double>& w) override {
    double s = 0;
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i) {
      const double n = optim::grad_norm(grads_.as<float>() + list[i].offset, list[i].numel);
      s += w[i] * n * n;
    }
    return s;
  }
  void for_each_grad_piece(const std::function<void(int, float*, int64_t)>& f) override {
    const auto& list = model_.params().list();
    for (size_t i = 0; i < list.size(); ++i) f(int(i), grads_.as<float>() + list[i].offset, list[i].numel);
  }
  void clip(double norm, double max_norm, double unscale) override {
    for (const optim::ParamRange& r : runs_)
      optim::clip_grads(grads_.as<float>() + r.offset, r.numel, norm, max_norm, unscale);
  }
  // The step runs in the background: the next pass waits for each unit's chunks only (wait_unit),
  // so the step's reads and writes overlap the next forward's compute.
  void step(double lr) override {
    start_stream([this, lr](std::span<const optim::StepPiece> pieces, bool first) {
      first ? opt_->step(pieces, lr) : opt_->step_continued(pieces, lr);
    });
  }
  void update_curvature() override {
    start_stream([this](std::span<const optim::StepPiece> pieces, bool) { opt_->update_curvature(pieces); });
  }
  void export_params() override {
    finish_stream();
    model_.runtime().restore_flat_params();
    read_params(model_.flat_params().as<float>());
  }
  optim::Optimizer& optimizer() override { return *opt_; }
  Stateful& param_state() override { return params_state_; }
  StateShard checkpoint_shard() const override { return {0, 1}; }
  std::vector<const dist::Communicator*> comms() const override { return {comm_}; }
  double planned_bus_bytes(int) const override { return 0; }
  double paper_bus_bytes(int) const override { return 0; }
  int64_t held_params() const override { return numel_; }
  nlohmann::json describe() const override;

  // ---- optim::StateStore: checkpoints stream the slots piece by piece ----
  void read_range(size_t slot, int64_t begin, int64_t n, void* dst) override {
    slot_range(slot, begin, n, false, [&](char* at, int64_t off, int64_t k) {
      std::memcpy(static_cast<char*>(dst) + off * slot_bytes_, at, size_t(k * slot_bytes_));
    });
  }
  void write_range(size_t slot, int64_t begin, int64_t n, const void* src) override {
    slot_range(slot, begin, n, true, [&](char* at, int64_t off, int64_t k) {
      std::memcpy(at, static_cast<const char*>(src) + off * slot_bytes_, size_t(k * slot_bytes_));
    });
  }

 private:
  // Bytes of a record of n elements, and where its arrays start.
  int64_t param_part(int64_t n) const { return disk_.params ? round_up(n * 4, kAlign) : 0; }
  int64_t slot_part(int64_t n) const { return round_up(n * slot_bytes_, kAlign); }
  int64_t record_bytes(int64_t n) const { return record_bytes_of(n, disk_.params, slots_, slot_bytes_); }
  char* slot_in(char* rec, const Chunk& c, int s) const { return rec + param_part(c.n) + s * slot_part(c.n); }
  int64_t unit_buffer_bytes() const { return unit_buffer_bytes_of(max_unit_); }

  void plan_chunks();
  void write_initial(const ParamSource* src);
  void set_state_pieces();
  void read_params(float* dst);
  void start_unit_read(int u);
  void finish_unit_read(int u);
  using Update = std::function<void(std::span<const optim::StepPiece>, bool first)>;
  void stream(const Update& update);
  void start_stream(Update update);
  void finish_stream();
  void wait_unit(int u, bool written);
  bool unit_ready(int u);
  void for_each_record(bool write_back, const std::function<void(const Chunk&, char*)>& f);
  // For each chunk overlapping state coordinates [begin, begin + n): its slot `slot` read into a
  // window, f(address of the overlap, its offset from begin, its length), written back if asked.
  void slot_range(size_t slot, int64_t begin, int64_t n, bool write_back,
                  const std::function<void(char*, int64_t, int64_t)>& f);
  std::vector<optim::StepPiece> chunk_pieces(const Chunk& c, char* rec) const;

  Transformer& model_;
  const dist::Communicator* comm_;
  DataParallelOptions options_;
  DiskOffload disk_;
  int64_t numel_;
  std::vector<Unit> units_;
  std::vector<optim::ParamRange> runs_;
  std::unique_ptr<optim::Optimizer> opt_;
  int64_t slot_bytes_ = 4;
  int slots_ = 0;
  int64_t max_unit_ = 0, chunk_elems_ = 0, file_bytes_ = 0;
  std::vector<Chunk> chunks_;
  std::unique_ptr<AsyncFile> file_;
  Buffer grads_, params_;  // params_: resident fp32 parameters when only the optimizer is offloaded
  std::vector<Buffer> windows_;
  // offload_param: unit buffers, read ahead by the pass order.
  struct UnitRead {
    Buffer buf;
    std::vector<AsyncFile::Ticket> tickets;
  };
  struct Held {
    Buffer buf;
    int uses = 0;
  };
  std::vector<Buffer> free_units_;
  std::map<int, UnitRead> reads_;
  std::map<int, Held> held_;
  AcquireOrder pass_order_[2];
  const AcquireOrder* schedule_ = nullptr;
  size_t pos_ = 0;
  PieceState params_state_;
  // The step in flight (stream_thread_): chunks [0, issued_) are updated, their gradients zeroed
  // and their writes started (write_ticket_); an error it met is rethrown by finish_stream.
  std::thread stream_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t issued_ = SIZE_MAX;
  std::vector<AsyncFile::Ticket> write_ticket_;
  std::exception_ptr stream_error_;
  bool stream_zeroes_grads_ = false;
  std::vector<size_t> unit_last_chunk_;
  // The step's figures, for the report: seconds in steps, waiting on reads, updating; steps.
  double step_s_ = 0, wait_s_ = 0, update_s_ = 0, param_wait_s_ = 0;
  int64_t steps_ = 0;
  AioStats initial_;  // the initial write, left out of the per-step figures
};

// Chunks: each unit cut into chunk_elems_ pieces (starts 4 KiB aligned in fp32), records laid
// one after the other.
void OffloadEngine::plan_chunks() {
  for (size_t u = 0; u < units_.size(); ++u)
    for (int64_t at = units_[u].begin; at < units_[u].end; at += chunk_elems_) {
      const int64_t n = std::min(chunk_elems_, units_[u].end - at);
      chunks_.push_back({at, n, int(u), file_bytes_});
      unit_last_chunk_.resize(units_.size(), 0);
      unit_last_chunk_[u] = chunks_.size() - 1;
      file_bytes_ += record_bytes(n);
    }
}

// The initial parameters (from the source: random, HF files, or zeros for a resume) and zeroed
// optimizer state, written record by record through two windows.
void OffloadEngine::write_initial(const ParamSource* src) {
  ZT_ASSERT(src, "offload: no initial parameters");
  if (!disk_.params) src->read(0, numel_, params_.as<float>());
  std::vector<AsyncFile::Ticket> last(windows_.size(), 0);
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const Chunk& c = chunks_[k];
    const size_t w = k % windows_.size();
    if (last[w]) file_->wait(last[w]);
    char* rec = windows_[w].as<char>();
    std::memset(rec, 0, size_t(record_bytes(c.n)));
    if (disk_.params) src->read(c.begin, c.n, reinterpret_cast<float*>(rec));
    last[w] = file_->write(rec, record_bytes(c.n), c.file_offset);
  }
  file_->wait_all();
}

std::vector<optim::StepPiece> OffloadEngine::chunk_pieces(const Chunk& c, char* rec) const {
  std::vector<optim::StepPiece> pieces;
  float* p = disk_.params ? reinterpret_cast<float*>(rec) - c.begin : params_.as<float>();
  for (const optim::ParamRange& r : runs_) {
    const int64_t a = std::max(r.offset, c.begin), b = std::min(r.offset + r.numel, c.begin + c.n);
    if (a < b) pieces.push_back({p + a, grads_.as<float>() + a, a, b - a, r.decay});
  }
  return pieces;
}

// The step's pipeline over the records: reads run ahead by buffer_count - 2 chunks (at least
// one), each chunk is updated in its window, then written back; a window is read into again
// once its previous write has completed.
void OffloadEngine::stream(const std::function<void(std::span<const optim::StepPiece>, bool)>& update) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t nb = windows_.size(), C = chunks_.size();
  const size_t ahead = std::max<size_t>(1, nb - 2);
  std::vector<AsyncFile::Ticket> reading(nb, 0), writing(nb, 0);
  size_t issued = 0;
  auto issue = [&](size_t j) {
    const size_t w = j % nb;
    if (writing[w]) file_->wait(writing[w]);
    writing[w] = 0;
    reading[w] = file_->read(windows_[w].data(), record_bytes(chunks_[j].n), chunks_[j].file_offset);
  };
  for (size_t k = 0; k < C; ++k) {
    for (; issued < C && issued <= k + ahead; ++issued) issue(issued);
    const size_t w = k % nb;
    const Chunk& c = chunks_[k];
    const auto tw = std::chrono::steady_clock::now();
    file_->wait(reading[w]);
    wait_s_ += seconds_since(tw);
    char* rec = windows_[w].as<char>();
    std::vector<void*> slots;
    for (int s = 0; s < slots_; ++s) slots.push_back(slot_in(rec, c, s));
    const auto tu = std::chrono::steady_clock::now();
    opt_->bind_window(c.begin, c.n, slots);
    update(chunk_pieces(c, rec), k == 0);
    opt_->unbind_window();
    std::memset(grads_.as<float>() + c.begin, 0, size_t(c.n) * 4);  // used: the next step's, zeroed
    update_s_ += seconds_since(tu);
    writing[w] = file_->write(rec, record_bytes(c.n), c.file_offset);
    std::lock_guard<std::mutex> l(mu_);
    write_ticket_[k] = writing[w];
    issued_ = k + 1;
    cv_.notify_all();
  }
  file_->wait_all();
  step_s_ += seconds_since(t0);
  ++steps_;
}

void OffloadEngine::start_stream(Update update) {
  finish_stream();
  {
    std::lock_guard<std::mutex> l(mu_);
    issued_ = 0;
    write_ticket_.assign(chunks_.size(), 0);
    stream_zeroes_grads_ = true;
  }
  stream_thread_ = std::thread([this, update = std::move(update)] {
    std::exception_ptr error;
    try {
      stream(update);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> l(mu_);
    stream_error_ = error;
    issued_ = SIZE_MAX;  // nothing more to wait for (an error: acquire rethrows it)
    cv_.notify_all();
  });
}

void OffloadEngine::finish_stream() {
  if (stream_thread_.joinable()) stream_thread_.join();
  if (!stream_error_) return;
  std::exception_ptr e = stream_error_;
  stream_error_ = nullptr;
  std::rethrow_exception(e);
}

// Blocks until the step in flight has updated unit u (written: and its writes have completed).
void OffloadEngine::wait_unit(int u, bool written) {
  const size_t last = unit_last_chunk_[size_t(u)];
  std::vector<AsyncFile::Ticket> tickets;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return issued_ == SIZE_MAX || issued_ > last; });
    if (stream_error_) {
      l.unlock();
      finish_stream();
    }
    if (!written || issued_ == SIZE_MAX) return;
    for (size_t k = 0; k <= last; ++k)
      if (chunks_[k].unit == u) tickets.push_back(write_ticket_[k]);
  }
  for (AsyncFile::Ticket t : tickets) file_->wait(t);
}

// Whether unit u's parameters may be read now without waiting (for the read-ahead).
bool OffloadEngine::unit_ready(int u) {
  std::lock_guard<std::mutex> l(mu_);
  if (issued_ == SIZE_MAX) return true;
  if (issued_ <= unit_last_chunk_[size_t(u)]) return false;
  for (size_t k = 0; k <= unit_last_chunk_[size_t(u)]; ++k)
    if (chunks_[k].unit == u && !file_->done(write_ticket_[k])) return false;
  return true;
}

// Every record in order through one window, synchronously (checkpoints, not the hot path).
void OffloadEngine::for_each_record(bool write_back, const std::function<void(const Chunk&, char*)>& f) {
  char* rec = windows_[0].as<char>();
  for (const Chunk& c : chunks_) {
    file_->wait(file_->read(rec, record_bytes(c.n), c.file_offset));
    f(c, rec);
    if (write_back) file_->wait(file_->write(rec, record_bytes(c.n), c.file_offset));
  }
}

void OffloadEngine::slot_range(size_t slot, int64_t begin, int64_t n, bool write_back,
                               const std::function<void(char*, int64_t, int64_t)>& f) {
  finish_stream();
  char* buf = windows_[0].as<char>();
  for (const Chunk& c : chunks_) {
    const int64_t lo = std::max(begin, c.begin), hi = std::min(begin + n, c.begin + c.n);
    if (lo >= hi) continue;
    // The slot's part of the record alone (aligned: each part starts on kAlign).
    const int64_t at = c.file_offset + param_part(c.n) + int64_t(slot) * slot_part(c.n);
    file_->wait(file_->read(buf, slot_part(c.n), at));
    f(buf + (lo - c.begin) * slot_bytes_, lo - begin, hi - lo);
    if (write_back) file_->wait(file_->write(buf, slot_part(c.n), at));
  }
}

void OffloadEngine::read_params(float* dst) {
  if (!disk_.params) {
    std::memcpy(dst, params_.data(), size_t(numel_) * 4);
    return;
  }
  for_each_record(false, [&](const Chunk& c, char* rec) { std::memcpy(dst + c.begin, rec, size_t(c.n) * 4); });
}

void OffloadEngine::start_unit_read(int u) {
  ZT_ASSERT(!free_units_.empty() || int(reads_.size() + held_.size()) < disk_.param_buffer_count,
            "offload: no unit buffer free");
  UnitRead r;
  if (!free_units_.empty()) {
    r.buf = std::move(free_units_.back());
    free_units_.pop_back();
  } else {
    r.buf = io_buffer(unit_buffer_bytes(), MemCategory::parameters);
  }
  for (const Chunk& c : chunks_)
    if (c.unit == u)
      r.tickets.push_back(file_->read(r.buf.as<float>() + (c.begin - units_[u].begin), param_part(c.n), c.file_offset));
  reads_.emplace(u, std::move(r));
}

void OffloadEngine::finish_unit_read(int u) {
  Held& h = held_[u];
  ++h.uses;
  auto it = reads_.find(u);
  if (it == reads_.end()) return;  // held already (the tied LM head's embedding)
  const auto t0 = std::chrono::steady_clock::now();
  for (AsyncFile::Ticket t : it->second.tickets) file_->wait(t);
  param_wait_s_ += seconds_since(t0);
  h.buf = std::move(it->second.buf);
  reads_.erase(it);
}

// Checkpoints: every tensor whole, once the step in flight has finished. Parameters on disk are
// read into the gradient buffer (the same size, and dead between steps: begin_step zeroes it
// again), so a save or the final export holds no more memory than training; loading writes them
// back record by record.
void OffloadEngine::set_state_pieces() {
  std::vector<optim::StateSpan> spans;
  float* base = disk_.params ? grads_.as<float>() : params_.as<float>();
  for (const ParamInfo& p : model_.params().list()) {
    params_state_.pieces.push_back({p.name, p.shape, "params", {0, p.numel}, base + p.offset});
    spans.push_back({p.name, p.shape, 0, p.numel, p.offset});
  }
  opt_->set_state_spans(std::move(spans));
  params_state_.before_save = [this] {
    finish_stream();  // the step in flight writes what the pieces show
    if (!disk_.params) return;
    read_params(grads_.as<float>());
    stream_zeroes_grads_ = false;  // the buffer holds parameters now: begin_step zeroes it
  };
  params_state_.before_load = [this] {
    finish_stream();
    stream_zeroes_grads_ = false;  // disk_.params: the buffer takes the loaded parameters
  };
  params_state_.after_load = [this] {
    if (!disk_.params) return;
    const float* src = grads_.as<float>();
    for_each_record(true, [&](const Chunk& c, char* rec) { std::memcpy(rec, src + c.begin, size_t(c.n) * 4); });
  };
}

nlohmann::json OffloadEngine::describe() const {
  const_cast<OffloadEngine*>(this)->finish_stream();  // the figures of the last step too
  AioStats st = file_->stats();
  st.bytes_read -= initial_.bytes_read;
  st.bytes_written -= initial_.bytes_written;
  st.busy_seconds -= initial_.busy_seconds;
  const double steps = double(std::max<int64_t>(1, steps_));
  const int64_t moved = st.bytes_read + st.bytes_written;
  return {{"stage", options_.stage},
          {"ranks", 1},
          {"offload_nvme",
           {{"optimizer", disk_.optimizer},
            {"params", disk_.params},
            {"file", file_->path()},
            {"o_direct", file_->direct()},
            {"file_bytes", file_bytes_},
            {"chunk_elements", chunk_elems_},
            {"chunks", chunks_.size()},
            {"step_windows", windows_.size()},
            {"window_bytes", record_bytes(chunk_elems_)},
            {"unit_buffers", disk_.params ? disk_.param_buffer_count : 0},
            {"unit_buffer_bytes", disk_.params ? unit_buffer_bytes() : 0},
            {"bytes_read", st.bytes_read},
            {"bytes_written", st.bytes_written},
            {"io_busy_s", st.busy_seconds},
            {"io_GBps", st.busy_seconds > 0 ? double(moved) / st.busy_seconds / 1e9 : 0.0},
            {"optimizer_steps", steps_},
            {"bytes_per_step", double(moved) / steps},
            {"param_read_wait_s", param_wait_s_ / steps},
            {"step_stream_s", step_s_ / steps},
            {"step_read_wait_s", wait_s_ / steps},
            {"step_update_s", update_s_ / steps}}}};
}

}  // namespace nvme

// Window sizes. Without a cap: chunks of at most kDefaultChunk elements (and sub_group_size). With
// --max_host_memory: what stays resident (the gradients; the parameters unless offload_param) and
// the unit buffers come first, and the step's buffer_count windows get the rest; too little for the
// smallest useful window is one error naming each need.
OffloadPlan plan_offload(const std::vector<int64_t>& units, int slots, int64_t slot_bytes, const DiskOffload& d) {
  OffloadPlan p;
  int64_t numel = 0;
  for (int64_t n : units) p.largest_unit = std::max(p.largest_unit, n), numel += n;
  if (d.params) {
    ZT_CHECK(p.largest_unit <= d.param_buffer_size, "offload_param.buffer_size ", d.param_buffer_size,
             " elements is smaller than the largest unit (", p.largest_unit, " parameters); raise it");
    ZT_CHECK(int64_t(d.param_buffer_count) * p.largest_unit <= d.max_in_cpu, "offload_param.max_in_cpu ", d.max_in_cpu,
             " elements is below buffer_count (", d.param_buffer_count, ") x the largest unit (", p.largest_unit,
             "); raise it or lower buffer_count");
  }
  p.grads = numel * 4;
  p.resident_params = d.params ? 0 : numel * 4;
  p.unit_buffers = d.params ? d.param_buffer_count * nvme::unit_buffer_bytes_of(p.largest_unit) : 0;
  const int64_t per_elem = (d.params ? 4 : 0) + slots * slot_bytes;
  const int64_t unit_cap = nvme::round_up(p.largest_unit, nvme::kChunkQuantum);
  // zero_optimization.sub_group_size bounds a chunk, as it bounds DeepSpeed's swapped sub-groups.
  const int64_t group = std::max(nvme::kChunkQuantum, d.sub_group_size / nvme::kChunkQuantum * nvme::kChunkQuantum);
  p.chunk_elements = std::min({nvme::kDefaultChunk, unit_cap, group});
  if (d.host_budget && per_elem > 0) {
    const int64_t budget = *d.host_budget;
    const int64_t fit = (budget - p.grads - p.resident_params - p.unit_buffers) / (d.buffer_count * per_elem) /
                        nvme::kChunkQuantum * nvme::kChunkQuantum;
    ZT_CHECK(fit >= std::min(nvme::kMinChunk, unit_cap), d.budget_source, " leaves ",
             budget > 0 ? format_bytes(double(budget)) : std::string("nothing"),
             " for the offload engine, which needs ", format_bytes(double(p.grads)), " for the fp32 gradients",
             p.resident_params
                 ? str_cat(" + ", format_bytes(double(p.resident_params)), " for the fp32 parameters in memory")
                 : "",
             p.unit_buffers ? str_cat(" + ", format_bytes(double(p.unit_buffers)), " for ", d.param_buffer_count,
                                      " unit buffers (the largest unit: ", p.largest_unit, " parameters)")
                            : "",
             " + at least ", format_bytes(double(d.buffer_count * per_elem * std::min(nvme::kMinChunk, unit_cap))),
             " for ", d.buffer_count, " step windows",
             d.params ? "" : "; offload the parameters too (offload_param nvme, --zero_stage 3)", ", or raise the cap");
    p.chunk_elements = std::min({fit, unit_cap, group});
  }
  p.windows = d.buffer_count *
              std::max<int64_t>(
                  nvme::round_up(nvme::record_bytes_of(p.chunk_elements, d.params, slots, slot_bytes), nvme::kAlign),
                  int64_t(1) << 20);
  for (int64_t n : units)
    for (int64_t at = 0; at < n; at += p.chunk_elements)
      p.file_bytes += nvme::record_bytes_of(std::min(p.chunk_elements, n - at), d.params, slots, slot_bytes);
  return p;
}

std::unique_ptr<DataParallel> make_offload_engine(Transformer& model, const dist::ProcessGrid& grid,
                                                  const DataParallelOptions& opt) {
  return std::make_unique<nvme::OffloadEngine>(model, grid, opt);
}

}  // namespace zt::parallel
