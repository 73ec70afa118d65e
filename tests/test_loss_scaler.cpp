// test_loss_scaler.cpp: optim::LossScaler against DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py, DeepSpeed 0.19.6, commit edaa7221). Each table is a
// sequence of steps ('O' overflow, '.' clean) with the scale and the hysteresis left after
// each step; -1 marks the step where DeepSpeed raises "Current loss scale already at minimum".
// The tables are printed by tests/parity/ds_loss_scaler.py, a transcription of DeepSpeed's
// code; regenerate them with it. Worked by hand, kWindow reads: scale 1, window 3: clean steps
// 0-2 keep 1 and step 3 doubles (3 clean steps since the start, DeepSpeed's stable_interval),
// steps 6 and 9 double again; the overflow at 12 only spends one hysteresis (8 stays), and the
// window restarts after it: step 16 doubles and refills the hysteresis.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/state.h"
#include "optim/loss_scaler.h"

namespace zt {
namespace {

// Hysteresis: power 8, window 3, min 1, hysteresis 2, consecutive False, raise_at_min True
const char kHysteresisSeq[] = "...O.O..O....O.OO..OOO......O..O.O.O.O";
const double kHysteresisScale[] = {256.0, 256.0, 256.0, 256.0, 256.0, 128.0, 128.0, 128.0, 64.0, 64.0,
                                   64.0,  64.0,  128.0, 128.0, 128.0, 64.0,  32.0,  32.0,  32.0, 16.0,
                                   8.0,   4.0,   4.0,   4.0,   4.0,   8.0,   8.0,   8.0,   8.0,  8.0,
                                   8.0,   4.0,   4.0,   2.0,   2.0,   1.0,   1.0,   -1.0};
const int kHysteresisHyst[] = {2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
// Consecutive: power 8, window 3, min 1, hysteresis 2, consecutive True, raise_at_min True
const char kConsecutiveSeq[] = "...O.O..O....O.OO..OOO......O..O.O.O.O";
const double kConsecutiveScale[] = {256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0,
                                    256.0, 256.0, 512.0, 512.0, 512.0, 512.0, 256.0, 256.0, 256.0, 256.0,
                                    128.0, 64.0,  64.0,  64.0,  64.0,  128.0, 128.0, 128.0, 128.0, 128.0,
                                    128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0};
const int kConsecutiveHyst[] = {2, 2, 2, 1, 2, 1, 2, 2, 1, 2, 2, 2, 2, 1, 2, 1, 1, 2, 2,
                                1, 1, 1, 2, 2, 2, 2, 2, 2, 1, 2, 2, 1, 2, 1, 2, 1, 2, 1};
// NoHysteresis: power 8, window 3, min 1, hysteresis 1, consecutive False, raise_at_min True
const char kNoHysteresisSeq[] = "...O.O..O....O.OO..OOO......O..O.O.O.O";
const double kNoHysteresisScale[] = {256.0, 256.0, 256.0, 128.0, 128.0, 64.0, 64.0, 64.0, 32.0, 32.0, 32.0,
                                     32.0,  64.0,  32.0,  32.0,  16.0,  8.0,  8.0,  8.0,  4.0,  2.0,  1.0,
                                     1.0,   1.0,   1.0,   2.0,   2.0,   2.0,  1.0,  1.0,  1.0,  -1.0};
const int kNoHysteresisHyst[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
// Deep: power 9, window 4, min 2, hysteresis 3, consecutive False, raise_at_min True
const char kDeepSeq[] = "OOO.OO....OOO.O..........OOOOOO";
const double kDeepScale[] = {512.0, 512.0, 256.0, 256.0, 128.0, 64.0, 64.0, 64.0, 64.0, 64.0, 32.0,
                             16.0,  8.0,   8.0,   4.0,   4.0,   4.0,  4.0,  4.0,  8.0,  8.0,  8.0,
                             8.0,   16.0,  16.0,  16.0,  16.0,  8.0,  4.0,  2.0,  -1.0};
const int kDeepHyst[] = {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1};
// DeepConsecutive: power 9, window 4, min 2, hysteresis 3, consecutive True, raise_at_min True
const char kDeepConsecutiveSeq[] = "OOO.OO....OOO.O..........OOOOOO";
const double kDeepConsecutiveScale[] = {512.0, 512.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0,
                                        256.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 256.0, 256.0, 256.0,
                                        256.0, 512.0, 512.0, 512.0, 512.0, 256.0, 128.0, 64.0,  32.0};
const int kDeepConsecutiveHyst[] = {2, 1, 1, 3, 2, 1, 3, 3, 3, 3, 2, 1, 1, 3, 2, 3,
                                    3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1};
// Window: power 0, window 3, min 1, hysteresis 2, consecutive False, raise_at_min True
const char kWindowSeq[] = "............O.........";
const double kWindowScale[] = {1.0, 1.0, 1.0, 2.0, 2.0, 2.0,  4.0,  4.0,  4.0,  8.0,  8.0,
                               8.0, 8.0, 8.0, 8.0, 8.0, 16.0, 16.0, 16.0, 32.0, 32.0, 32.0};
const int kWindowHyst[] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
// FloorNoRaise: power 2, window 1000, min 1, hysteresis 1, consecutive False, raise_at_min False
const char kFloorNoRaiseSeq[] = "OOOOOOOO.OO";
const double kFloorNoRaiseScale[] = {2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
const int kFloorNoRaiseHyst[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
// FloorRaise: power 2, window 1000, min 1, hysteresis 2, consecutive False, raise_at_min True
const char kFloorRaiseSeq[] = "OOOOOOOO";
const double kFloorRaiseScale[] = {4.0, 2.0, 1.0, -1.0};
const int kFloorRaiseHyst[] = {1, 1, 1, 1};

optim::LossScalerConfig dynamic_config(int power, int64_t window, double min_scale, int hysteresis, bool consecutive,
                                       bool raise_at_min = true) {
  optim::LossScalerConfig c;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.min_loss_scale = min_scale;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.raise_error_at_min_scale = raise_at_min;
  return c;
}

// Reads the values a JsonStateWriter wrote (trainer_state.json's way).
class JsonReader final : public StateReader {
 public:
  explicit JsonReader(const nlohmann::json& doc) : doc_(doc) {}
  void get_tensor(const StatePiece&) override { FAIL() << "no tensors here"; }
  const nlohmann::json* find_json(const std::string& key) const override {
    const nlohmann::json::json_pointer p(JsonStateWriter::json_pointer(key));
    return doc_.contains(p) ? &doc_[p] : nullptr;
  }
  std::string source() const override { return "test"; }

 private:
  const nlohmann::json& doc_;
};

nlohmann::json saved(const optim::LossScaler& s) {
  nlohmann::json doc;
  JsonStateWriter w(&doc);
  s.save_state(w);
  return doc;
}

// Replays seq on a scaler; the scale and hysteresis after each step must be the table's. At a
// -1 the update must throw and leave the state as it was. With a split point, the scaler is
// saved after that many steps and the rest replayed on a fresh one loaded from the save.
template <size_t N>
void replay(const optim::LossScalerConfig& c, const char* seq, const double (&scale)[N], const int (&hyst)[N],
            size_t split = SIZE_MAX) {
  optim::LossScaler s(c);
  optim::LossScaler other(c);
  optim::LossScaler* cur = &s;
  int64_t overflows = 0;
  for (size_t i = 0; i < N; ++i) {
    if (i == split) {
      const nlohmann::json doc = saved(*cur);
      JsonReader r(doc);
      other.load_state(r);
      cur = &other;
    }
    const bool overflow = seq[i] == 'O';
    if (scale[i] < 0) {
      const double before = cur->scale_exact();
      EXPECT_THROW(cur->update(overflow), Error) << "step " << i;
      EXPECT_EQ(cur->scale_exact(), before);
      EXPECT_EQ(cur->iteration(), int64_t(i));
      return;
    }
    EXPECT_EQ(cur->update(overflow), overflow) << "step " << i;
    overflows += overflow;
    EXPECT_EQ(cur->scale_exact(), scale[i]) << seq << " step " << i << " split " << split;
    EXPECT_EQ(cur->scale(), float(scale[i]));
    EXPECT_EQ(cur->hysteresis_left(), hyst[i]) << seq << " step " << i << " split " << split;
    EXPECT_EQ(cur->iteration(), int64_t(i + 1));
    EXPECT_EQ(cur->overflows(), overflows);
    EXPECT_EQ(cur->skipped_steps(), overflows);
  }
  ASSERT_EQ(std::strlen(seq), N);
}

TEST(LossScaler, DeepSpeedHysteresis) {
  replay(dynamic_config(8, 3, 1, 2, false), kHysteresisSeq, kHysteresisScale, kHysteresisHyst);
  replay(dynamic_config(9, 4, 2, 3, false), kDeepSeq, kDeepScale, kDeepHyst);
}

TEST(LossScaler, DeepSpeedConsecutiveHysteresis) {
  replay(dynamic_config(8, 3, 1, 2, true), kConsecutiveSeq, kConsecutiveScale, kConsecutiveHyst);
  replay(dynamic_config(9, 4, 2, 3, true), kDeepConsecutiveSeq, kDeepConsecutiveScale, kDeepConsecutiveHyst);
}

TEST(LossScaler, DeepSpeedWindowAndMinimum) {
  replay(dynamic_config(8, 3, 1, 1, false), kNoHysteresisSeq, kNoHysteresisScale, kNoHysteresisHyst);
  replay(dynamic_config(0, 3, 1, 2, false), kWindowSeq, kWindowScale, kWindowHyst);
  replay(dynamic_config(2, 1000, 1, 1, false, false), kFloorNoRaiseSeq, kFloorNoRaiseScale, kFloorNoRaiseHyst);
  replay(dynamic_config(2, 1000, 1, 2, false, true), kFloorRaiseSeq, kFloorRaiseScale, kFloorRaiseHyst);
}

// Resume is exact: saving after any step and loading into a fresh scaler continues the same
// sequence (scale, hysteresis, window phase, counters).
TEST(LossScaler, ResumeAtEveryStepIsExact) {
  for (size_t k = 0; k <= std::strlen(kHysteresisSeq); ++k) {
    replay(dynamic_config(8, 3, 1, 2, false), kHysteresisSeq, kHysteresisScale, kHysteresisHyst, k);
    replay(dynamic_config(8, 3, 1, 2, true), kConsecutiveSeq, kConsecutiveScale, kConsecutiveHyst, k);
  }
  for (size_t k = 0; k <= std::strlen(kWindowSeq); ++k)
    replay(dynamic_config(0, 3, 1, 2, false), kWindowSeq, kWindowScale, kWindowHyst, k);
}

TEST(LossScaler, FixedScale) {
  optim::LossScalerConfig c;
  c.loss_scale = 128;
  optim::LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  EXPECT_TRUE(s.update(true));  // skipped, as DeepSpeed's ZeRO optimizers skip it
  EXPECT_FALSE(s.update(false));
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 128.f);  // never moves
  EXPECT_EQ(s.overflows(), 1);
  EXPECT_EQ(s.iteration(), 2002);
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  optim::LossScaler s{optim::LossScalerConfig{}};
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.f);  // 2^16
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_EQ(s.config().loss_scale_window, 1000);
  EXPECT_EQ(s.config().min_loss_scale, 1);
  EXPECT_FALSE(s.config().consecutive_hysteresis);
  // The first doubling comes after 1000 clean steps.
  for (int i = 0; i < 1000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.f);
}

TEST(LossScaler, BadConfigIsOneClearError) {
  auto err = [](optim::LossScalerConfig c) {
    try {
      optim::LossScaler s(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  optim::LossScalerConfig c;
  c.loss_scale_window = 0;
  EXPECT_NE(err(c).find("fp16.loss_scale_window must be > 0"), std::string::npos);
  c = {};
  c.min_loss_scale = 0;
  EXPECT_NE(err(c).find("fp16.min_loss_scale"), std::string::npos);
  c = {};
  c.hysteresis = 0;
  EXPECT_NE(err(c).find("fp16.hysteresis"), std::string::npos);
  c = {};
  c.loss_scale = -1;
  EXPECT_NE(err(c).find("fp16.loss_scale"), std::string::npos);
  c = {};
  c.initial_scale_power = 200;
  EXPECT_NE(err(c).find("fp16.initial_scale_power"), std::string::npos);
  c = {};
  c.loss_scale = 4;
  c.loss_scale_window = 0;  // unused by a fixed scale: DeepSpeed does not check it either
  EXPECT_EQ(err(c), "");
}

TEST(LossScaler, ResumeAcrossModes) {
  // A checkpoint without a loss scaler (an fp32 run): the scaler starts as configured.
  nlohmann::json empty = nlohmann::json::object();
  optim::LossScaler s(dynamic_config(4, 2, 1, 2, false));
  JsonReader r0(empty);
  s.load_state(r0);
  EXPECT_EQ(s.scale(), 16.f);
  EXPECT_EQ(s.iteration(), 0);
  // Fixed -> dynamic: the counters carry over, the scale starts at 2^power, a fresh window.
  optim::LossScalerConfig fixed;
  fixed.loss_scale = 8;
  optim::LossScaler f(fixed);
  for (const char* p = "..O.."; *p; ++p) f.update(*p == 'O');
  const nlohmann::json doc = saved(f);
  JsonReader r1(doc);
  s.load_state(r1);
  EXPECT_EQ(s.iteration(), 5);
  EXPECT_EQ(s.overflows(), 1);
  EXPECT_EQ(s.scale(), 16.f);
  EXPECT_EQ(s.last_overflow_iteration(), 4);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 16.f);
  s.update(false);  // two clean steps since the resume, window 2
  EXPECT_EQ(s.scale(), 32.f);
  // A damaged state is an error naming the source.
  nlohmann::json bad = saved(s);
  bad["ztrain"]["loss_scaler"]["scale"] = -1;
  JsonReader r2(bad);
  optim::LossScaler t(dynamic_config(4, 2, 1, 2, false));
  EXPECT_THROW(t.load_state(r2), Error);
}

}  // namespace
}  // namespace zt
