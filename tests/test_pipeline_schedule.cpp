// test_pipeline_schedule.cpp: the pipeline schedules as data (no MPI): every stage's list run
// together by the simulator (matched sends / receives, no deadlock), in-flight micro-batches,
// the bubble against (P - 1) / (m + P - 1), and the stage cuts.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace zt::parallel {
namespace {

TEST(PipelineSchedule, AllSchedulesRunWithoutDeadlock) {
  for (PipeSchedule kind : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::interleaved})
    for (int P : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 6, 8, 12})
        for (int v : {1, 2, 3}) {
          if (v > 1 && kind != PipeSchedule::interleaved) continue;
          if (kind == PipeSchedule::interleaved && m % P) continue;
          const ScheduleSpec s{kind, P, m, v};
          const SimResult r = simulate(s);
          EXPECT_TRUE(r.ok) << schedule_name(kind) << " P " << P << " m " << m << " v " << v << ": " << r.error;
          // Every stage computes every micro-batch once per chunk, forward and backward.
          for (int st = 0; st < P; ++st) {
            int f = 0, b = 0;
            for (const Action& a : make_schedule(s, st)) {
              f += a.kind == ActionKind::forward;
              b += a.kind == ActionKind::backward;
            }
            EXPECT_EQ(f, m * v);
            EXPECT_EQ(b, m * v);
          }
        }
}

TEST(PipelineSchedule, OneFOneBInFlight) {
  for (int P : {2, 3, 4})
    for (int m : {1, 2, 4, 8}) {
      const SimResult r = simulate({PipeSchedule::one_f_one_b, P, m, 1});
      ASSERT_TRUE(r.ok) << r.error;
      for (int s = 0; s < P; ++s) EXPECT_EQ(r.peak_in_flight[s], std::min(P - s, m)) << "P " << P << " m " << m;
      // GPipe keeps every micro-batch in flight.
      const SimResult g = simulate({PipeSchedule::gpipe, P, m, 1});
      for (int s = 0; s < P; ++s) EXPECT_EQ(g.peak_in_flight[s], m);
    }
}

TEST(PipelineSchedule, BubbleMatchesTheFormula) {
  for (PipeSchedule kind : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b})
    for (int P : {2, 4})
      for (int m : {1, 4, 8, 16}) {
        const ScheduleSpec s{kind, P, m, 1};
        const SimResult r = simulate(s, 1.0, 2.0);
        ASSERT_TRUE(r.ok) << r.error;
        // Unit compute: every stage idles (P - 1) (tf + tb) of (m + P - 1) (tf + tb).
        EXPECT_NEAR(r.makespan, (m + P - 1) * 3.0, 1e-9);
        for (int st = 0; st < P; ++st) EXPECT_NEAR(r.bubble(st), ideal_bubble(s), 1e-9);
      }
  // Interleaving with v chunks cuts the bubble by about v (exactly, with tf = tb here).
  for (int P : {2, 4})
    for (int v : {2, 3})
      for (int m : {P, 2 * P, 4 * P}) {
        const ScheduleSpec s{PipeSchedule::interleaved, P, m, v};
        const SimResult r = simulate(s, 1.0, 1.0);
        ASSERT_TRUE(r.ok) << r.error;
        const double plain = ideal_bubble({PipeSchedule::one_f_one_b, P, m, 1});
        EXPECT_NEAR(r.bubble(0), ideal_bubble(s), 0.02) << "P " << P << " m " << m << " v " << v;
        // The idle time itself is 1F1B's, (P - 1)(tf + tb), divided by v.
        const double idle = r.makespan - r.busy[0];
        EXPECT_NEAR(idle, (P - 1) * 2.0 / v, 0.05 * (P - 1) * 2.0 / v) << "P " << P << " m " << m << " v " << v;
        EXPECT_LT(r.bubble(0), plain);
      }
}

