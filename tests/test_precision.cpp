// test_precision.cpp: mixed precision and activation recomputation. Tier 1: the bf16 /
// fp16 conversion kernels against the scalar references, the bf16 GEMM against the naive
// GEMM on the same rounded inputs. Tier 2: recomputation (none / selective / full, all or
// the first k blocks) gives bit-identical fp32 gradients and losses; bf16 and fp16 passes
// stay close to fp32; the planned arena shrinks by what each mode promises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/rng.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "models/transformer.h"
#include "test_util.h"

namespace zt {
namespace {

TEST(Convert, MatchesScalarReferencesIncludingEdges) {
  test::for_each_isa([&] {
    std::vector<float> x = test::randn(1000, 5, 3.0);
    const float edges[] = {0.f,
                           -0.f,
                           1e-8f,
                           -3e-6f,
                           6e-5f,
                           65504.f,
                           65519.f,
                           65520.f,
                           -1e6f,
                           1e-40f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           1.00390625f,
                           1.01171875f};
    x.insert(x.end(), std::begin(edges), std::end(edges));
    const int64_t n = int64_t(x.size());  // not a multiple of 16: the masked tail runs too
    std::vector<uint16_t> b(n), h(n);
    kernels::to_lowp(DType::bf16, b.data(), x.data(), n);
    kernels::to_lowp(DType::f16, h.data(), x.data(), n);
    std::vector<float> back(n), rounded(n);
    kernels::round_to_f16(rounded.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(bf16_to_f32(b[i])) && std::isnan(f16_to_f32(h[i])) && std::isnan(rounded[i]));
        continue;
      }
      // AVX512-BF16's converter treats fp32 subnormals (below 1.2e-38) as zero; nothing a
      // model computes lives there, so that is accepted rather than slowed down.
      if (std::fpclassify(x[i]) == FP_SUBNORMAL)
        EXPECT_TRUE((b[i] & 0x7fff) == 0 || b[i] == f32_to_bf16(x[i])) << "bf16 of " << x[i];
      else
        EXPECT_EQ(b[i], f32_to_bf16(x[i])) << "bf16 of " << x[i];
      EXPECT_EQ(h[i], f32_to_f16(x[i])) << "fp16 of " << x[i];
      EXPECT_EQ(rounded[i], f16_to_f32(f32_to_f16(x[i]))) << "fp16 rounding of " << x[i];
    }
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.f))));  // fp16 overflows to inf
    kernels::from_lowp(DType::bf16, back.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(x[i])) {
        EXPECT_EQ(back[i], bf16_to_f32(b[i]));
      }
    }
    kernels::from_lowp(DType::f16, back.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(x[i])) {
        EXPECT_EQ(back[i], f16_to_f32(h[i]));
      }
    }
  });
}

// The bf16 GEMM multiplies bf16 values exactly and accumulates in fp32: against the naive
// GEMM in double on the same rounded inputs it differs only by fp32 summation error. Both paths
// on every machine: oneDNN's bf16 matmul where it has one, and the widened fp32 path (also
// with k cut into panels of 7).
TEST(Gemm, Bf16MatchesReferenceOnRoundedInputs) {
  const int64_t m = 37, n = 53, k = 70;
  for (int64_t widened_panel : {int64_t(-1), int64_t(0), int64_t(7 * (37 + 53))})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 1.f}) {
          std::vector<float> a = test::randn(m * k, 11), b = test::randn(k * n, 12), c0 = test::randn(m * n, 13);
          std::vector<uint16_t> a16(a.size()), b16(b.size());
          kernels::to_lowp(DType::bf16, a16.data(), a.data(), int64_t(a.size()));
          kernels::to_lowp(DType::bf16, b16.data(), b.data(), int64_t(b.size()));
          std::vector<double> ad(a.size()), bd(b.size()), cd(c0.begin(), c0.end());
          for (size_t i = 0; i < a.size(); ++i) ad[i] = bf16_to_f32(a16[i]);
          for (size_t i = 0; i < b.size(); ++i) bd[i] = bf16_to_f32(b16[i]);
          std::vector<float> c = c0;
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          kernels::gemm_bf16_force_widened(widened_panel >= 0, widened_panel);
          kernels::gemm_typed(DType::bf16, ta, tb, m, n, k, 0.5f, a16.data(), lda, b16.data(), ldb, beta, c.data(), n);
          kernels::gemm_bf16_force_widened(false);
          kernels::gemm_ref<double>(ta, tb, m, n, k, 0.5, ad.data(), lda, bd.data(), ldb, beta, cd.data(), n);
          test::expect_close(c, cd, 1e-5, 1e-5, "bf16 GEMM");
        }
}

