// test_lora.cpp: LoRA adapters (models/lora.cpp, nn/lora.cpp): the adapters' gradients against
// finite differences of the whole model (GPT-2's fused c_attn, Llama's q/k/v and gate/up parts,
// with dropout's masks held fixed), the frozen base untouched and without gradients, the adapter
// table's names and PEFT's counts, the dropout kernel against its definition; IA3's vectors the
// same way, and its column kernels against double sums. PyTorch parity, the folder format and
// merging: tests/parity/lora_parity.py and ia3_dora_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "kernels/nf4.h"
#include "kernels/scale_columns.h"
#include "models/transformer.h"
#include "plan/memory_estimate.h"
#include "test_util.h"

namespace zt {
namespace {

ModelConfig tiny_lora(Arch a, std::vector<std::string> targets, double dropout) {
  nlohmann::json j;
  if (a == Arch::gpt2)
    j = {{"model_type", "gpt2"}, {"vocab_size", 67}, {"n_embd", 32},
         {"n_layer", 2},         {"n_head", 4},      {"n_positions", 32}};
  else
    j = {{"model_type", "llama"},    {"vocab_size", 67},
         {"hidden_size", 32},        {"intermediate_size", 40},
         {"num_hidden_layers", 2},   {"num_attention_heads", 4},
         {"num_key_value_heads", 2}, {"max_position_embeddings", 32}};
  ModelConfig c = config_from_json(j, "test");
  c.lora.r = 3;
  c.lora.alpha = 6;
  c.lora.dropout = dropout;
  c.lora.targets = std::move(targets);
  return c;
}

// Every adapter tensor's gradient against central differences of training passes (dropout on,
// its masks fixed by resetting the seed before each pass), B nonzero so A's gradient is live.
// DoRA holds its weight norm constant in backward (PEFT detaches it), so the loss's finite
// differences along A and B differ from its gradient by design: `only` then names the tensors
// checked (its magnitudes; A and B against PyTorch's detached DoRA in ia3_dora_parity.py).
void expect_adapter_fd_grad(const ModelConfig& cfg, const char* only = "") {
  Transformer m(cfg);
  m.init_random(7);
  const auto b_init = test::randn<float>(size_t(m.num_params()), 3);
  for (const ParamInfo& p : m.params().list())  // B starts at zero in PEFT; random here
    if (p.name.find("lora_B") != std::string::npos)
      for (int64_t i = 0; i < p.numel; ++i) m.flat_params().as<float>()[p.offset + i] = 0.1f * b_init[p.offset + i];
    else if (p.name.find("lora_magnitude_vector") != std::string::npos)  // the base's norms, moved off them
      for (int64_t i = 0; i < p.numel; ++i)
        m.flat_params().as<float>()[p.offset + i] *= 1.f + 0.1f * b_init[p.offset + i];
    else if (p.name.find("ia3_l") != std::string::npos)  // ones in PEFT; around one here
      for (int64_t i = 0; i < p.numel; ++i)
        m.flat_params().as<float>()[p.offset + i] = 1.f + 0.2f * b_init[p.offset + i];
  const std::vector<float> base(m.frozen_params().as<float>(),
                                m.frozen_params().as<float>() + m.frozen_params().numel());
  const int B = 2, T = 9;
  m.plan(B, T, true);
  auto in = test::random_tokens(B * T, 67, 4), tg = test::random_tokens(B * T, 67, 5);
  auto pass = [&] {
    m.runtime().set_dropout_seed(99);
    int64_t c = 0;
    return m.forward_backward(in.data(), tg.data(), 1.0f / (B * T), &c) / double(B * T);
  };
  m.zero_grad();
  pass();
  std::vector<double> grad(m.flat_grads().as<float>(), m.flat_grads().as<float>() + m.num_params());
  auto loss_at = [&](const std::vector<double>& dir, double h) {
    std::vector<float> saved(m.flat_params().as<float>(), m.flat_params().as<float>() + m.num_params());
    for (int64_t i = 0; i < m.num_params(); ++i) m.flat_params().as<float>()[i] = float(saved[i] + h * dir[i]);
    const double l = pass();
    std::memcpy(m.flat_params().as<float>(), saved.data(), saved.size() * sizeof(float));
    return l;
  };
  for (const ParamInfo& p : m.params().list()) {
    if (p.name.find(only) == std::string::npos) continue;
    std::vector<double> dir(size_t(m.num_params()), 0.0);
    double n = 0;
    for (int64_t i = 0; i < p.numel; ++i) n += grad[p.offset + i] * grad[p.offset + i];
    n = std::sqrt(n);
    ASSERT_GT(n, 0) << p.name << " has an all-zero gradient";
    for (int64_t i = 0; i < p.numel; ++i) dir[p.offset + i] = grad[p.offset + i] / n;
    const double h = 1e-3, fd = (loss_at(dir, h) - loss_at(dir, -h)) / (2 * h);
    EXPECT_NEAR(fd, n, 2e-3 * n + 2e-4) << p.name;
  }
  // The base: never written, and it has no gradient buffer (the flat gradients are the adapters').
  EXPECT_EQ(0, std::memcmp(base.data(), m.frozen_params().data, base.size() * sizeof(float)));
  EXPECT_EQ(m.flat_grads().numel(), m.num_params());
}

TEST(Lora, Gpt2AdapterGradientsMatchFiniteDifferences) {
  expect_adapter_fd_grad(tiny_lora(Arch::gpt2, {"c_attn", "c_proj", "c_fc"}, 0.0));
}

TEST(Lora, LlamaAdapterGradientsMatchFiniteDifferencesWithDropout) {
  expect_adapter_fd_grad(tiny_lora(Arch::llama, {"all-linear"}, 0.25));
}

TEST(Lora, LlamaPartialFusedTargets) {  // q and v of the fused q/k/v Linear, up of gate/up
  expect_adapter_fd_grad(tiny_lora(Arch::llama, {"q_proj", "v_proj", "up_proj"}, 0.0));
}

ModelConfig tiny_dora(Arch a, std::vector<std::string> targets, double dropout = 0.0) {
  ModelConfig c = tiny_lora(a, std::move(targets), dropout);
  c.lora.dora = true;
  return c;
}

TEST(Dora, Gpt2MagnitudeGradientsMatchFiniteDifferences) {  // Conv1D (in, out) weights, biases kept out of the scale
  expect_adapter_fd_grad(tiny_dora(Arch::gpt2, {"c_attn", "c_proj", "c_fc"}), "lora_magnitude_vector");
}

TEST(Dora, LlamaPartialFusedMagnitudeGradientsMatchFiniteDifferences) {  // q and v of q/k/v, up of gate/up, down
  expect_adapter_fd_grad(tiny_dora(Arch::llama, {"q_proj", "v_proj", "up_proj", "down_proj"}), "lora_magnitude_vector");
}

TEST(Dora, LlamaMagnitudeGradientsWithDropoutMatchFiniteDifferences) {  // PEFT's dropout form, masks fixed
  expect_adapter_fd_grad(tiny_dora(Arch::llama, {"all-linear"}, 0.25), "lora_magnitude_vector");
}

TEST(Dora, MagnitudeStartsAtTheBaseRowNorms) {  // B = 0 at the start: the model is the base
  const ModelConfig c = tiny_dora(Arch::llama, {"q_proj"});
  Transformer m(c);
  m.init_random(7);
  const ModelLayout& l = m.layout();
  const AdapterPart& p = l.adapters[1].qkv[0];
  const LinearOffsets& lin = l.offsets.blocks[1].qkv;
  for (int j = 0; j < p.out_size; ++j) {
    double s = 0;
    for (int i = 0; i < lin.in; ++i) s += std::pow(double(m.frozen_params().as<float>()[lin.w + j * lin.in + i]), 2);
    EXPECT_NEAR(m.flat_params().as<float>()[p.m + j], std::sqrt(s), 1e-5) << j;
  }
}

// The norms of W + A's rows against a double reference, for (out, in) and (in, out) weights; and under
// tensor parallelism's row cut (two slices of the inputs) the slices' squared sums add to the squares.
TEST(Dora, RowNormsOfSumMatchReferenceAndSlicesAddTheirSquares) {
  const int rows = 5, in = 12;
  const std::vector<float> w = randn(size_t(rows * in), 31), a = randn(size_t(rows * in), 32);
  std::vector<float> n(rows), nt(rows), h0(rows), h1(rows);
  std::vector<float> wt(size_t(rows * in));  // (in, out)
  for (int j = 0; j < rows; ++j)
    for (int i = 0; i < in; ++i) wt[size_t(i * rows + j)] = w[size_t(j * in + i)];
  kernels::row_norms_of_sum(n.data(), a.data(), w.data(), in, 1, rows, in);
  kernels::row_norms_of_sum(nt.data(), a.data(), wt.data(), 1, rows, rows, in);
  // The row cut: inputs [0, 7) and [7, 12), each slice's A columns contiguous as a rank holds them.
  for (auto [cut0, cut1, out] : {std::tuple{0, 7, &h0}, {7, in, &h1}}) {
    std::vector<float> as;
    for (int j = 0; j < rows; ++j)
      for (int i = cut0; i < cut1; ++i) as.push_back(a[size_t(j * in + i)]);
    kernels::row_norms_of_sum(out->data(), as.data(), w.data() + cut0, in, 1, rows, cut1 - cut0, /*squared=*/true);
  }
  for (int j = 0; j < rows; ++j) {
    double s = 0;
    for (int i = 0; i < in; ++i) s += std::pow(double(w[size_t(j * in + i)]) + a[size_t(j * in + i)], 2);
    EXPECT_NEAR(n[size_t(j)], std::sqrt(s), 1e-5 * std::sqrt(s)) << j;
    EXPECT_NEAR(nt[size_t(j)], std::sqrt(s), 1e-5 * std::sqrt(s)) << j;
    EXPECT_NEAR(double(h0[size_t(j)]) + h1[size_t(j)], s, 1e-5 * s) << j;
  }
}

ModelConfig tiny_ia3(Arch a, std::vector<std::string> targets, std::vector<std::string> feedforward) {
  ModelConfig c = tiny_lora(a, std::move(targets), 0.0);
  c.lora.type = PeftType::ia3;
  c.lora.r = 0;
  c.lora.feedforward = std::move(feedforward);
  c.lora.feedforward_named = !c.lora.feedforward.empty();
  return c;
}

TEST(Ia3, Gpt2DefaultsGradientsMatchFiniteDifferences) {  // c_attn (bias scaled too), mlp.c_proj's input
  const ModelConfig c = tiny_ia3(Arch::gpt2, {}, {});
  expect_adapter_fd_grad(c);
  EXPECT_EQ(ia3_feedforward_modules(c), std::vector<std::string>{"mlp.c_proj"});
}

TEST(Ia3, LlamaGradientsMatchFiniteDifferences) {  // k and v of the fused q/k/v, o_proj, down_proj's input
  expect_adapter_fd_grad(tiny_ia3(Arch::llama, {"k_proj", "v_proj", "o_proj", "down_proj"}, {"down_proj"}));
}

TEST(Ia3, TableHasPeftNamesAndShapes) {
  const ModelLayout l = model_layout(tiny_ia3(Arch::llama, {}, {}));  // PEFT's llama defaults
  std::vector<std::pair<std::string, std::vector<int64_t>>> got;
  for (const ParamInfo& p : l.table.list())
    if (p.name.find("layers.0.") != std::string::npos) got.push_back({p.name, p.global_shape});
  const std::string b = "base_model.model.model.layers.0.";
  const decltype(got) want = {{b + "self_attn.k_proj.ia3_l", {16, 1}},
                              {b + "self_attn.v_proj.ia3_l", {16, 1}},
                              {b + "mlp.down_proj.ia3_l", {1, 40}}};
  EXPECT_EQ(got, want);
}

TEST(Ia3, ScaleColumnsAndColumnDotsMatchDouble) {
  const int64_t N = 37, ld = 150, begin = 11, cols = 130;
  const auto x = test::randn<float>(size_t(N * ld), 1), g = test::randn<float>(size_t(N * ld), 2),
             s = test::randn<float>(size_t(cols), 3);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
  for (DType t : {DType::f32, DType::bf16}) {
    const void* src = t == DType::f32 ? static_cast<const void*>(x.data()) : xb.data();
    auto val = [&](int64_t k) { return t == DType::f32 ? double(x[size_t(k)]) : double(bf16_to_f32(xb[size_t(k)])); };
    std::vector<float> acc(size_t(cols), 0.5f);
    kernels::column_dot_add(acc.data(), t, static_cast<const char*>(src) + begin * dtype_size(t), ld, g.data() + begin,
                            ld, N, cols);
    std::vector<uint16_t> ob(xb.size());
    std::vector<float> of(x.size());
    kernels::scale_columns(t, t == DType::f32 ? static_cast<void*>(of.data()) : ob.data(), src, N, ld, begin, cols,
                           s.data());
    for (int64_t j = 0; j < cols; ++j) {
      double ref = 0.5;
      for (int64_t i = 0; i < N; ++i) ref += val(i * ld + begin + j) * g[size_t(i * ld + begin + j)];
      EXPECT_NEAR(acc[size_t(j)], ref, 1e-5 * (1 + std::fabs(ref))) << dtype_name(t) << " column " << j;
      for (int64_t i = 0; i < N; ++i) {
        const int64_t k = i * ld + begin + j;
        const double want = val(k) * s[size_t(j)];
        const double got = t == DType::f32 ? of[size_t(k)] : bf16_to_f32(ob[size_t(k)]);
        EXPECT_NEAR(got, want, (t == DType::f32 ? 1e-6 : 8e-3) * (1e-3 + std::fabs(want)));
      }
    }
  }
}

TEST(Lora, AdapterTableHasPeftNamesAndCounts) {
  const ModelConfig c = tiny_lora(Arch::llama, {"q_proj", "down_proj"}, 0.0);
  const ModelLayout l = model_layout(c);
  ASSERT_TRUE(l.frozen_base);
  std::vector<std::string> names;
  for (const ParamInfo& p : l.table.list()) names.push_back(p.name);
  const std::vector<std::string> want = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                                         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
                                         "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight",
                                         "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight",
                                         "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
                                         "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight",
                                         "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight",
                                         "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"};
  EXPECT_EQ(names, want);
  // PEFT's count: r (in + out) per adapted module: q (32 -> 32), down (40 -> 32), two layers.
  EXPECT_EQ(l.table.total(), 2 * (3 * (32 + 32) + 3 * (40 + 32)));
  EXPECT_EQ(l.base_table.total(), model_layout(tiny_lora(Arch::llama, {}, 0.0)).base_table.total());
  ModelConfig bad = c;
  bad.lora.targets = {"q_prj"};
  EXPECT_THROW(model_layout(bad), Error);
}

// QLoRA: the model with an NF4 base computes what the LoRA model computes with the base's linear
// weights replaced by their dequantized values (loss and adapter gradients), for GPT-2's Conv1D
// (quantized transposed), Llama's fused Linears and Mixtral's experts; the NF4 weights take under
// 0.55 bytes each.
void expect_qlora_equals_dequantized(const ModelConfig& c, nn::Precision precision) {
  ModelConfig q = c, plain = c;
  plain.lora.int8 = false;
  if (!c.lora.int8) q.lora.nf4 = q.lora.nf4_double_quant = true;
  const double bytes_bound = c.lora.int8 ? 1.0 + 4.0 / 32 : 0.55;  // int8: a byte and a row's fp32 absmax (in >= 32)
  Transformer lora(plain), qlora(q);
  lora.init_random(7);
  qlora.init_random(7);
  const size_t held = mem_stats().current[size_t(MemCategory::parameters)];
  const int64_t base_fp32 = qlora.frozen_params().numel();
  qlora.quantize_base();
  int64_t n4 = 0;
  EXPECT_LE(double(qlora.nf4_bytes(&n4)) / double(n4), bytes_bound);
  // The memory report's parameters: the quantized weights' fp32 bytes gone, their NF4 bytes counted.
  EXPECT_EQ(mem_stats().current[size_t(MemCategory::parameters)] + size_t(base_fp32) * 4,
            held + size_t(qlora.frozen_params().numel()) * 4 + qlora.nf4_bytes());
  const ModelOffsets& s = lora.layout().offsets;
  for (size_t l = 0; l < s.blocks.size(); ++l) {
    const LinearOffsets* lins[4] = {&s.blocks[l].qkv, &s.blocks[l].proj, &s.blocks[l].fc_in, &s.blocks[l].fc_out};
    for (int k = 0; k < 4; ++k) {
      const LinearOffsets& lo = *lins[k];
      if (lo.w < 0) continue;  // a mixture-of-experts block has no dense MLP
      std::vector<float> w(size_t(lo.in) * size_t(lo.out));
      kernels::nf4_dequantize(*qlora.nf4_weight(int(l), k), w.data());  // (out, in)
      float* dst = lora.frozen_params().as<float>() + lo.w;
      for (int64_t o = 0; o < lo.out; ++o)
        for (int64_t i = 0; i < lo.in; ++i)
          (lo.w_in_out ? dst[i * lo.out + o] : dst[o * lo.in + i]) = w[size_t(o * lo.in + i)];
    }
    // The routed experts: [W_gate; W_up] then W_out per expert, each its own NF4 tensor.
    const int64_t F = c.moe.expert_ffn, C = c.n_embd;
    for (int e = 0; c.moe.on() && e < c.moe.num_experts; ++e) {
      float* dst = lora.frozen_params().as<float>() + s.blocks[l].moe.experts + e * 3 * F * C;
      kernels::nf4_dequantize(qlora.nf4_experts(int(l))[2 * e], dst);
      kernels::nf4_dequantize(qlora.nf4_experts(int(l))[2 * e + 1], dst + 2 * F * C);
    }
  }
  lora.base_changed();
  const auto b = test::randn<float>(size_t(lora.num_params()), 3);
  for (Transformer* m : {&lora, &qlora}) {
    for (int64_t i = 0; i < m->num_params(); ++i) m->flat_params().as<float>()[i] += 0.05f * b[size_t(i)];
    m->runtime().set_act_plan({precision});
  }
  const int B = 2, T = 9;
  auto in = test::random_tokens(B * T, 67, 4), tg = test::random_tokens(B * T, 67, 5);
  double loss[2];
  std::vector<float> grads[2];
  int i = 0;
  for (Transformer* m : {&lora, &qlora}) {
    m->plan(B, T, true);
    m->zero_grad();
    int64_t cnt = 0;
    loss[i] = m->forward_backward(in.data(), tg.data(), 1.0f / (B * T), &cnt);
    grads[i++].assign(m->flat_grads().as<float>(), m->flat_grads().as<float>() + m->num_params());
  }
  const double tol = precision == nn::Precision::fp32 ? 1e-5 : 2e-3;
  EXPECT_NEAR(loss[1], loss[0], tol * std::abs(loss[0]));
  double num = 0, den = 0;
  for (size_t k = 0; k < grads[0].size(); ++k)
    num += double(grads[1][k] - grads[0][k]) * (grads[1][k] - grads[0][k]), den += double(grads[0][k]) * grads[0][k];
  EXPECT_LT(std::sqrt(num / den), precision == nn::Precision::fp32 ? 1e-4 : 2e-2);
}

TEST(Lora, QloraGpt2EqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_lora(Arch::gpt2, {"all-linear"}, 0.0), nn::Precision::fp32);
}
TEST(Lora, QloraLlamaEqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_lora(Arch::llama, {"all-linear"}, 0.0), nn::Precision::fp32);
}
TEST(Lora, QloraLlamaBf16EqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_lora(Arch::llama, {"all-linear"}, 0.0), nn::Precision::bf16);
}

