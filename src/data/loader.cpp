// loader.cpp: see loader.h.
#include "data/loader.h"

#include <chrono>

#include "core/error.h"

namespace zt {

void packing_positions(int32_t* positions, const int32_t* inputs, int B, int T, int64_t eos_id) {
  for (int b = 0; b < B; ++b) {
    const int32_t* in = inputs + int64_t(b) * T;
    int32_t* pos = positions + int64_t(b) * T;
    pos[0] = 0;
    for (int t = 1; t < T; ++t) pos[t] = in[t - 1] == eos_id ? 0 : pos[t - 1] + 1;
  }
}

void DataCursor::save_state(StateWriter& w) const {
  w.put_json("ztrain.sequences_consumed", next_);
  w.put_json("ztrain.sequences_per_step", per_step_);
  w.put_json("ztrain.sequence_length", T_);
  w.put_json("ztrain.shuffle", shuffle_);
}

void DataCursor::load_state(StateReader& r) {
  const int64_t per_step = r.get_int("ztrain.sequences_per_step"), T = r.get_int("ztrain.sequence_length");
  ZT_CHECK(per_step == per_step_ && T == T_, r.source(), " was saved with ", per_step, " sequences of ", T,
           " tokens per step; resume with the same batch size, accumulation and --model_max_length");
  ZT_CHECK(r.get_bool("ztrain.shuffle") == shuffle_, r.source(), " was saved ", shuffle_ ? "with" : "without",
           " --no_shuffle; resume the same way to continue its data order");
  const int64_t next = r.get_int("ztrain.sequences_consumed");
  ZT_CHECK(next >= 0 && next % per_step_ == 0, r.source(), ": \"ztrain.sequences_consumed\" is ", next,
           ", not a whole number of steps; the checkpoint is damaged");
  next_ = next;
}

int64_t DataLoader::first_sequence(const LoaderConfig& c, int64_t step, int micro) {
  const int64_t per_step = int64_t(c.B) * c.accumulation * c.world;
  return step * per_step + (int64_t(micro) * c.world + c.rank) * c.B;
}

DataLoader::DataLoader(const TokenFile& f, const LoaderConfig& c, int64_t first_step)
    : f_(f), c_(c), sampler_(f, c.T, c.shuffle, c.seed), num_windows_(sampler_.num_windows()), first_step_(first_step) {
  ZT_CHECK(c.B > 0 && c.T > 0 && c.accumulation > 0 && c.world > 0 && c.rank >= 0 && c.rank < c.world,
           "data loader: invalid batch geometry");
  ZT_CHECK(!c.packing || c.eos_id >= 0, "--packing needs the tokenizer's EOS id to find document boundaries");
  ring_.resize(size_t(std::max(2, c.depth)));
  for (auto& mb : ring_) {
    mb.inputs.resize(size_t(c.B) * c.T);
    mb.targets.resize(size_t(c.B) * c.T);
    if (c.packing) mb.positions.resize(size_t(c.B) * c.T);
  }
  worker_ = std::thread([this] { produce(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void DataLoader::fill(MicroBatch& mb, int64_t step, int micro) {
  mb.step = step;
  mb.micro = micro;
  sampler_.fill(mb.inputs.data(), mb.targets.data(), first_sequence(c_, step, micro), c_.B);
  if (c_.packing) packing_positions(mb.positions.data(), mb.inputs.data(), c_.B, c_.T, c_.eos_id);
}

// The producer runs one slot ahead of the consumer at most ring size - 1 times: the slot the
// consumer holds (returned by the last next()) is never overwritten until next() is called again.
void DataLoader::produce() {
  const int64_t n = int64_t(ring_.size());
  for (;;) {
    int64_t k;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || produced_ < consumed_ + n - 1; });
      if (stop_) return;
      k = produced_;
    }
    try {
      fill(ring_[size_t(k % n)], first_step_ + k / c_.accumulation, int(k % c_.accumulation));
    } catch (...) {
      // Handed to the consumer: next() rethrows it in the training thread, where it is reported.
      std::lock_guard<std::mutex> l(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++produced_;
    }
    cv_.notify_all();
  }
}

const MicroBatch& DataLoader::next() {
  std::unique_lock<std::mutex> l(mu_);
  if (produced_ <= consumed_) {
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(l, [&] { return produced_ > consumed_ || error_; });
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (produced_ <= consumed_ && error_) std::rethrow_exception(error_);
  const MicroBatch& mb = ring_[size_t(consumed_ % int64_t(ring_.size()))];
  ++consumed_;
  l.unlock();
  cv_.notify_all();
  return mb;
}

}  // namespace zt
