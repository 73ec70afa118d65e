// flash_checkpoint.cpp: see flash_checkpoint.h.
#include "checkpoint/flash_checkpoint.h"

#include <omp.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <tuple>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/memory.h"
#include "core/hash.h"

namespace zt {
namespace fs = std::filesystem;
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// CPU seconds the calling thread has used: what the background work takes from training on a
// machine with no spare core, whatever the wall-clock noise.
double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace

FlashCheckpointer::FlashCheckpointer(dist::Communicator& world, FlashOptions o)
    : world_(world), options_(std::move(o)), chief_(world.rank() == 0) {
  worker_ = std::thread([this] { run_worker(); });
}

FlashCheckpointer::~FlashCheckpointer() {
  hurry_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  worker_.join();
}

void FlashCheckpointer::run_worker() {
  for (;;) {
    std::function<void()> job;
    bool counted = true;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return quit_ || !jobs_.empty(); });
      if (quit_) return;
      std::tie(job, counted) = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    const double cpu0 = thread_cpu_seconds();
    try {
      job();
    } catch (...) {
      std::lock_guard<std::mutex> l(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      if (counted) job_cpu_s_ += thread_cpu_seconds() - cpu0;
    }
    cv_.notify_all();
  }
}

void FlashCheckpointer::post(std::function<void()> job, bool counted) {
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.emplace_back(std::move(job), counted);
  }
  cv_.notify_all();
}

void FlashCheckpointer::reset_job_cpu() {
  std::lock_guard<std::mutex> l(mu_);
  job_cpu_s_ = 0;
}

void FlashCheckpointer::wait_idle_queue() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return jobs_.empty() && !busy_; });
}

// A failed background write (a full disk) ends the run on the training thread, named.
void FlashCheckpointer::rethrow() {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::swap(e, error_);
  }
  if (e) std::rethrow_exception(e);
}

void FlashCheckpointer::pause_if(const char* where, int64_t step) const {
  if (options_.test_pause != str_cat(where, ":", step)) return;
  std::fprintf(stderr, "ztrain: test hook: paused in the flash %s of step %lld\n", where, (long long)step);
  std::fflush(stderr);
  ::sleep(600);
}

int64_t FlashCheckpointer::probe(const std::string& run_id, const RunRecord& rec, std::string* save_id) {
  std::string why;
  bool ok = false;
  const std::string path =
      run_id.empty() ? std::string() : FlashSnapshot::path_for(options_.output_dir, run_id, world_.rank());
  if (!path.empty() && ::access(path.c_str(), F_OK) == 0) {
    snap_ = std::make_unique<FlashSnapshot>(path);
    ok = snap_->verify(&why);
    if (ok && (snap_->info().world != world_.size() || snap_->info().rank != world_.rank()))
      ok = false, why = str_cat("it was written by rank ", snap_->info().rank, " of ", snap_->info().world);
    if (ok) {
      const std::string k = config_first_difference(snap_->config(), config_resolved_json(options_.cfg));
      if (!k.empty()) ok = false, why = str_cat("it holds another model (config ", quote(k), " differs)");
    }
    // The chief's snapshot records the run and attempt that wrote it (the other ranks' do not):
    // a save outside the lineage of the folder's run (an abandoned attempt's, or another
    // run's) is never resumed, however new.
    if (ok && chief_) {
      const auto reader = snap_->reader();
      const nlohmann::json* id = reader->find_json("ztrain.run_id");
      const nlohmann::json* attempt = reader->find_json("ztrain.attempt");
      const CheckpointRef save{id && id->is_string() ? id->get<std::string>() : "",
                               attempt && attempt->is_number_integer() ? attempt->get<int64_t>() : -1,
                               snap_->info().step};
      if (!run_record_in_lineage(rec, save))
        ok = false, why = str_cat("its save (run ", save.run_id, ", attempt ", save.attempt, ", step ", save.step,
                                  ") is not in the lineage of ", options_.output_dir, "'s run (run.json: run ",
                                  rec.run_id, ", attempt ", rec.attempt, ")");
    }
    if (!ok)
      std::fprintf(stderr, "%sflash snapshot %s ignored: %s\n",
                   world_.size() > 1 ? str_cat("[rank ", world_.rank(), "] ").c_str() : "ztrain: ", path.c_str(),
                   why.c_str());
  }
  // Every rank must hold a complete snapshot of the same save (step and save id).
  const int64_t step = ok ? snap_->info().step : -1;
  const int64_t id = ok ? int64_t(hash64(snap_->info().save_id.data(), snap_->info().save_id.size()) >> 1) : -1;
  int64_t v[5] = {ok ? 1 : 0, step, -step, id, -id};
  if (world_.size() > 1) world_.all_reduce(v, 5, dist::ReduceOp::min);
  const bool same = v[0] == 1 && v[1] == -v[2] && v[3] == -v[4];
  if (!same) return -1;
  *save_id = snap_->info().save_id;
  return step;
}