// A tiny Mixtral (4 experts, top 2, the load-balancing loss on), its attention adapted: the
// experts' NF4 weights go through the layer one expert at a time.
ModelConfig tiny_moe_lora() {
  nlohmann::json j = {{"model_type", "mixtral"},
                      {"vocab_size", 67},
                      {"hidden_size", 32},
                      {"intermediate_size", 64},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"num_local_experts", 4},
                      {"num_experts_per_tok", 2},
                      {"output_router_logits", true},
                      {"router_aux_loss_coef", 0.05},
                      {"max_position_embeddings", 32}};
  ModelConfig c = config_from_json(j, "test");
  c.lora.r = 3;
  c.lora.alpha = 6;
  c.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return c;
}
// QDoRA: DoRA's weight norms read the NF4 rows (dequantized a panel at a time), its dropout-free
// form the NF4 GEMMs; GPT-2's Conv1D weights are quantized transposed.
TEST(Dora, QdoraLlamaEqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_dora(Arch::llama, {"all-linear"}), nn::Precision::fp32);
}
TEST(Dora, QdoraGpt2Bf16EqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_dora(Arch::gpt2, {"c_attn", "c_proj", "c_fc"}), nn::Precision::bf16);
}
TEST(Dora, QdoraLlamaWithDropoutEqualsDequantizedBase) {  // PEFT's dropout form: per-part NF4 output columns
  expect_qlora_equals_dequantized(tiny_dora(Arch::llama, {"all-linear"}, 0.25), nn::Precision::fp32);
}

