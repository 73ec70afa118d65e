// loader.h: the training data loader. It turns a memory-mapped token file into the
// micro-batches of one rank, produced ahead of time by a background thread so the compute
// threads never wait on page faults or copying; the time the trainer does wait is measured.
//
// Order. Global sequence g (counting from the start of training) is window g mod W through
// WindowSampler (file order with --no_shuffle, else a seeded per-epoch permutation). Optimizer
// step s consumes sequences s*S ... s*S+S-1, S = B * accumulation * world. Rank r's micro-batch
// m of step s holds sequences s*S + (m*world + r)*B ... +B-1: exactly the micro-batch
// m*world + r that one process with world times the accumulation would use, so any split over
// ranks and micro-batches sees the same sequences per step. The cursor is therefore one number,
// the next global sequence, and resuming at step s continues with the exact next batch.
//
// Packing. With `packing`, each row also gets position ids that restart at 0 after every EOS
// token, so the model's attention does not cross document boundaries (HF's position_ids
// packing); without it, positions are not produced and the model uses 0..T-1.
//
// Channels. A source may mix several named files (data/blend.h); each micro-batch then says
// which channel every row came from, for the per-channel losses.
//
// What it deliberately is not: no dynamic batching or padding.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/state.h"
#include "data/token_data.h"

namespace zt {

struct LoaderConfig {
  int B = 1;             // sequences per micro-batch
  int T = 1;             // sequence length
  int accumulation = 1;  // micro-batches per optimizer step on each rank
  int rank = 0, world = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool packing = false;
  int64_t eos_id = -1;  // document separator for packing
  int depth = 3;        // micro-batches prepared ahead
  // Steps of data skipped (a loss-spike rollback, optim/spike_guard.h): optimizer step k reads
  // the sequences of step k + step_offset.
  int64_t step_offset = 0;
  // The current data stage (DataStage below): its window 0 is global sequence stage_first_sequence
  // and, in file order, starts at token stage_first_token. Both 0 for a run of one stage.
  int64_t stage_first_sequence = 0, stage_first_token = 0;
};

// Where the loader's sequences come from: a token file's windows (below) or SFT rows
// (data/sft_data.h). Global sequence g maps to a sequence through the source's own seeded order.
class SequenceSource {
 public:
  virtual ~SequenceSource() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int length() const = 0;          // T
  virtual bool has_positions() const = 0;  // rows pack several documents (positions restart)
  // Fills `count` rows (count, T) from global sequence g; positions only when has_positions().
  virtual void fill(int32_t* inputs, int32_t* targets, int32_t* positions, int64_t g, int count) = 0;
  // Targets that count (not kIgnoreIndex) in global sequences [g, g + count): the loss's
  // denominator for a step. Thread-safe (the loader thread calls it while fill() runs).
  virtual int64_t count_targets(int64_t g, int64_t count) const = 0;
  // Sources that mix named channels (data/blend.h): how many, and the channel of each of the
  // `count` rows from global sequence g (called by the loader right after fill() for them).
  virtual int num_channels() const { return 1; }
  virtual void fill_channels(int32_t* channels, int64_t g, int count) {}
};

struct MicroBatch {
  std::vector<int32_t> inputs, targets;  // (B, T)
  std::vector<int32_t> positions;        // (B, T) with packing, else empty
  std::vector<int32_t> channels;         // (B) each row's channel when the source has several, else empty
  int64_t step = 0;
  int micro = 0;
  int64_t step_targets = 0;  // counted targets in the whole optimizer step (all ranks, all micro-batches)
  const int32_t* pos() const { return positions.empty() ? nullptr : positions.data(); }
};

class DataLoader {
 public:
  // Starts producing at optimizer step `first_step`. The source must outlive the loader.
  DataLoader(const TokenFile& f, const LoaderConfig& c, int64_t first_step);
  DataLoader(SequenceSource& source, const LoaderConfig& c, int64_t first_step);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_windows() const { return num_windows_; }
  int64_t sequences_per_step() const { return int64_t(config_.B) * config_.accumulation * config_.world; }
  // The next micro-batch in order (blocks until it is ready). Valid until the next call.
  // Throws what the producer thread hit (e.g. the token file changed, TokenFile::check_unchanged).
  const MicroBatch& next();
  // Seconds the caller spent blocked in next() so far.
  double wait_seconds() const { return wait_s_; }
  // First global sequence of rank `rank`'s micro-batch `micro` of `step`.
  static int64_t first_sequence(const LoaderConfig& c, int64_t step, int micro);

 private:
  void start();
  void produce();
  void fill(MicroBatch& mb, int64_t step, int micro);

  std::unique_ptr<SequenceSource> owned_;  // the token file's windows, when built from a TokenFile
  SequenceSource* source_;
  LoaderConfig config_;
  int64_t num_windows_;
  std::vector<MicroBatch> ring_;
  int64_t produced_ = 0, consumed_ = 0;  // micro-batches, counted from first_step
  int64_t first_step_;
  bool stop_ = false;
  std::exception_ptr error_;  // the producer's failure (a changed token file), rethrown by next()
  std::mutex mu_;
  std::condition_variable cv_;
  double wait_s_ = 0;
  std::thread worker_;
};

// A stretch of a run at one sequence geometry. A run starts with one; resuming at another
// --model_max_length or batch (a long-context stage, train/context_stage.h) starts the next.
struct DataStage {
  int64_t step = 0;            // its first optimizer step
  int T = 0;                   // sequence length
  int64_t per_step = 0;        // sequences per optimizer step
  int64_t first_sequence = 0;  // the global sequence (data skipped by rollbacks included) of its window 0
  int64_t first_token = 0;     // where its window 0 starts in file order (0 when shuffled)
  bool operator==(const DataStage&) const = default;
};
nlohmann::json data_stages_json(const std::vector<DataStage>& stages);

// The loader's resumable position in checkpoints: the next global sequence (the order is a
// pure function of the seed, which core/rng_state.h saves, and the step), with what fixes
// the meaning of that number: sequences per step, their length, shuffling, and the data stages
// before this one. Loading checks those against this run's and restores the position; with
// `stages` given, a checkpoint of another geometry loads too and switched() says so (the
// trainer then starts a new stage or refuses), else that is an error.
class DataCursor final : public Stateful {
 public:
  DataCursor(int64_t sequences_per_step, int sequence_length, bool shuffle, int64_t step = 0,
             std::vector<DataStage>* stages = nullptr)
      : per_step_(sequences_per_step),
        T_(sequence_length),
        shuffle_(shuffle),
        next_(step * sequences_per_step),
        stages_(stages) {}
  int64_t step() const { return next_ / per_step_; }  // the optimizer step it starts
  // After load_state: the checkpoint's geometry differed from this run's.
  bool switched() const { return switched_; }
  void save_state(StateWriter& w) const override;
  void load_state(StateReader& r) override;

 private:
  int64_t per_step_;
  int T_;
  bool shuffle_;
  int64_t next_;  // the next global sequence
  std::vector<DataStage>* stages_;
  bool switched_ = false;
};

// Position ids for packed rows: positions[t] = 0 at t = 0 and after every EOS input token,
// else positions[t-1] + 1. A row that starts mid-document counts from 0 at its first token.
void packing_positions(int32_t* positions, const int32_t* inputs, int B, int T, int64_t eos_id);

}  // namespace zt
