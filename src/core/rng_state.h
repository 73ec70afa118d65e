// rng_state.h: the random-number state of a run in checkpoints. Every stream in ztrain is
// derived from (seed, purpose) (core/rng.h: initialisation, the data permutation), and no
// stream advances across steps yet, so the seed is the whole state: it is saved, and loading
// checks that the resumed run uses the same one. A stream that advances (dropout) would save
// its counter here.
#pragma once
#include <cstdint>

#include "core/state.h"

namespace zt {

class RngState final : public Stateful {
 public:
  explicit RngState(int64_t seed) : seed_(seed) {}
  void save_state(StateWriter& w) const override { w.put_json("ztrain.seed", seed_); }
  void load_state(StateReader& r) override {
    const int64_t saved = r.get_int("ztrain.seed");
    ZT_CHECK(saved == seed_, r.source(), ": saved with --seed ", saved, ", this run has --seed ", seed_,
             "; resume with the same seed to continue its data order");
  }

 private:
  int64_t seed_;
};

}  // namespace zt