std::unique_ptr<StateReader> FlashCheckpointer::adopt(int64_t disk_step, bool persisted) {
  resumed_step_ = snap_->info().step;
  resumed_persisted_ = persisted;
  if (chief_)
    std::printf("Resuming from the flash snapshot %s at step %lld (the newest persisted checkpoint: %s)\n",
                snap_->path().c_str(), (long long)resumed_step_,
                disk_step < 0 ? "none" : str_cat("step ", disk_step, persisted ? ", this save" : "").c_str());
  return snap_->reader();
}

void FlashCheckpointer::forget_run(const std::string& run_id) {
  if (!run_id.empty()) ::unlink(FlashSnapshot::path_for(options_.output_dir, run_id, world_.rank()).c_str());
}

void FlashCheckpointer::start(const std::string& run_id, uint64_t data_bytes) {
  const std::string path = FlashSnapshot::path_for(options_.output_dir, run_id, world_.rank());
  if (snap_ && snap_->path() != path) {
    snap_->unlink();  // another run's, not used
    snap_.reset();
  }
  if (!snap_) snap_ = std::make_unique<FlashSnapshot>(path);
  // Room in /dev/shm, checked here (a clear error) rather than found missing mid-run.
  struct stat st {};
  ::stat(path.c_str(), &st);
  struct statvfs vfs {};
  const uint64_t need = data_bytes + (2u << 20), have = uint64_t(st.st_blocks) * 512;
  if (::statvfs(fs::path(path).parent_path().c_str(), &vfs) == 0 && need > have) {
    const uint64_t avail = uint64_t(vfs.f_bavail) * vfs.f_frsize;
    ZT_CHECK(avail >= need - have, "--flash_checkpoint needs ", (need - have) >> 20, " MiB more in ",
             fs::path(path).parent_path().string(), " for rank ", world_.rank(), "'s snapshot but ", avail >> 20,
             " MiB are free; enlarge it (docker run --shm-size) or run without --flash_checkpoint");
  }
  if (resumed_step_ >= 0 && !resumed_persisted_) {
    if (chief_) checkpoint_begin(options_.output_dir, resumed_step_);
    world_.barrier();
    begin_persist(resumed_step_, snap_->info().save_id);
  } else if (resumed_step_ >= 0) {
    pending_step_ = resumed_step_;  // the snapshot a rollback returns to (its checkpoint exists)
    pending_save_id_ = snap_->info().save_id;
  }
  post([this, data_bytes] { snap_->reserve(data_bytes); }, /*counted=*/false);
  last_save_ = std::chrono::steady_clock::now();
}

// A resumed snapshot (sealed already) whose checkpoint does not exist yet.
void FlashCheckpointer::begin_persist(int64_t step, const std::string& save_id) {
  pending_step_ = step;
  pending_save_id_ = save_id;
  saved_at_ = std::chrono::steady_clock::now();
  reset_job_cpu();
  if (chief_) pending_state_ = snap_->state();
  shard_done_ = false;
  phase_ = Phase::shard_writing;
  post([this, step] {
    pause_if("persist", step);
    persist_files(step);
    shard_done_ = true;
  });
}

// The rank's checkpoint files, written from their images in the snapshot (no copy; paced by the
// caller's WritePacing, if any).
void FlashCheckpointer::persist_files(int64_t step) {
  for (const SnapshotFile& f : snap_->files())
    checkpoint_write_file_image(options_.output_dir, step, f.name, f.image, f.bytes, f.checksum);
}

