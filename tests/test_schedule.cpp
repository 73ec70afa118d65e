// test_schedule.cpp: HF's cosine_with_min_lr, warmup_stable_decay, cosine_with_restarts,
// polynomial and inverse_sqrt schedules and their --lr_scheduler_kwargs. The tables are HF's lr_lambda values, printed by
// tests/parity/hf_schedules.py (a transcription of transformers/optimization.py at commit
// 005edacb6b5d; transformers is not installed here); regenerate them with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "core/error.h"
#include "optim/schedule.h"
#include "deepspeed_config.h"
#include "train_args.h"

namespace zt {
namespace {

const double kCosineMinLr[] = {0.0,
                               0.3333333333333333,
                               0.6666666666666666,
                               1.0,
                               0.9779754323328191,
                               0.9140576474687263,
                               0.8145033635316129,
                               0.6890576474687263,
                               0.55,
                               0.41094235253127376,
                               0.2854966364683872,
                               0.18594235253127372,
                               0.12202456766718092,
                               0.1,
                               0.12202456766718092,
                               0.1859423525312736};
const double kCosineFullWave[] = {0.0,
                                  0.5,
                                  1.0,
                                  0.8535533905932737,
                                  0.5,
                                  0.14644660940672627,
                                  0.0,
                                  0.14644660940672616,
                                  0.4999999999999999,
                                  0.8535533905932737,
                                  1.0,
                                  0.8535533905932738};
const double kWsd_linear_linear[] = {
    0.2, 0.4, 0.6000000000000001, 0.8, 1.0, 1.0, 1.0, 1.0, 0.8400000000000001, 0.6799999999999999, 0.52, 0.36,
    0.2, 0.2};
const double kWsd_linear_cosine[] = {0.2,
                                     0.4,
                                     0.6000000000000001,
                                     0.8,
                                     1.0,
                                     1.0,
                                     1.0,
                                     1.0,
                                     0.9236067977499791,
                                     0.7236067977499789,
                                     0.4763932022500211,
                                     0.27639320225002106,
                                     0.2,
                                     0.2};
const double kWsd_linear_sqrt[] = {0.2,
                                   0.4,
                                   0.6000000000000001,
                                   0.8,
                                   1.0,
                                   1.0,
                                   1.0,
                                   1.0,
                                   0.6422291236000337,
                                   0.49403557437305934,
                                   0.3803226646068133,
                                   0.28445824720006735,
                                   0.2,
                                   0.2};
const double kWsd_cosine_linear[] = {0.2,
                                     0.31715728752538097,
                                     0.6,
                                     0.882842712474619,
                                     1.0,
                                     1.0,
                                     1.0,
                                     1.0,
                                     0.8400000000000001,
                                     0.6799999999999999,
                                     0.52,
                                     0.36,
                                     0.2,
                                     0.2};
const double kWsd_cosine_cosine[] = {0.2,
                                     0.31715728752538097,
                                     0.6,
                                     0.882842712474619,
                                     1.0,
                                     1.0,
                                     1.0,
                                     1.0,
                                     0.9236067977499791,
                                     0.7236067977499789,
                                     0.4763932022500211,
                                     0.27639320225002106,
                                     0.2,
                                     0.2};
const double kWsd_cosine_sqrt[] = {0.2,
                                   0.31715728752538097,
                                   0.6,
                                   0.882842712474619,
                                   1.0,
                                   1.0,
                                   1.0,
                                   1.0,
                                   0.6422291236000337,
                                   0.49403557437305934,
                                   0.3803226646068133,
                                   0.28445824720006735,
                                   0.2,
                                   0.2};
const double kWsd_sqrt_linear[] = {0.2,
                                   0.30717967697244913,
                                   0.434314575050762,
                                   0.6000000000000001,
                                   1.0,
                                   1.0,
                                   1.0,
                                   1.0,
                                   0.8400000000000001,
                                   0.6799999999999999,
                                   0.52,
                                   0.36,
                                   0.2,
                                   0.2};
const double kWsd_sqrt_cosine[] = {0.2,
                                   0.30717967697244913,
                                   0.434314575050762,
                                   0.6000000000000001,
                                   1.0,
                                   1.0,
                                   1.0,
                                   1.0,
                                   0.9236067977499791,
                                   0.7236067977499789,
                                   0.4763932022500211,
                                   0.27639320225002106,
                                   0.2,
                                   0.2};
const double kWsd_sqrt_sqrt[] = {0.2,
                                 0.30717967697244913,
                                 0.434314575050762,
                                 0.6000000000000001,
                                 1.0,
                                 1.0,
                                 1.0,
                                 1.0,
                                 0.6422291236000337,
                                 0.49403557437305934,
                                 0.3803226646068133,
                                 0.28445824720006735,
                                 0.2,
                                 0.2};
const double kWsdDerived[] = {0.0,
                              0.25,
                              0.5,
                              0.75,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              1.0,
                              0.9330127018922194,
                              0.75,
                              0.5,
                              0.2500000000000001,
                              0.06698729810778065,
                              0.0,
                              0.0};
const double kWsdCycles[] = {1.0,
                             1.0,
                             1.0,
                             0.8535533905932737,
                             0.5,
                             0.14644660940672627,
                             0.0,
                             0.14644660940672616,
                             0.4999999999999999,
                             0.8535533905932737,
                             0.0,
                             0.0};

const double kRestarts1[] = {0.0, 0.5, 1.0, 0.9755282581475768, 0.9045084971874737, 0.7938926261462366, 0.6545084971874737, 0.5, 0.34549150281252633, 0.2061073738537635, 0.09549150281252633, 0.024471741852423234, 0.0, 0.0};
const double kRestarts3[] = {1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0, 0.0};
const double kRestartsHalf[] = {0.0, 1.0, 0.9157348061512727, 0.6913417161825449, 0.4024548389919359, 0.14644660940672627, 0.009607359798384785, 0.9619397662556434, 0.7777851165098011, 0.0, 0.0};
const double kPolyDefault[] = {0.0, 0.5, 1.0, 0.8750000125, 0.750000025, 0.6250000375, 0.50000005, 0.3750000625, 0.250000075, 0.1250000875, 1e-07, 1e-07, 1e-07};
const double kPolySquare[] = {0.0, 0.3333333333333333, 0.6666666666666666, 1.0, 0.77734375, 0.584375, 0.42109375000000004, 0.2875, 0.18359375, 0.109375, 0.06484375, 0.05, 0.05};
const double kInvSqrtWarmup[] = {0.0, 0.25, 0.5, 0.75, 1.0, 0.8944271909999159, 0.8164965809277261, 0.7559289460184544, 0.7071067811865475, 0.6666666666666666, 0.6324555320336759, 0.6030226891555273};
const double kInvSqrtTimescale[] = {0.0, 0.3333333333333333, 0.6666666666666666, 1.0, 0.9354143466934853, 0.8819171036881969, 0.8366600265340756, 0.7977240352174657, 0.7637626158259734, 0.7337993857053429, 0.7071067811865475, 0.6831300510639732};
const double kInvSqrtNoWarmup[] = {1.0, 0.9999500037496877, 0.9950371902099893, 0.7071067811865475, 0.5};

// Every step of the table against lr_at with base_lr 1 (the multiplier itself).
template <size_t N>
void expect_table(const optim::Schedule& s, const double (&want)[N], const char* what) {
  for (size_t i = 0; i < N; ++i) EXPECT_NEAR(s.lr_at(int64_t(i)), want[i], 1e-12) << what << " step " << i;
}

optim::Schedule hf(optim::ScheduleKind k, int64_t warmup, int64_t total, const std::string& kwargs) {
  optim::Schedule s;
  s.kind = k;
  s.base_lr = 1.0;
  s.warmup_steps = warmup;
  s.total_steps = total;
  optim::schedule_apply_kwargs(s, kwargs);
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using K = optim::ScheduleKind;

TEST(ScheduleHF, CosineWithMinLr) {
  expect_table(hf(K::cosine_with_min_lr, 3, 13, R"({"min_lr_rate": 0.1})"), kCosineMinLr, "min_lr_rate");
  // min_lr is a rate of the learning rate: min_lr / learning_rate.
  optim::Schedule s;
  s.kind = K::cosine_with_min_lr;
  s.base_lr = 2e-3;
  s.warmup_steps = 3;
  s.total_steps = 13;
  optim::schedule_apply_kwargs(s, R"({"min_lr": 2e-4})");
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(s.lr_at(i), 2e-3 * kCosineMinLr[i], 1e-15) << i;
  expect_table(hf(K::cosine, 2, 10, R"({"num_cycles": 1})"), kCosineFullWave, "cosine num_cycles");
}

TEST(ScheduleHF, WarmupStableDecayShapes) {
  const char* kw =
      R"({"num_stable_steps": 3, "num_decay_steps": 5, "min_lr_ratio": 0.2, "warmup_type": "%s", "decay_type": "%s"})";
  const char* names[] = {"linear", "cosine", "1-sqrt"};
  const double* tables[3][3] = {{kWsd_linear_linear, kWsd_linear_cosine, kWsd_linear_sqrt},
                                {kWsd_cosine_linear, kWsd_cosine_cosine, kWsd_cosine_sqrt},
                                {kWsd_sqrt_linear, kWsd_sqrt_cosine, kWsd_sqrt_sqrt}};
  for (int w = 0; w < 3; ++w) {
    for (int d = 0; d < 3; ++d) {
      char buf[256];
      std::snprintf(buf, sizeof buf, kw, names[w], names[d]);
      // total_steps does not matter once num_stable_steps is given.
      optim::Schedule s = hf(K::warmup_stable_decay, 4, 1000, buf);
      for (int i = 0; i < 14; ++i) EXPECT_NEAR(s.lr_at(i), tables[w][d][i], 1e-12) << buf << " step " << i;
    }
  }
}

TEST(ScheduleHF, WarmupStableDecayDefaults) {
  // HF's defaults: stable = total - warmup - decay, linear warmup from 0, cosine decay to 0.
  expect_table(hf(K::warmup_stable_decay, 4, 20, R"({"num_decay_steps": 6})"), kWsdDerived, "derived stable");
  expect_table(hf(K::warmup_stable_decay, 0, 50, R"({"num_decay_steps": 8, "num_stable_steps": 2, "num_cycles": 1})"),
               kWsdCycles, "num_cycles");
}

TEST(ScheduleHF, KwargsErrors) {
  auto err = [](K k, const std::string& kw, int64_t total = 100) { return error_of([&] { hf(k, 10, total, kw); }); };
  EXPECT_EQ(err(K::warmup_stable_decay, R"({"num_decay_steps": 10})"), "");
  EXPECT_NE(err(K::warmup_stable_decay, "{}").find("needs num_decay_steps"), std::string::npos);
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_step": 10})").find("did you mean num_decay_steps?"),
            std::string::npos);
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_steps": 10, "decay_type": "exp"})").find("\"1-sqrt\""),
            std::string::npos);
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_steps": 10.5})").find("whole number"), std::string::npos);
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_steps": -1})").find("whole number"), std::string::npos);
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_steps": 95})").find("exceed the run's 100"), std::string::npos);
  EXPECT_EQ(err(K::warmup_stable_decay, R"({"num_decay_steps": 95})", 0), "");  // length unknown yet
  EXPECT_NE(err(K::warmup_stable_decay, R"({"num_decay_steps": 9, "min_lr_ratio": 2})").find("[0, 1]"),
            std::string::npos);
  EXPECT_NE(err(K::cosine_with_min_lr, "{}").find("needs min_lr or min_lr_rate"), std::string::npos);
  EXPECT_NE(err(K::cosine_with_min_lr, R"({"min_lr": 0.1, "min_lr_rate": 0.1})").find("only one of"),
            std::string::npos);
  EXPECT_NE(err(K::cosine_with_min_lr, R"({"min_lr": 2})").find("min_lr"), std::string::npos);
  EXPECT_NE(err(K::linear, R"({"num_cycles": 1})").find("takes no --lr_scheduler_kwargs"), std::string::npos);
  EXPECT_NE(err(K::constant, R"({"num_cycles": 1})").find("takes no"), std::string::npos);
  EXPECT_NE(err(K::warmup_lr, R"({"num_cycles": 1})").find("scheduler.params"), std::string::npos);
  EXPECT_NE(err(K::cosine, R"({"num_warmup_steps": 1})").find("--warmup_steps"), std::string::npos);
  EXPECT_NE(err(K::cosine, "[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(err(K::cosine, "{num_cycles: 1}").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(err(K::cosine, ""), "");
}

TEST(ScheduleHF, CosineWithRestarts) {
  // num_cycles defaults to 1 for this kind (0.5 for cosine); the LR is 0 from the run's end on.
  expect_table(hf(K::cosine_with_restarts, 2, 12, ""), kRestarts1, "restarts default");
  expect_table(hf(K::cosine_with_restarts, 0, 12, R"({"num_cycles": 3})"), kRestarts3, "restarts 3");
  expect_table(hf(K::cosine_with_restarts, 1, 9, R"({"num_cycles": 1.5})"), kRestartsHalf, "restarts 1.5");
}

TEST(ScheduleHF, Polynomial) {
  expect_table(hf(K::polynomial, 2, 10, ""), kPolyDefault, "polynomial defaults");  // lr_end 1e-7, power 1
  optim::Schedule s;
  s.kind = K::polynomial;
  s.base_lr = 2e-3;  // lr_end is an LR, not a ratio: the table holds lr / base_lr
  s.warmup_steps = 3;
  s.total_steps = 11;
  optim::schedule_apply_kwargs(s, R"({"lr_end": 1e-4, "power": 2})");
  for (int i = 0; i < 13; ++i) EXPECT_NEAR(s.lr_at(i), 2e-3 * kPolySquare[i], 1e-15) << i;
  // The warmup fills the run: HF would divide by zero at step total; we hold lr_end.
  EXPECT_NEAR(hf(K::polynomial, 5, 5, "").lr_at(5), 1e-7, 1e-20);
}

TEST(ScheduleHF, InverseSqrt) {
  expect_table(hf(K::inverse_sqrt, 4, 100, ""), kInvSqrtWarmup, "timescale = warmup");
  expect_table(hf(K::inverse_sqrt, 3, 100, R"({"timescale": 7})"), kInvSqrtTimescale, "timescale 7");
  const optim::Schedule s = hf(K::inverse_sqrt, 0, 100, "");  // no warmup: timescale 10000
  const int64_t steps[] = {0, 1, 100, 10000, 30000};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(s.lr_at(steps[i]), kInvSqrtNoWarmup[i], 1e-12) << steps[i];
}

TEST(ScheduleHF, NewKindsKwargsErrors) {
  auto err = [](K k, const std::string& kw) { return error_of([&] { hf(k, 2, 10, kw); }); };
  EXPECT_NE(err(K::polynomial, R"({"lr_end": "small"})").find("key \"lr_end\" must be a number"), std::string::npos);
  EXPECT_NE(err(K::polynomial, R"({"power": -1})").find("\"power\""), std::string::npos);
  EXPECT_NE(err(K::polynomial, R"({"lr_end": 1.5})").find("must be smaller than --learning_rate"), std::string::npos);
  EXPECT_NE(err(K::polynomial, R"({"num_cycles": 1})").find("it takes lr_end, power"), std::string::npos);
  EXPECT_NE(err(K::cosine_with_restarts, R"({"num_cycles": "two"})").find("\"num_cycles\" must be a number"),
            std::string::npos);
  EXPECT_NE(err(K::inverse_sqrt, R"({"timescale": 0})").find("\"timescale\""), std::string::npos);
  EXPECT_NE(err(K::inverse_sqrt, R"({"timescale": 2.5})").find("whole number"), std::string::npos);
  EXPECT_NE(err(K::inverse_sqrt, R"({"lr_end": 1})").find("it takes timescale"), std::string::npos);
  EXPECT_EQ(optim::schedule_kind_from_string("polynomial"), K::polynomial);
  EXPECT_EQ(optim::schedule_kind_name(K::cosine_with_restarts), std::string("cosine_with_restarts"));
  EXPECT_EQ(optim::schedule_kind_name(optim::schedule_kind_from_string("inverse_sqrt")), std::string("inverse_sqrt"));
  const std::string plateau = error_of([] { optim::schedule_kind_from_string("reduce_lr_on_plateau"); });
  EXPECT_NE(plateau.find("reduce_lr_on_plateau is not implemented"), std::string::npos) << plateau;
}

TEST(ScheduleHF, FromTrainArgs) {
  TrainArgs a;
  a.learning_rate = 1.0;
  a.lr_scheduler_type = "warmup_stable_decay";
  a.warmup_ratio = 0.2;  // 4 of 20 steps
  a.lr_scheduler_kwargs = R"({"num_decay_steps": 6})";
  optim::Schedule s = schedule_from_args(a, 20);
  expect_table(s, kWsdDerived, "from args");
  EXPECT_EQ(optim::schedule_kind_name(s.kind), std::string("warmup_stable_decay"));
  EXPECT_EQ(optim::schedule_kind_from_string("cosine_with_min_lr"), K::cosine_with_min_lr);
  a.lr_scheduler_kwargs = R"({"num_decay_steps": 60})";
  EXPECT_NO_THROW(schedule_from_args(a, 0));  // check_args: the length is not known yet
  EXPECT_THROW(schedule_from_args(a, 20), Error);
}

}  // namespace
}  // namespace zt
