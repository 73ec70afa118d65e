// flash_checkpoint.h: --flash_checkpoint (docs/fault-tolerance.md#flash-checkpoints). At a save
// the training loop stops only while each rank copies its state into its shared-memory snapshot
// (checkpoint/flash_snapshot.h); a background thread then seals the snapshot and writes the
// rank's shard into checkpoint-N.tmp/ (the format of checkpoint.h), paced over half the save
// interval (core/file_io.h's WritePacing), and once every rank's shard
// is written (agreed at a step boundary, in the trainer's vote) the chief's thread seals the folder
// (JSON files, checksums.json, rename) and prunes. Nothing in the background is a collective.
// On restart with --resume_from_checkpoint latest, a complete snapshot newer than the newest
// persisted checkpoint on every rank is loaded instead, and persisted at once.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint/flash_snapshot.h"
#include "checkpoint/run_folder.h"
#include "dist/communicator.h"
#include "models/config.h"

namespace zt {

struct FlashOptions {
  std::string output_dir;
  ModelConfig cfg;
  std::vector<std::pair<std::string, std::string>> extra_files;  // the chief's side files
  int64_t save_total_limit = 0;
  // Test hook (ZT_TEST_FLASH_PAUSE=copy:N or persist:N): pause (sleep) in the snapshot copy or
  // the persist of step N after printing a line, so a test can kill -9 there.
  std::string test_pause;
};

class FlashCheckpointer {
 public:
  FlashCheckpointer(dist::Communicator& world, FlashOptions o);
  ~FlashCheckpointer();  // stops the thread after its current job; leaves the snapshot in place

  // Resume, first part (a collective): opens the snapshot of run `run_id` and checks that every
  // rank holds a complete one of the same save, from this world, of this model (a rank whose
  // snapshot is unusable says why). Returns that save's step, -1 if none; *save_id its id.
  // `rec` (the folder's run.json, read by the chief; unused on other ranks): the snapshot must be
  // a save of its current attempt's lineage.
  int64_t probe(const std::string& run_id, const RunRecord& rec, std::string* save_id);
  // Second part, on every rank after a successful probe: the components load from the snapshot.
  // `disk_step` is the newest checkpoint's step (-1: none) for the message; `persisted`: the
  // checkpoint of the snapshot's step is this very save (then it is not written again).
  std::unique_ptr<StateReader> adopt(int64_t disk_step, bool persisted);
  int64_t resumed_step() const { return resumed_step_; }
  // A fresh start over a folder whose previous run was `run_id`: its snapshot is removed.
  void forget_run(const std::string& run_id);
  // Binds to the run's snapshot file (after the run id is known; keeps the one try_resume
  // opened when it is the same file) and starts, in the background, persisting a resumed
  // snapshot and reserving shared memory for `data_bytes` of state.
  void start(const std::string& run_id, uint64_t data_bytes);

  // A collective at the same step on every rank: waits for the previous persist if it is not
  // done, copies the state into shared memory and queues its persist. Where every core runs a
  // training thread the training threads copy, here; with a core to spare the background thread
  // copies beside the next step's forward and backward, which only read what it copies.
  void snapshot(int64_t step, const StateCollector& c, const StateShard& shard, const std::string& save_id);
  // Before an optimizer update (which changes the state being copied): waits for the copy.
  // The chief then prints what the save cost the training loop.
  void wait_copied();
  // For the trainer's vote at each step boundary: this rank's shard is not written yet.
  bool shard_pending();
  // After the vote: `any_pending` false means every rank's shard is written; the chief seals.
  void after_vote(bool any_pending);
  // Waits until the last snapshot is persisted and sealed (a collective).
  void drain();
  // The newest snapshot (after drain), to load from; nullptr when none was taken or resumed.
  std::unique_ptr<StateReader> last_snapshot();
  // drain, then remove the snapshot file (a normal end, or a graceful stop).
  void finish();
  double last_stall_s() const { return stall_s_; }

 private:
  enum class Phase { idle, shard_writing, sealing };
  void run_worker();
  // `counted`: its CPU belongs to the save in progress (the reservation of shared memory's does not).
  void post(std::function<void()> job, bool counted = true);
  void wait_idle_queue();
  void reset_job_cpu();
  void rethrow();
  void begin_persist(int64_t step, const std::string& save_id);
  void pause_if(const char* where, int64_t step) const;
  void persist_files(int64_t step);
  void report();

  dist::Communicator& world_;
  FlashOptions options_;
  bool chief_;
  std::unique_ptr<FlashSnapshot> snap_;
  Phase phase_ = Phase::idle;
  int64_t pending_step_ = -1, resumed_step_ = -1;
  bool resumed_persisted_ = false;  // the resumed snapshot's checkpoint exists already
  std::string pending_save_id_;
  nlohmann::json pending_state_;  // the chief's JSON state of the pending save
  std::atomic<bool> shard_done_{false}, seal_done_{false};
  // The last save: seconds the loop stopped at the save and waiting for the copy, the copy's own
  // seconds and bytes, and whether the chief still has to print them.
  double stall_s_ = 0, save_s_ = 0, copy_s_ = 0, queue_s_ = 0;  // queue_s_: waiting for the previous persist
  uint64_t copy_bytes_ = 0;
  std::chrono::steady_clock::time_point saved_at_;
  bool copied_ = true, report_pending_ = false, copy_inline_ = false;
  std::chrono::steady_clock::time_point last_save_ = std::chrono::steady_clock::now();  // or the start
  double pace_s_ = 0;               // the seconds the current persist is spread over
  std::atomic<bool> hurry_{false};  // the loop waits for the persist: no pacing
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, bool>> jobs_;  // with `counted`
  bool busy_ = false, quit_ = false;
  double job_cpu_s_ = 0;  // CPU seconds of the worker's jobs finished since the last save began
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace zt