// --load_in_8bit: the same with bitsandbytes' Int8Params (row-wise int8) in place of NF4.
TEST(Lora, Int8LlamaEqualsDequantizedBase) {
  ModelConfig c = tiny_lora(Arch::llama, {"all-linear"}, 0.0);
  c.lora.int8 = true;
  expect_qlora_equals_dequantized(c, nn::Precision::fp32);
}
TEST(Lora, Int8MixtralBf16EqualsDequantizedBase) {
  ModelConfig c = tiny_moe_lora();
  c.lora.int8 = true;
  expect_qlora_equals_dequantized(c, nn::Precision::bf16);
}

// estimate-memory's frozen base (plan/memory_estimate.h) against what a quantized model holds:
// NF4 (single and double quantization) and int8 weights plus the fp32 rest, and the rest's bf16
// compute copy; a Mixtral's experts included.
TEST(Lora, EstimatedFrozenBaseBytesEqualTheQuantizedModels) {
  struct Case {
    ModelConfig c;
    const char* what;
  };
  std::vector<Case> cases;
  for (int k = 0; k < 3; ++k) {
    ModelConfig c = k < 2 ? tiny_lora(Arch::llama, {"all-linear"}, 0.0) : tiny_moe_lora();
    if (k == 1)
      c.lora.int8 = true;
    else
      c.lora.nf4 = true, c.lora.nf4_double_quant = k == 2;
    cases.push_back({c, k == 0 ? "llama nf4" : k == 1 ? "llama int8" : "mixtral nf4 + double quantization"});
  }
  cases.push_back({tiny_lora(Arch::gpt2, {"all-linear"}, 0.0), "gpt2 fp32 base"});
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    Transformer m(k.c);
    m.init_random(7);
    if (k.c.lora.quantized()) m.quantize_base();
    const int64_t rest = m.frozen_params().numel(), held = int64_t(m.nf4_bytes()) + 4 * rest;
    EXPECT_EQ(parallel::frozen_base_bytes(k.c, model_layout(k.c), nn::Precision::fp32), held);
    EXPECT_EQ(parallel::frozen_base_bytes(k.c, model_layout(k.c), nn::Precision::bf16), held + 2 * rest);
  }
}

