// loader.cpp: see loader.h.
#include "data/loader.h"

#include <chrono>

#include "core/error.h"

namespace zt {

namespace {

// A token file's windows as a sequence source; with packing, positions restart after EOS.
class TokenWindows final : public SequenceSource {
 public:
  TokenWindows(const TokenFile& f, const LoaderConfig& c)
      : s_(f, c.T, c.shuffle, c.seed, c.stage_first_token), config_(c) {}
  int64_t num_sequences() const override { return s_.num_windows(); }
  int length() const override { return config_.T; }
  bool has_positions() const override { return config_.packing; }
  void fill(int32_t* in, int32_t* tg, int32_t* pos, int64_t g, int count) override {
    s_.fill(in, tg, g - config_.stage_first_sequence, count);
    if (pos) packing_positions(pos, in, count, config_.T, config_.eos_id);
  }
  int64_t count_targets(int64_t, int64_t count) const override { return count * config_.T; }

 private:
  WindowSampler s_;
  LoaderConfig config_;
};

}  // namespace

void packing_positions(int32_t* positions, const int32_t* inputs, int B, int T, int64_t eos_id) {
  for (int b = 0; b < B; ++b) {
    const int32_t* in = inputs + int64_t(b) * T;
    int32_t* pos = positions + int64_t(b) * T;
    pos[0] = 0;
    for (int t = 1; t < T; ++t) pos[t] = in[t - 1] == eos_id ? 0 : pos[t - 1] + 1;
  }
}

nlohmann::json data_stages_json(const std::vector<DataStage>& stages) {
  nlohmann::json j = nlohmann::json::array();
  for (const DataStage& s : stages)
    j.push_back({{"step", s.step},
                 {"sequence_length", s.T},
                 {"sequences_per_step", s.per_step},
                 {"first_sequence", s.first_sequence},
                 {"first_token", s.first_token}});
  return j;
}

namespace {

// The checkpoint's stages, each checked: a damaged list must not steer the reads.
std::vector<DataStage> read_stages(StateReader& r) {
  const nlohmann::json* j = r.find_json("ztrain.data_stages");
  if (!j) return {};
  const std::string bad = r.source() + ": \"ztrain.data_stages\" is malformed; the checkpoint is damaged";
  ZT_CHECK(j->is_array() && j->size() <= 4096, bad);
  std::vector<DataStage> stages;
  for (const nlohmann::json& e : *j) {
    ZT_CHECK(e.is_object(), bad);
    auto num = [&](const char* k, int64_t lo, int64_t hi) {
      ZT_CHECK(e.contains(k) && e[k].is_number_integer(), bad);
      const int64_t v = e[k].get<int64_t>();
      ZT_CHECK(v >= lo && v <= hi, bad);
      return v;
    };
    DataStage s;
    s.step = num("step", stages.empty() ? 0 : stages.back().step + 1, INT64_MAX / 2);
    s.T = int(num("sequence_length", 1, 1 << 30));
    s.per_step = num("sequences_per_step", 1, INT64_MAX / (int64_t(1) << 32));
    s.first_sequence = num("first_sequence", 0, INT64_MAX / 2);
    s.first_token = num("first_token", 0, INT64_MAX / 2);
    stages.push_back(s);
  }
  return stages;
}

}  // namespace

void DataCursor::save_state(StateWriter& w) const {
  w.put_json("ztrain.sequences_consumed", next_);
  w.put_json("ztrain.sequences_per_step", per_step_);
  w.put_json("ztrain.sequence_length", T_);
  w.put_json("ztrain.shuffle", shuffle_);
  // A run of one stage writes no list (its checkpoints are as before stages existed).
  if (stages_ && stages_->size() > 1) w.put_json("ztrain.data_stages", data_stages_json(*stages_));
}

void DataCursor::load_state(StateReader& r) {
  const int64_t per_step = r.get_int("ztrain.sequences_per_step"), T = r.get_int("ztrain.sequence_length");
  switched_ = per_step != per_step_ || T != T_;
  ZT_CHECK(!switched_ || stages_, r.source(), " was saved with ", per_step, " sequences of ", T,
           " tokens per step; resume with the same batch size, accumulation and --model_max_length");
  ZT_CHECK(r.get_bool("ztrain.shuffle") == shuffle_, r.source(), " was saved ", shuffle_ ? "with" : "without",
           " --no_shuffle; resume the same way to continue its data order");
  const int64_t next = r.get_int("ztrain.sequences_consumed");
  ZT_CHECK(per_step > 0 && T > 0 && next >= 0 && next % per_step == 0, r.source(),
           ": \"ztrain.sequences_consumed\" is ", next, ", not a whole number of steps; the checkpoint is damaged");
  next_ = next / per_step * per_step_;  // the same step in this run's geometry
  if (!stages_) return;
  *stages_ = read_stages(r);
  // Checkpoints of one stage carry no list: their stage started at step 0 at their geometry.
  if (stages_->empty()) stages_->push_back({0, int(T), per_step, 0, 0});
  ZT_CHECK(stages_->back().T == T && stages_->back().per_step == per_step && stages_->back().step <= next / per_step,
           r.source(), ": \"ztrain.data_stages\" does not end at the checkpoint's geometry; the checkpoint is damaged");
}

int64_t DataLoader::first_sequence(const LoaderConfig& c, int64_t step, int micro) {
  const int64_t per_step = int64_t(c.B) * c.accumulation * c.world;
  return (step + c.step_offset) * per_step + (int64_t(micro) * c.world + c.rank) * c.B;
}

DataLoader::DataLoader(const TokenFile& f, const LoaderConfig& c, int64_t first_step)
    : owned_(std::make_unique<TokenWindows>(f, c)), source_(owned_.get()), config_(c), first_step_(first_step) {
  ZT_CHECK(!c.packing || c.eos_id >= 0, "--packing needs the tokenizer's EOS id to find document boundaries");
  start();
}

DataLoader::DataLoader(SequenceSource& source, const LoaderConfig& c, int64_t first_step)
    : source_(&source), config_(c), first_step_(first_step) {
  ZT_CHECK(source.length() == c.T, "data loader: the source's sequence length differs from T");
  start();
}

void DataLoader::start() {
  const LoaderConfig& c = config_;
  ZT_CHECK(c.B > 0 && c.T > 0 && c.accumulation > 0 && c.world > 0 && c.rank >= 0 && c.rank < c.world,
           "data loader: invalid batch geometry");
  num_windows_ = source_->num_sequences();
  ring_.resize(size_t(std::max(2, c.depth)));
  for (auto& mb : ring_) {
    mb.inputs.resize(size_t(c.B) * c.T);
    mb.targets.resize(size_t(c.B) * c.T);
    if (source_->has_positions()) mb.positions.resize(size_t(c.B) * c.T);
    if (source_->num_channels() > 1) mb.channels.resize(size_t(c.B));
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
  source_->fill(mb.inputs.data(), mb.targets.data(), mb.positions.empty() ? nullptr : mb.positions.data(),
                first_sequence(config_, step, micro), config_.B);
  if (!mb.channels.empty()) source_->fill_channels(mb.channels.data(), first_sequence(config_, step, micro), config_.B);
  mb.step_targets = source_->count_targets((step + config_.step_offset) * sequences_per_step(), sequences_per_step());
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
      fill(ring_[size_t(k % n)], first_step_ + k / config_.accumulation, int(k % config_.accumulation));
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
