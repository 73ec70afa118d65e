// rng_state.h: the random-number state of a run in checkpoints. Every stream in ztrain is
// derived from (seed, purpose) (core/rng.h: initialisation, the data permutation), and no
// stream advances across steps yet, so the seed is the whole state: it is saved, and loading
// checks that the resumed run uses the same one. The data order has its own seed (HF's
// --data_seed, which defaults to --seed), saved beside it: a resume with another data seed would
// replay a different order from the cursor on, so it is refused like a different --seed.
// A stream that advances (dropout) would save its counter here.
#pragma once
#include <cstdint>

#include "core/state.h"

namespace zt {

class RngState final : public Stateful {
 public:
  RngState(int64_t seed, int64_t data_seed) : seed_(seed), data_seed_(data_seed) {}
  explicit RngState(int64_t seed) : RngState(seed, seed) {}  // no --data_seed: the data order uses seed
  void save_state(StateWriter& w) const override {
    w.put_json("ztrain.seed", seed_);
    w.put_json("ztrain.data_seed", data_seed_);
  }
  void load_state(StateReader& r) override {
    const int64_t saved = r.get_int("ztrain.seed");
    ZT_CHECK(saved == seed_, r.source(), ": saved with --seed ", saved, ", this run has --seed ", seed_,
             "; resume with the same seed to continue its data order");
    // Checkpoints from before --data_seed ordered their data by --seed.
    const int64_t saved_data = r.find_json("ztrain.data_seed") ? r.get_int("ztrain.data_seed") : saved;
    ZT_CHECK(saved_data == data_seed_, r.source(), ": saved with data seed ", saved_data,
             " (--data_seed, else --seed), this run has ", data_seed_,
             "; resume with the same --data_seed to continue its data order");
  }

 private:
  int64_t seed_, data_seed_;
};

}  // namespace zt
