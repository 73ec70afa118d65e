// run_folder.h: a run's --output_dir around its checkpoint-N folders (docs/checkpoints.md):
//   .ztrain.lock  one run at a time: rank 0 holds an exclusive flock() on it for the run's
//                 lifetime (the kernel releases it when the process ends, however it ends);
//                 it holds "pid host" of the holder, for the error a second run gets;
//   run.json      the folder's current run: its run id (random, chosen at a fresh start and
//                 carried by checkpoints across resumes), the attempt number (one more at every
//                 start) and the checkpoint each attempt resumed from; written at every start;
//   `latest` and --save_total_limit: checkpoints ranked by the lineage of the current attempt
//                 (its own checkpoints, then its parent's up to the step it resumed from, ...),
//                 then the others (other runs, abandoned attempts) by attempt; within each by
//                 the step recorded in trainer_state.json, never by folder name. `latest` is
//                 the first intact one; pruning removes from the other end.
// Depends on core and checkpoint_meta only (checkpoint ids are read from trainer_state.json as JSON).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zt {

class OutputDirLock {
 public:
  // Creates output_dir if needed and locks output_dir/.ztrain.lock; an Error naming the
  // holder's pid and host when another process holds it.
  // `wait_s`: how long to keep trying while another process holds the lock (an elastic restart
  // waits for the failed attempt's processes, still exiting, to let go of it).
  explicit OutputDirLock(const std::string& output_dir, double wait_s = 0);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  static constexpr const char* kFileName = ".ztrain.lock";

 private:
  int fd_ = -1;
};

// What a checkpoint records about the run that wrote it (trainer_state.json: ztrain.run_id,
// ztrain.attempt, global_step).
struct CheckpointRef {
  std::string run_id;
  int64_t attempt = 0;
  int64_t step = 0;
};

// The folder's run.json.
struct RunRecord {
  struct Parent {
    int64_t attempt = 0, step = 0;
  };
  // A fork (a resume from a checkpoint of another folder) starts a run of its own: a new run id,
  // with the checkpoint it came from recorded here.
  struct Fork {
    std::string run_id, checkpoint;
    int64_t attempt = 0, step = 0;
  };
  std::string run_id;  // "" when the folder has no (readable) run.json
  int64_t attempt = 0;
  std::map<int64_t, std::optional<Parent>> parents;  // per attempt: the checkpoint it resumed from
  std::optional<Fork> forked_from;
};

// run.json's contents, and back (an Error when a field is missing or of the wrong type).
nlohmann::json run_record_to_json(const RunRecord& r);
RunRecord run_record_from_json(const nlohmann::json& j);
// Whether a save of (run id, attempt, step) belongs to the lineage of the record's current
// attempt: its own saves, its parent attempt's up to the step it resumed from, and so on.
bool run_record_in_lineage(const RunRecord& r, const CheckpointRef& save);

// Reads output_dir/run.json; an absent or damaged one (a warning on stderr) reads as empty.
RunRecord run_record_read(const std::string& output_dir);
// The record of a run starting now in output_dir: a fresh start (resumed == nullptr) gets a new
// run id, a resume carries its checkpoint's; the attempt is one more than any the folder knows.
// A resume from `resumed_dir` outside output_dir is a fork: a new run id, the parent recorded.
RunRecord run_record_start(const std::string& output_dir, const CheckpointRef* resumed,
                           const std::string& resumed_dir = "");
// Writes run.json atomically (with this process's pid and host, for people).
void run_record_write(const std::string& output_dir, const RunRecord& r);

// N of a checkpoint-N folder (the last path component); -1 for any other name.
int64_t checkpoint_step_of(const std::string& dir);

// The first intact checkpoint of output_dir in the order above; "" if none. Damaged ones are
// reported on stderr and skipped, and so (with a warning) is falling back to another run's.
// save_id (optional): the chosen checkpoint's, from the verification just done.
std::string checkpoint_find_latest(const std::string& output_dir, std::string* save_id = nullptr);
// The checkpoint-N folder with the highest step whose trainer_state.json reads, without
// verifying it (step -1 when there is none); *save_id its recorded save id ("" if none). Cheap:
// a flash restart compares its snapshot with it before deciding whether to verify anything.
CheckpointRef checkpoint_newest_unverified(const std::string& output_dir, std::string* save_id);
// Removes checkpoints beyond the first `keep` in the order above (0 = keep all), and every
// half-written checkpoint-N.tmp folder.
// `protect` (a checkpoint folder, "" = none) is never removed and does not count against keep
// (HF keeps the best model's checkpoint under --load_best_model_at_end the same way).
void checkpoint_prune(const std::string& output_dir, int64_t keep, const std::string& protect = "");
// Removes every checkpoint-N and checkpoint-N.tmp folder (--overwrite_output_dir). `inputs`
// (flag, path) are what the command reads: when one lies inside a folder to be removed, nothing
// is removed and an Error names the flag, the path and the folder.
void checkpoint_remove_all(const std::string& output_dir,
                           const std::vector<std::pair<std::string, std::string>>& inputs = {});

// 16 hex digits from std::random_device: run ids and save ids.
std::string random_id();

}  // namespace zt