// hs64: head size 64 (two heads of width 128), where bf16 attention runs its AVX512-BF16 kernel.
ModelConfig tiny(Arch a, int layers = 3, bool hs64 = false, const char* family = "llama") {
  nlohmann::json j;
  const int C = hs64 ? 128 : 32, NH = hs64 ? 2 : 4;
  if (a == Arch::gpt2)
    j = {{"model_type", "gpt2"}, {"vocab_size", 67}, {"n_embd", C},
         {"n_layer", layers},    {"n_head", NH},     {"n_positions", 32}};
  else
    j = {{"model_type", family},
         {"vocab_size", 67},
         {"hidden_size", C},
         {"intermediate_size", 40},
         {"num_hidden_layers", layers},
         {"num_attention_heads", NH},
         {"num_key_value_heads", NH / 2},
         {"max_position_embeddings", 32}};
  return config_from_json(j, "test");
}

struct PassResult {
  double loss = 0;
  std::vector<float> grads;
};

// Two micro-batches (gradients accumulate), the second packed with restarting positions.
PassResult run(const ModelConfig& cfg, const nn::ActPlan& plan) {
  Transformer m(cfg);
  m.init_random(7);
  m.runtime().set_act_plan(plan);
  const int B = 2, T = 16;
  m.plan(B, T, true);
  m.zero_grad();
  auto in = test::random_tokens(B * T, 67, 1), tg = test::random_tokens(B * T, 67, 2);
  const std::vector<int32_t> pos = test::packed_positions(B, T, 9, 3);
  int64_t c = 0;
  PassResult r;
  r.loss = m.forward_backward(in.data(), tg.data(), 0.03f, &c);
  r.loss += m.forward_backward(tg.data(), in.data(), 0.03f, &c, pos.data());
  r.grads.assign(m.flat_grads().as<float>(), m.flat_grads().as<float>() + m.num_params());
  return r;
}

class RecomputeTest : public ::testing::TestWithParam<int> {
 protected:
  // 4: OLMo-2 (its output norms' saved inputs and whole-projection q/k norms recompute too).
  ModelConfig cfg() const {
    if (GetParam() == 4) return tiny(Arch::llama, 3, false, "olmo2");
    if (GetParam() >= 6) {  // Mixtral (load-balancing and z-loss on), Qwen2-MoE (the gated shared expert)
      ModelConfig c = tiny(Arch::llama, 3, false, GetParam() == 6 ? "mixtral" : "qwen2_moe");
      nlohmann::json j = c.raw;
      j[GetParam() == 6 ? "num_local_experts" : "num_experts"] = 4;
      j["num_experts_per_tok"] = 2;
      j["output_router_logits"] = true;
      j["router_aux_loss_coef"] = 0.05;
      if (GetParam() == 7) j["moe_intermediate_size"] = 16, j["shared_expert_intermediate_size"] = 24;
      c = config_from_json(j, "test");
      c.moe.z_loss_coef = 0.01f;
      return c;
    }
    if (GetParam() == 5) {  // Gemma 3: four norms, per-head q/k norms, GeGLU, a sliding layer
      ModelConfig c = tiny(Arch::llama, 3, false, "gemma3_text");
      nlohmann::json j = c.raw;
      j["head_dim"] = 8;
      j["sliding_window"] = 4;
      j["sliding_window_pattern"] = 2;
      return config_from_json(j, "test");
    }
    return tiny(GetParam() % 2 == 0 ? Arch::gpt2 : Arch::llama, 3, GetParam() >= 2);
  }
};

// fp32 recomputation reruns the same deterministic kernels on the same inputs, so the
// gradients are bit-identical to keeping everything, whatever the mode and block count.
TEST_P(RecomputeTest, Fp32GradientsAreBitIdentical) {
  const PassResult base = run(cfg(), {});
  for (nn::Recompute r : {nn::Recompute::selective, nn::Recompute::full})
    for (int k : {1, 3}) {
      const PassResult got = run(cfg(), {nn::Precision::fp32, r, k});
      EXPECT_EQ(got.loss, base.loss) << nn::recompute_name(r) << " k=" << k;
      ASSERT_EQ(got.grads.size(), base.grads.size());
      EXPECT_EQ(std::memcmp(got.grads.data(), base.grads.data(), base.grads.size() * 4), 0)
          << nn::recompute_name(r) << " k=" << k << ": gradients differ";
    }
}