TEST(Lora, QloraMixtralEqualsDequantizedBase) { expect_qlora_equals_dequantized(tiny_moe_lora(), nn::Precision::fp32); }
TEST(Lora, QloraMixtralBf16EqualsDequantizedBase) {
  expect_qlora_equals_dequantized(tiny_moe_lora(), nn::Precision::bf16);
}

TEST(Lora, DropoutKernelKeepsItsMaskAndScale) {
  const int64_t n = 20000;
  const float p = 0.3f;
  auto x = test::randn<float>(size_t(n), 1);
  std::vector<float> y(static_cast<size_t>(n)), g(static_cast<size_t>(n), 1.0f), dx(static_cast<size_t>(n), 0.0f);
  kernels::dropout_forward(DType::f32, y.data(), x.data(), n, p, 42);
  kernels::dropout_backward_add(dx.data(), g.data(), n, p, 42);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool k = kernels::dropout_keeps(42, i, p);
    kept += k;
    EXPECT_EQ(y[size_t(i)], k ? x[size_t(i)] * (1.0f / (1.0f - p)) : 0.0f);
    EXPECT_EQ(dx[size_t(i)], k ? 1.0f / (1.0f - p) : 0.0f);
  }
  EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.015);
  std::vector<uint16_t> xb(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xb[size_t(i)] = f32_to_bf16(x[size_t(i)]);
  kernels::dropout_forward(DType::bf16, yb.data(), xb.data(), n, p, 42);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(yb[size_t(i)], kernels::dropout_keeps(42, i, p)
                                 ? f32_to_bf16(bf16_to_f32(xb[size_t(i)]) * (1.0f / (1.0f - p)))
                                 : uint16_t(0));
}

