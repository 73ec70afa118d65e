// test_moe_lora.cpp: LoRA on the routed experts (nn/moe_lora.cpp). The layer with adapters equals the
// reference layer whose experts hold the merged weights W + s B A (forward), and its input and adapter
// gradients equal central finite differences of that reference's objective (in double); the frozen
// experts take no gradient. Cases: gate, up and down adapted; up and down only (the up part's columns).
#include <gtest/gtest.h>

#include "kernels/moe_reference.h"
#include "nn/moe.h"
#include "moe_test_util.h"
#include "test_util.h"

namespace zt {
namespace {

using test::cast;
using test::expect_close;
using test::randn;

struct LoraMoeCase {
  nn::MoeShape s{8, 4, 2, 6, 0, false, true, 0.0};
  int64_t N = 12;
  int r = 2;
  double scale = 1.5;
  bool gate = true, up = true, down = true;
  std::vector<double> x, router, experts, dy, lora;

  LoraMoeCase() {
    x = randn<double>(size_t(N * s.C), 2);
    router = randn<double>(size_t(s.E * s.C), 3, 0.7);
    experts = randn<double>(size_t(s.E) * 3 * s.F * s.C, 4, 0.4);
    dy = randn<double>(size_t(N * s.C), 8);
  }
  nn::MoeExpertLora spec() const {
    nn::MoeExpertLora L;
    L.r = r, L.scale = float(scale), L.gate = gate, L.up = up, L.down = down;
    return L;
  }
  // The experts' weights with every adapter merged: W_e rows += s B A per adapted module.
  std::vector<double> merged() const {
    const nn::MoeExpertLora L = spec();
    const int64_t C = s.C, F = s.F, st = L.stride(s.C, s.F), wst = 3 * F * C;
    std::vector<double> w = experts;
    auto add = [&](double* W, const double* B, const double* A, int64_t rows, int64_t cols) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          for (int k = 0; k < r; ++k) W[i * cols + j] += scale * B[i * r + k] * A[k * cols + j];
    };
    for (int e = 0; e < s.E; ++e) {
      const double* P = lora.data() + e * st;
      double* W = w.data() + e * wst;
      for (int j = 0; j < L.parts_in(); ++j) {
        const int64_t rows0 = (j == 0 && gate) ? 0 : F;  // the gate's rows, then the up's
        add(W + rows0 * C, P + L.b_in(s.C) + j * F * r, P + j * r * C, F, C);
      }
      if (down) add(W + 2 * F * C, P + L.b_down(s.C, s.F), P + L.a_down(s.C, s.F), C, F);
    }
    return w;
  }
  double objective() const {
    const std::vector<double> w = merged();
    ref::MoeRefLayer<double> m{s.C, s.E, s.K, s.F, 0, false, s.renorm, 0};
    m.router = router.data(), m.experts = w.data();
    std::vector<double> y(size_t(N * s.C));
    ref::moe_layer_forward(y.data(), x.data(), m, N);
    double f = 0;
    for (size_t i = 0; i < y.size(); ++i) f += dy[i] * y[i];
    return f;
  }
};

nn::Linear frozen_linear(std::vector<float>& w, int in, int out) {
  nn::Linear l;
  l.in = in, l.out = out;
  l.w = l.wc = TensorView::of(w.data(), {out, in});
  return l;
}

void check_expert_lora(LoraMoeCase& c) {
  const nn::MoeShape& s = c.s;
  nn::MoeExpertLora L = c.spec();
  c.lora = randn<double>(size_t(s.E * L.stride(s.C, s.F)), 11, 0.5);
  std::vector<float> x = cast<float>(c.x), router = cast<float>(c.router), experts = cast<float>(c.experts);
  std::vector<float> p = cast<float>(c.lora), dp(p.size());
  nn::MoeLoraScratch scratch;
  nn::Moe m;
  m.shape = s;
  m.router = frozen_linear(router, s.C, s.E);
  m.experts = TensorView::of(experts.data(), {int64_t(experts.size())});  // frozen: no dexperts
  L.p = TensorView::of(p.data(), {int64_t(p.size())});
  L.g = TensorView::of(dp.data(), {int64_t(dp.size())});
  L.scratch = &scratch;
  m.lora = L;
  const test::MoeBuffers buf = test::moe_buffers(s, c.N);
  const nn::MoeActs& a = buf.acts;
  const nn::MoeScratch& sc = buf.scratch;
  std::vector<float> y(x.size()), dx(x.size());
  std::vector<float> dy = cast<float>(c.dy);
  m.forward(TensorView::of(y.data(), {c.N, s.C}), TensorView::of(x.data(), {c.N, s.C}), a);
  const std::vector<double> w = c.merged();
  ref::MoeRefLayer<double> rl{s.C, s.E, s.K, s.F, 0, false, s.renorm, 0};
  rl.router = c.router.data(), rl.experts = w.data();
  std::vector<double> y_ref(x.size());
  ref::moe_layer_forward(y_ref.data(), c.x.data(), rl, c.N);
  expect_close(y, y_ref, 1e-4, 1e-5, "forward with adapters = merged experts");
  m.backward(TensorView::of(dx.data(), {c.N, s.C}), TensorView::of(dy.data(), {c.N, s.C}),
             TensorView::of(x.data(), {c.N, s.C}), a, sc);
  auto fd = [&](std::vector<double>& v, const std::vector<float>& g, const char* what) {
    expect_close(g, test::central_differences(v, [&] { return c.objective(); }), 2e-3, 2e-4, what);
  };
  fd(c.x, dx, "dx");
  fd(c.lora, dp, "d adapters");
}

TEST(MoeExpertLora, GateUpDownEqualMergedExpertsAndFiniteDifferences) {
  LoraMoeCase c;
  check_expert_lora(c);
}

TEST(MoeExpertLora, UpAndDownOnlyAdaptTheirColumns) {
  LoraMoeCase c;
  c.gate = false;
  check_expert_lora(c);
}

TEST(MoeExpertLora, GateUpOnlyLeaveDownAlone) {
  LoraMoeCase c;
  c.down = false;
  c.r = 3;
  check_expert_lora(c);
}

}  // namespace
}  // namespace zt
