// test_moe.cpp: the mixture-of-experts kernels and layer (kernels/moe.h, nn/moe.h) against the
// naive per-token reference (kernels/moe_reference.h): the router, the grouping, the grouped GEMMs,
// the layer's forward, and its backward (inputs, router, experts, shared expert and its gate, the
// load-balancing and z-loss gradients at the router) against central finite differences in double.
#include <gtest/gtest.h>

#include <numeric>

#include "kernels/moe.h"
#include "kernels/moe_reference.h"
#include "nn/moe.h"
#include "moe_test_util.h"
#include "test_util.h"

namespace zt {
namespace {

using test::cast;
using test::expect_close;
using test::randn;

TEST(MoeKernels, RouterMatchesReference) {
  const kernels::MoeDims d{16, 0, 6, 2};
  const std::vector<float> logits = randn(size_t(d.N * d.E), 1, 2.0);
  for (bool renorm : {false, true}) {
    std::vector<float> p(logits.size()), w(size_t(d.N * d.K)), lse(size_t(d.N));
    std::vector<int32_t> idx(size_t(d.N * d.K));
    kernels::moe_router_forward(p.data(), idx.data(), w.data(), lse.data(), logits.data(), d, renorm);
    for (int64_t t = 0; t < d.N; ++t) {
      std::vector<double> q(static_cast<size_t>(d.E));
      double mx = -1e30, s = 0;
      for (int e = 0; e < d.E; ++e) mx = std::max(mx, double(logits[size_t(t * d.E + e)]));
      for (int e = 0; e < d.E; ++e) s += std::exp(logits[size_t(t * d.E + e)] - mx);
      for (int e = 0; e < d.E; ++e) q[size_t(e)] = std::exp(logits[size_t(t * d.E + e)] - mx) / s;
      std::vector<int> order(static_cast<size_t>(d.E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return q[size_t(a)] > q[size_t(b)]; });
      const double sum = q[size_t(order[0])] + q[size_t(order[1])];
      for (int k = 0; k < d.K; ++k) {
        EXPECT_EQ(idx[size_t(t * d.K + k)], order[size_t(k)]);
        const double want = q[size_t(order[size_t(k)])] / (renorm ? sum : 1.0);
        EXPECT_NEAR(w[size_t(t * d.K + k)], want, 1e-6);
      }
      EXPECT_NEAR(lse[size_t(t)], mx + std::log(s), 1e-5);
    }
  }
}

TEST(MoeKernels, GroupingIsAStablePermutationAndCapacityDrops) {
  const kernels::MoeDims d{10, 0, 3, 2};
  // Token t picks experts t % 3 and (t + 1) % 3.
  std::vector<int32_t> idx(size_t(d.N * d.K));
  for (int64_t t = 0; t < d.N; ++t) idx[size_t(2 * t)] = int32_t(t % 3), idx[size_t(2 * t + 1)] = int32_t((t + 1) % 3);
  std::vector<int32_t> counts(3), offsets(4), token_of(20), slot_of(20);
  EXPECT_EQ(
      kernels::moe_group_by_expert(counts.data(), offsets.data(), token_of.data(), slot_of.data(), idx.data(), d, 0),
      0);
  EXPECT_EQ(offsets[3], 20);
  for (int64_t a = 0; a < 20; ++a) {
    const int32_t s = slot_of[size_t(a)], e = idx[size_t(a)];
    ASSERT_GE(s, offsets[size_t(e)]);
    ASSERT_LT(s, offsets[size_t(e) + 1]);
    EXPECT_EQ(token_of[size_t(s)], a / 2);
  }
  for (int e = 0; e < 3; ++e)  // token order within each expert
    for (int32_t r = offsets[size_t(e)] + 1; r < offsets[size_t(e) + 1]; ++r)
      EXPECT_LT(token_of[size_t(r - 1)], token_of[size_t(r)]);
  // Capacity 5: expert 0 is wanted by tokens 0,2,3,5,6,8,9 (7 of them): the last two drop; so for 1 and 2.
  const int64_t dropped =
      kernels::moe_group_by_expert(counts.data(), offsets.data(), token_of.data(), slot_of.data(), idx.data(), d, 5);
  EXPECT_EQ(dropped, 20 - 15);
  EXPECT_EQ(counts, (std::vector<int32_t>{5, 5, 5}));
  EXPECT_EQ(slot_of[size_t(2 * 9 + 1)], -1);  // token 9's second choice (expert 1) came too late
}

// One layer's weights in double, the views the fast layer binds, and its buffers.
struct MoeCase {
  nn::MoeShape s;
  int64_t N = 12;
  std::vector<double> x, router, experts, sh_in, sh_out, sh_gate, dy, dprob;
  double z_grad = 0.3;