TEST(Lora, DropoutOfACutBlockDrawsTheWholeMatrixMask) {  // a row-parallel rank's columns [20, 50) of 100
  const int64_t rows = 7, ld = 100, col0 = 20, cols = 30;
  const float p = 0.4f;
  const auto whole = test::randn<float>(size_t(rows * ld), 2);
  std::vector<float> whole_out(whole.size()), block(size_t(rows * cols)), block_out(block.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) block[size_t(r * cols + c)] = whole[size_t(r * ld + col0 + c)];
  kernels::dropout_forward(DType::f32, whole_out.data(), whole.data(), rows * ld, p, 9);
  kernels::dropout_forward(DType::f32, block_out.data(), block.data(), rows * cols, p, 9, {cols, ld, col0});
  std::vector<float> dblock(block.size(), 0.f), ones(block.size(), 1.f);
  kernels::dropout_backward_add(dblock.data(), ones.data(), rows * cols, p, 9, {cols, ld, col0});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(block_out[size_t(r * cols + c)], whole_out[size_t(r * ld + col0 + c)]);
      EXPECT_EQ(dblock[size_t(r * cols + c)], whole_out[size_t(r * ld + col0 + c)] != 0.f ? 1.f / (1.f - p) : 0.f);
    }
}

// Phi-3's fused qkv_proj adapters under grouped-query attention and tensor parallelism: the rank's
// rows of q, k and v (parts of unequal size) map to each part's held rows of the whole tensor.
TEST(Lora, UnequalFusedPartsMapEachPartsHeldRows) {
  ParamInfo p;  // (q 8 + k 4 + v 4, r 2); TP rank 1 of 2 holds q rows [4, 8), k and v rows [2, 4)
  p.shape = {8, 2};
  p.global_shape = {16, 2};
  p.numel = 16;
  p.split = Split::column;
  p.split_dim = 0;
  p.split_part_list = {{8, 4, 4}, {4, 2, 2}, {4, 2, 2}};
  std::vector<std::tuple<int64_t, int64_t, int64_t>> runs;
  for_each_slice_run(p, p.split_offset, [&](int64_t g, int64_t l, int64_t n) { runs.emplace_back(g, l, n); });
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> want = {{8, 0, 8}, {20, 8, 4}, {28, 12, 4}};
  EXPECT_EQ(runs, want);
}

}  // namespace
}  // namespace zt
