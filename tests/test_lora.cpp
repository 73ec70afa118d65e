// test_lora.cpp: LoRA adapters (models/lora.cpp, nn/lora.cpp): the adapters' gradients against
// finite differences of the whole model (GPT-2's fused c_attn, Llama's q/k/v and gate/up parts,
// with dropout's masks held fixed), the frozen base untouched and without gradients, the adapter
// table's names and PEFT's counts, the dropout kernel against its definition. PyTorch parity, the
// folder format and merging: tests/parity/lora_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "models/transformer.h"
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
void expect_adapter_fd_grad(const ModelConfig& cfg) {
  Transformer m(cfg);
  m.init_random(7);
  const auto b_init = test::randn<float>(size_t(m.num_params()), 3);
  for (const ParamInfo& p : m.params().list())  // B starts at zero in PEFT; random here
    if (p.name.find("lora_B") != std::string::npos)
      for (int64_t i = 0; i < p.numel; ++i) m.flat_params().as<float>()[p.offset + i] = 0.1f * b_init[p.offset + i];
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

}  // namespace
}  // namespace zt