// Mixed precision with and without recomputation: bit-identical to itself (the same
// argument), and close to fp32 (bf16 keeps 8 bits of mantissa in the GEMM inputs).
TEST_P(RecomputeTest, MixedPrecisionIsCloseToFp32AndRecomputesExactly) {
  const PassResult f32 = run(cfg(), {});
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::fp16}) {
    const PassResult keep = run(cfg(), {p, nn::Recompute::none, 0});
    EXPECT_NEAR(keep.loss, f32.loss, (p == nn::Precision::bf16 ? 1e-2 : 2e-3) * std::fabs(f32.loss));
    double num = 0, den = 0;
    for (size_t i = 0; i < f32.grads.size(); ++i) {
      num += double(keep.grads[i] - f32.grads[i]) * (keep.grads[i] - f32.grads[i]);
      den += double(f32.grads[i]) * f32.grads[i];
    }
    EXPECT_LT(std::sqrt(num / den), p == nn::Precision::bf16 ? 3e-2 : 5e-3) << nn::precision_name(p);
    for (nn::Recompute r : {nn::Recompute::selective, nn::Recompute::full}) {
      const PassResult got = run(cfg(), {p, r, 2});
      EXPECT_EQ(got.loss, keep.loss);
      EXPECT_EQ(std::memcmp(got.grads.data(), keep.grads.data(), keep.grads.size() * 4), 0)
          << nn::precision_name(p) << " " << nn::recompute_name(r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, RecomputeTest, ::testing::Values(0, 1, 2, 3, 4, 5, 6, 7), [](const auto& info) {
  if (info.param == 6) return std::string("Mixtral");
  if (info.param == 7) return std::string("Qwen2Moe");
  if (info.param == 4) return std::string("Olmo2");
  if (info.param == 5) return std::string("Gemma3");
  return std::string(info.param % 2 == 0 ? "Gpt2" : "Llama") + (info.param >= 2 ? "Hs64" : "");
});

// What each mode saves on GPT-2 124M at B=8, T=256 (the targets: full at least
// 80% of the planned activation bytes, selective at least 40%).
TEST(Recompute, PlannedActivationBytesShrink) {
  const ModelConfig cfg = config_from_json({{"model_type", "gpt2"},
                                            {"vocab_size", 50257},
                                            {"n_embd", 768},
                                            {"n_layer", 12},
                                            {"n_head", 12},
                                            {"n_positions", 1024}},
                                           "gpt2-124m");
  // Activation bytes: the arena of saved activations plus what recomputation adds to the
  // temporaries (the shared set it refills); the rest of the temporaries (gradients in
  // flight, the LM head's logits) is the same in every mode.
  auto bytes = [&](nn::ActPlan p) {
    size_t acts = 0, tmp = 0, acts0 = 0, tmp0 = 0;
    ModelRuntime::planned_bytes(cfg, 8, 256, &acts, &tmp, 1, p);
    ModelRuntime::planned_bytes(cfg, 8, 256, &acts0, &tmp0, 1, {p.precision, nn::Recompute::none, 0});
    return double(acts) + double(tmp) - double(tmp0);
  };
  for (nn::Precision p : {nn::Precision::fp32, nn::Precision::bf16}) {
    const double none = bytes({p, nn::Recompute::none, 0});
    const double sel = bytes({p, nn::Recompute::selective, 12});
    const double full = bytes({p, nn::Recompute::full, 12});
    std::printf("%s: none %.0f MB, selective %.0f MB (-%.0f%%), full %.0f MB (-%.0f%%)\n", nn::precision_name(p),
                none / 1e6, sel / 1e6, 100 * (1 - sel / none), full / 1e6, 100 * (1 - full / none));
    EXPECT_LE(sel, 0.6 * none) << nn::precision_name(p);
    EXPECT_LE(full, 0.2 * none) << nn::precision_name(p);
    EXPECT_LT(bytes({p, nn::Recompute::full, 6}), none);
    EXPECT_GT(bytes({p, nn::Recompute::full, 6}), full);
  }
  EXPECT_LT(bytes({nn::Precision::bf16, nn::Recompute::none, 0}), bytes({}));
}

}  // namespace
}  // namespace zt