  MoeCase(int E, int K, int F, int Fs, bool gate, bool renorm, double cf) {
    s = {8, E, K, F, Fs, gate, renorm, cf};
    x = randn<double>(size_t(N * s.C), 2);
    router = randn<double>(size_t(E * s.C), 3, 0.7);
    experts = randn<double>(size_t(E) * 3 * F * s.C, 4, 0.4);
    sh_in = randn<double>(size_t(2 * Fs * s.C), 5, 0.4);
    sh_out = randn<double>(size_t(Fs * s.C), 6, 0.4);
    sh_gate = randn<double>(size_t(s.C), 7, 0.5);
    dy = randn<double>(size_t(N * s.C), 8);
    dprob = randn<double>(size_t(E), 9, 0.5);
  }
  ref::MoeRefLayer<double> ref() const {
    ref::MoeRefLayer<double> m{s.C, s.E, s.K, s.F, s.Fs, s.shared_gate, s.renorm, s.capacity(N)};
    m.router = router.data(), m.experts = experts.data(), m.sh_in = sh_in.data(), m.sh_out = sh_out.data();
    m.sh_gate = sh_gate.data();
    return m;
  }
  // The scalar whose gradient the layer's backward computes: <dy, y> + sum_t <dprob, p_t> + z_grad sum_t lse_t^2.
  double objective() const {
    std::vector<double> y(size_t(N * s.C)), p(size_t(N * s.E)), lse(static_cast<size_t>(N));
    ref::moe_layer_forward(y.data(), x.data(), ref(), N, p.data(), lse.data());
    double f = 0;
    for (size_t i = 0; i < y.size(); ++i) f += dy[i] * y[i];
    for (int64_t t = 0; t < N; ++t) {
      for (int e = 0; e < s.E; ++e) f += dprob[size_t(e)] * p[size_t(t * s.E + e)];
      f += z_grad * lse[size_t(t)] * lse[size_t(t)];
    }
    return f;
  }
};

nn::Linear moe_linear(std::vector<float>& w, std::vector<float>& dw, int in, int out) {
  nn::Linear l;
  l.in = in, l.out = out;
  l.w = TensorView::of(w.data(), {out, in});
  l.dw = TensorView::of(dw.data(), {out, in});
  l.wc = l.w;
  return l;
}

// Runs the fast layer's forward and backward on a case; checks the forward against the reference
// and every gradient against finite differences of the reference's objective.
void check_moe_layer(MoeCase& c) {
  const nn::MoeShape& s = c.s;
  std::vector<float> x = cast<float>(c.x), router = cast<float>(c.router), experts = cast<float>(c.experts);
  std::vector<float> sh_in = cast<float>(c.sh_in), sh_out = cast<float>(c.sh_out), sh_gate = cast<float>(c.sh_gate);
  std::vector<float> drouter(router.size()), dexperts(experts.size()), dsh_in(sh_in.size()), dsh_out(sh_out.size()),
      dsh_gate(sh_gate.size());
  nn::Moe m;
  m.shape = s;
  m.router = moe_linear(router, drouter, s.C, s.E);
  m.experts = TensorView::of(experts.data(), {int64_t(experts.size())});
  m.dexperts = TensorView::of(dexperts.data(), {int64_t(experts.size())});
  if (s.Fs > 0) {
    m.sh_in = moe_linear(sh_in, dsh_in, s.C, 2 * s.Fs);
    m.sh_out = moe_linear(sh_out, dsh_out, s.Fs, s.C);
    m.sh_gate_lin = moe_linear(sh_gate, dsh_gate, s.C, 1);
  }
  const std::vector<float> dprob = cast<float>(c.dprob);
  m.loss_grad = {dprob.data(), float(c.z_grad)};
  const test::MoeBuffers buf = test::moe_buffers(s, c.N);
  const nn::MoeActs& a = buf.acts;
  const nn::MoeScratch& sc = buf.scratch;
  std::vector<float> y(x.size()), dx(x.size());
  const std::vector<float> dy = cast<float>(c.dy);
  m.forward(TensorView::of(y.data(), {c.N, s.C}), TensorView::of(x.data(), {c.N, s.C}), a);
  std::vector<double> y_ref(x.size());
  ref::moe_layer_forward(y_ref.data(), c.x.data(), c.ref(), c.N);
  expect_close(y, y_ref, 1e-4, 1e-5, "forward");
  if (s.capacity_factor > 0) {
    EXPECT_GT(*a.dropped.as<int64_t>(), 0) << "the capacity should drop some assignments";
  }
  m.backward(TensorView::of(dx.data(), {c.N, s.C}), TensorView::of(const_cast<float*>(dy.data()), {c.N, s.C}),
             TensorView::of(x.data(), {c.N, s.C}), a, sc);
  auto fd = [&](std::vector<double>& v, const std::vector<float>& g, const char* what) {
    expect_close(g, test::central_differences(v, [&] { return c.objective(); }), 2e-3, 2e-4, what);
  };
  fd(c.x, dx, "dx");
  fd(c.router, drouter, "d router");
  fd(c.experts, dexperts, "d experts");
  if (s.Fs > 0) {
    fd(c.sh_in, dsh_in, "d shared gate/up");
    fd(c.sh_out, dsh_out, "d shared down");
    if (s.shared_gate) fd(c.sh_gate, dsh_gate, "d shared_expert_gate");
  }
}

TEST(MoeLayer, MixtralStyleForwardBackward) {
  MoeCase c(4, 2, 6, 0, false, true, 0.0);
  check_moe_layer(c);
}

TEST(MoeLayer, QwenSharedExpertNoRenormForwardBackward) {
  MoeCase c(5, 3, 4, 5, true, false, 0.0);
  check_moe_layer(c);
}

TEST(MoeLayer, CapacityDropsForwardBackward) {
  MoeCase c(4, 2, 6, 0, false, true, 0.75);  // capacity ceil(0.75 * 12 * 2 / 4) = 5 of ~6 per expert
  check_moe_layer(c);
}

// Tensor parallelism's cut of the layer: parts holding experts [b, b + E / 2) compute their experts'
// rows only, and one of them adds the auxiliary losses' gradients; the parts' outputs, input and
// router gradients sum to the whole layer's, and their expert gradients are the whole's halves.
TEST(MoeLayer, HeldExpertHalvesSumToTheWholeLayer) {
  MoeCase c(4, 2, 6, 0, false, true, 0.0);
  const nn::MoeShape whole = c.s;
  const int64_t N = c.N, C = whole.C, stride = 3 * int64_t(whole.F) * C;
  std::vector<float> x = cast<float>(c.x), dy = cast<float>(c.dy), dprob = cast<float>(c.dprob);
  struct Out {
    std::vector<float> y, dx, drouter, dexperts;
  };
  auto run = [&](int held, int begin, bool adds) {
    std::vector<float> router = cast<float>(c.router), all = cast<float>(c.experts);
    std::vector<float> experts(all.begin() + begin * stride, all.begin() + (begin + held) * stride);
    Out o{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(router.size()),
          std::vector<float>(experts.size())};
    nn::Moe m;
    m.shape = whole;
    m.shape.held = held, m.shape.held_begin = begin;
    m.adds_loss_grads = adds;
    m.router = moe_linear(router, o.drouter, int(C), whole.E);
    m.experts = TensorView::of(experts.data(), {int64_t(experts.size())});
    m.dexperts = TensorView::of(o.dexperts.data(), {int64_t(experts.size())});
    m.loss_grad = {dprob.data(), float(c.z_grad)};
    const test::MoeBuffers buf = test::moe_buffers(whole, N);
    const nn::MoeActs& a = buf.acts;
    const nn::MoeScratch& sc = buf.scratch;
    m.forward(TensorView::of(o.y.data(), {N, C}), TensorView::of(x.data(), {N, C}), a);
    m.backward(TensorView::of(o.dx.data(), {N, C}), TensorView::of(dy.data(), {N, C}), TensorView::of(x.data(), {N, C}),
               a, sc);
    return o;
  };
  const Out w = run(whole.E, 0, true), p0 = run(whole.E / 2, 0, true), p1 = run(whole.E / 2, whole.E / 2, false);
  auto sum = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> s(a.size());
    for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
    return s;
  };
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  expect_close(sum(p0.y, p1.y), as_double(w.y), 1e-5, 1e-6, "y");
  expect_close(sum(p0.dx, p1.dx), as_double(w.dx), 1e-5, 1e-6, "dx");
  expect_close(sum(p0.drouter, p1.drouter), as_double(w.drouter), 1e-5, 1e-6, "d router");
  std::vector<float> halves = p0.dexperts;
  halves.insert(halves.end(), p1.dexperts.begin(), p1.dexperts.end());
  expect_close(halves, as_double(w.dexperts), 1e-5, 1e-6, "d experts");
}

// bf16 runs: the typed grouped GEMM and weight gradient on bf16 operands equal double products of
// the bf16 values (fp32 accumulation), whichever bf16 path the machine has.
TEST(MoeKernels, GroupedGemmBf16EqualsProductsOfTheRoundedValues) {
  const int E = 3, n = 5, k = 7, R = 9;
  const std::vector<int32_t> offsets{0, 4, 4, 9};
  const std::vector<float> a = randn(size_t(R * k), 21), b = randn(size_t(E * n * k), 22),
                           dy = randn(size_t(R * n), 23);
  auto lowp = [](const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
  };
  auto back = [](uint16_t h) { return double(bf16_to_f32(h)); };
  const std::vector<uint16_t> a16 = lowp(a), b16 = lowp(b), dy16 = lowp(dy);
  std::vector<float> c(size_t(R * n)), dw(size_t(E * n * k), 0.f);
  kernels::moe_grouped_gemm_typed(DType::bf16, offsets.data(), E, true, n, k, a16.data(), k, b16.data(), int64_t(n) * k,
                                  k, 0.f, c.data(), n);
  kernels::moe_grouped_wgrad_typed(DType::bf16, offsets.data(), E, n, k, dy16.data(), n, a16.data(), k, dw.data(),
                                   int64_t(n) * k, k);
  std::vector<double> want_c(c.size(), 0.0), want_dw(dw.size(), 0.0);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r)
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p) {
          want_c[size_t(r * n + j)] += back(a16[size_t(r * k + p)]) * back(b16[size_t((e * n + j) * k + p)]);
          want_dw[size_t((e * n + j) * k + p)] += back(dy16[size_t(r * n + j)]) * back(a16[size_t(r * k + p)]);
        }
  expect_close(c, want_c, 1e-5, 1e-5, "bf16 grouped gemm");
  expect_close(dw, want_dw, 1e-5, 1e-5, "bf16 grouped wgrad");
}

TEST(MoeKernels, GroupedGemmEqualsPerExpertProducts) {
  const int E = 3, n = 5, k = 7;
  const std::vector<int32_t> offsets{0, 4, 4, 9};  // expert 1 gets no rows
  const std::vector<float> a = randn(size_t(9 * k), 11), b = randn(size_t(E * n * k), 12);
  std::vector<float> c(size_t(9 * n));
  kernels::moe_grouped_gemm(offsets.data(), E, true, n, k, a.data(), k, b.data(), int64_t(n) * k, k, 0.f, c.data(), n);
  std::vector<double> want(c.size());
  for (int e = 0; e < E; ++e)
    for (int r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += double(a[size_t(r * k + p)]) * b[size_t((e * n + j) * k + p)];
        want[size_t(r * n + j)] = s;
      }
  expect_close(c, want, 1e-5, 1e-5, "grouped gemm");
}

}  // namespace
}  // namespace zt