TEST(PipelineSchedule, ListsAreWhatTheDocsDraw) {
  // 1F1B, P = 2, m = 3, stage 0: F0 F1 B0 F2 B1 B2 (sends after, receives before).
  auto compute = [](const std::vector<Action>& l) {
    std::string s;
    for (const Action& a : l)
      if (a.kind == ActionKind::forward || a.kind == ActionKind::backward)
        s += str_cat(a.kind == ActionKind::forward ? "F" : "B", a.mb, a.chunk ? str_cat(".", a.chunk) : "", " ");
    return s;
  };
  EXPECT_EQ(compute(make_schedule({PipeSchedule::one_f_one_b, 2, 3, 1}, 0)), "F0 F1 B0 F2 B1 B2 ");
  EXPECT_EQ(compute(make_schedule({PipeSchedule::one_f_one_b, 2, 3, 1}, 1)), "F0 B0 F1 B1 F2 B2 ");
  EXPECT_EQ(compute(make_schedule({PipeSchedule::gpipe, 2, 2, 1}, 1)), "F0 F1 B0 B1 ");
  // Interleaved P = 2, v = 2, m = 4, stage 0 (Megatron's order).
  EXPECT_EQ(compute(make_schedule({PipeSchedule::interleaved, 2, 4, 2}, 0)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3 ");
  const auto l = make_schedule({PipeSchedule::one_f_one_b, 2, 1, 1}, 1);
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0], (Action{ActionKind::recv_act, 0, 0}));
  EXPECT_EQ(l[3], (Action{ActionKind::send_grad, 0, 0}));
}

TEST(PipelineSchedule, BadSpecsFailWithOneLine) {
  auto msg = [](const ScheduleSpec& s) {
    try {
      make_schedule(s, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({PipeSchedule::interleaved, 2, 3, 2}).find("multiple of the pipeline stages (2)"), std::string::npos);
  EXPECT_NE(msg({PipeSchedule::one_f_one_b, 2, 4, 2}).find("need --pipeline_schedule interleaved"), std::string::npos);
  EXPECT_NE(msg({PipeSchedule::one_f_one_b, 2, 0, 1}).find("must be >= 1"), std::string::npos);
  EXPECT_THROW(parse_schedule("zb"), Error);
}

TEST(PipelineStageCut, Balanced) {
  // Equal blocks, light embedding and head: an even split.
  StageCut c = cut_balanced(0.1, std::vector<double>(12, 1.0), 0.1, 2, 1);
  EXPECT_EQ(c.to_string(), "0-5 | 6-11");
  // A head as heavy as 4 blocks (a large vocabulary): the last stage takes fewer blocks.
  c = cut_balanced(0.0, std::vector<double>(12, 1.0), 4.0, 2, 1);
  EXPECT_EQ(c.to_string(), "0-7 | 8-11");
  EXPECT_EQ(c.stage_of_layer(7), 0);
  EXPECT_EQ(c.stage_of_layer(8), 1);
  // Virtual stages round robin: chunk k on stage k % P.
  c = cut_balanced(0.0, std::vector<double>(8, 1.0), 0.0, 2, 2);
  EXPECT_EQ(c.to_string(), "0-1 | 2-3 | 4-5 | 6-7");
  EXPECT_EQ(c.stage_of_layer(4), 0);
  EXPECT_EQ(c.chunk_of_layer(4), 1);
  EXPECT_EQ(c.stage_of_layer(2), 1);
  EXPECT_THROW(cut_balanced(0, std::vector<double>(3, 1.0), 0, 2, 2), Error);
}

TEST(PipelineStageCut, GivenAndPerVirtualStage) {
  EXPECT_EQ(cut_from_list("5,7", 12, 2, 1).to_string(), "0-4 | 5-11");
  EXPECT_THROW(cut_from_list("6,5", 12, 2, 1), Error);
  EXPECT_THROW(cut_from_list("6,x", 12, 2, 1), Error);
  EXPECT_THROW(cut_from_list("6,6", 12, 3, 1), Error);
  EXPECT_THROW(cut_from_list("0,12", 12, 2, 1), Error);
  StageCut c = cut_per_virtual_stage(12, 2, 3);
  EXPECT_EQ(c.virtual_stages, 2);
  EXPECT_EQ(c.to_string(), "0-2 | 3-5 | 6-8 | 9-11");
  EXPECT_THROW(cut_per_virtual_stage(12, 2, 5), Error);
}

}  // namespace
}  // namespace zt::parallel