void FlashCheckpointer::snapshot(int64_t step, const StateCollector& c, const StateShard& shard,
                                 const std::string& save_id) {
  const auto t0 = std::chrono::steady_clock::now();
  // With no core to spare (every one runs a training thread) the training threads copy, which
  // takes them less time than one background thread copying beside them would take from them; with
  // a spare core the background thread copies while the next step's forward and backward run.
  const int threads = omp_get_max_threads();
  copy_inline_ = threads >= available_cores();
  drain();  // the previous save's persist, if it is still going
  // The persist is paced over half the time since the previous save (at most 30 s): its CPU then
  // slows no step by much, and it is done well before the next save.
  pace_s_ = std::min(30.0, 0.5 * std::chrono::duration<double>(t0 - last_save_).count());
  last_save_ = t0;
  hurry_ = false;
  // The first save with a background copy does not wait for the reservation of shared memory
  // (posted at start-up, slow on a loaded machine): the copy queues behind it.
  if (copy_inline_) wait_idle_queue();
  saved_at_ = std::chrono::steady_clock::now();
  queue_s_ = std::chrono::duration<double>(saved_at_ - t0).count();
  reset_job_cpu();
  rethrow();
  if (chief_) checkpoint_begin(options_.output_dir, step);
  world_.barrier();  // the folder exists before any rank's thread writes into it
  pending_step_ = step;
  pending_save_id_ = save_id;
  if (chief_) pending_state_ = c.json;
  shard_done_ = false;
  phase_ = Phase::shard_writing;
  copy_bytes_ = 0;
  for (const StatePiece& p : c.pieces) copy_bytes_ += uint64_t(p.slice.count) * 4;
  const SnapshotInfo info{step, save_id, world_.rank(), world_.size(), shard};
  const std::vector<ShardFile> files = checkpoint_shard_files(shard, c.pieces, save_id, options_.cfg);
  auto persist = [this, step, bytes = copy_bytes_, pace = pace_s_] {
    snap_->seal();
    pause_if("persist", step);
    WritePacing pacing(bytes, pace, &hurry_);
    persist_files(step);
    shard_done_ = true;
  };
  if (copy_inline_) {
    const auto t = std::chrono::steady_clock::now();
    snap_->write(info, c, config_resolved_json(options_.cfg), threads, files, [&] { pause_if("copy", step); });
    copy_s_ = seconds_since(t);
    post(persist);
  } else {
    {
      std::lock_guard<std::mutex> l(mu_);
      copied_ = false;
    }
    // The pieces' data stays unchanged until wait_copied returns, before the next update.
    post([this, info, c, cfg = config_resolved_json(options_.cfg), files, persist] {
      const auto t = std::chrono::steady_clock::now();
      snap_->write(info, c, cfg, 1, files, [&] { pause_if("copy", info.step); });
      copy_s_ = seconds_since(t);
      {
        std::lock_guard<std::mutex> l(mu_);
        copied_ = true;
      }
      cv_.notify_all();
      persist();
    });
  }
  save_s_ = stall_s_ = seconds_since(t0);
  report_pending_ = true;
}

void FlashCheckpointer::wait_copied() {
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return copied_ || error_; });
  }
  rethrow();
  if (!report_pending_) return;
  stall_s_ += seconds_since(t0);
  report();
}

void FlashCheckpointer::report() {
  report_pending_ = false;
  if (!chief_) return;
  std::printf(
      "Flash checkpoint of step %lld: training stopped %.3f s (%.3f s at the save, of which %.3f s waiting for "
      "the previous persist; %.3f s before the next update); the copy of %.2f GB to shared memory took %.3f s "
      "%s; checkpoint-%lld is written in the background\n",
      (long long)pending_step_, stall_s_, save_s_, queue_s_, stall_s_ - save_s_, double(copy_bytes_) / 1e9, copy_s_,
      copy_inline_ ? "of it, by the training threads" : "beside the step", (long long)pending_step_);
  std::fflush(stdout);
}

bool FlashCheckpointer::shard_pending() {
  rethrow();
  if (phase_ == Phase::sealing && seal_done_) phase_ = Phase::idle;
  return phase_ == Phase::shard_writing && !shard_done_;
}

void FlashCheckpointer::after_vote(bool any_pending) {
  if (phase_ != Phase::shard_writing || any_pending) return;
  if (!chief_) {
    phase_ = Phase::idle;
    return;
  }
  // Every shard is in checkpoint-N.tmp/: the chief seals it and prunes, in the background.
  seal_done_ = false;
  phase_ = Phase::sealing;
  post([this, step = pending_step_, state = pending_state_, save_id = pending_save_id_, t0 = saved_at_] {
    const double seal_cpu0 = thread_cpu_seconds();
    checkpoint_seal(options_.output_dir, step, options_.cfg, state, save_id, options_.extra_files);
    checkpoint_prune(options_.output_dir, options_.save_total_limit);
    double cpu = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      cpu = job_cpu_s_ + thread_cpu_seconds() - seal_cpu0;
    }
    std::printf(
        "Flash checkpoint of step %lld persisted: checkpoint-%lld sealed %.2f s after the save; the "
        "background thread used %.2f s of CPU for it\n",
        (long long)step, (long long)step, seconds_since(t0), cpu);
    std::fflush(stdout);
    seal_done_ = true;
  });
}

void FlashCheckpointer::drain() {
  hurry_ = true;  // the loop waits: the persist goes at full speed
  rethrow();
  if (phase_ == Phase::shard_writing) {
    wait_idle_queue();
    rethrow();
    if (report_pending_) report();
    int64_t v = 0;  // every rank's shard is written once every rank is here
    if (world_.size() > 1) world_.all_reduce(&v, 1, dist::ReduceOp::max);
    after_vote(false);
  }
  if (phase_ == Phase::sealing) {
    wait_idle_queue();
    phase_ = Phase::idle;
  }
  rethrow();
}

std::unique_ptr<StateReader> FlashCheckpointer::last_snapshot() {
  drain();
  wait_idle_queue();
  if (!snap_ || pending_step_ < 0) return nullptr;
  return snap_->reader();
}

void FlashCheckpointer::finish() {
  drain();
  wait_idle_queue();
  if (snap_) snap_->unlink();
}

}  // namespace zt
