// test_kernels.cpp: tier 1. Each fast kernel against its naive reference (fp32, random
// shapes), and each reference backward against central finite differences in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/reference.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "test_util.h"

namespace zt {
using test::cast;
using test::dot;
using test::expect_close;
using test::expect_fd_grad;
using test::randn;

TEST(Gemm, MatchesReferenceAllTransposes) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto [m, n, k] : {std::tuple{1, 1, 1}, {7, 13, 5}, {64, 33, 129}, {130, 70, 40}}) {
        auto a = randn(size_t(m) * k, 1), b = randn(size_t(k) * n, 2), c = randn(size_t(m) * n, 3);
        auto c_ref = c;
        int lda = ta ? m : k, ldb = tb ? k : n;
        kernels::gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), n);
        kernels::gemm_ref<float>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c_ref.data(), n);
        expect_close(c, c_ref, 1e-4, 1e-5, "gemm");
      }
}

TEST(LayerNorm, FastMatchesReference) {
  test::for_each_isa([&] {
  const int N = 37, C = 96;
  auto x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), dout = randn(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N), out_r(N * C), mean_r(N), rstd_r(N);
  kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  ref::layernorm_forward<float>(out_r.data(), mean_r.data(), rstd_r.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  expect_close(out, out_r, 1e-5, 1e-5, "layernorm out");
  std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f), db(C), dx_r = dx, dw_r = dw, db_r = db;
  kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
  ref::layernorm_backward<float>(dx_r.data(), dw_r.data(), db_r.data(), dout.data(), x.data(), w.data(), mean.data(),
                                 rstd.data(), N, C);
  expect_close(dx, dx_r, 1e-4, 1e-5, "layernorm dx");
  expect_close(dw, dw_r, 1e-4, 1e-5, "layernorm dw");
  expect_close(db, db_r, 1e-4, 1e-5, "layernorm db");
  });
}

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 8;
  auto x = randn<double>(N * C, 1), w = randn<double>(C, 2), b = randn<double>(C, 3), r = randn<double>(N * C, 4);
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward<double>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(out, r);
  };
  loss();
  std::vector<double> dx(N * C), dw(C), db(C);
  ref::layernorm_backward<double>(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C);
  expect_fd_grad(x, dx, loss, "layernorm dx");
  expect_fd_grad(w, dw, loss, "layernorm dw");
  expect_fd_grad(b, db, loss, "layernorm db");
}

TEST(RmsNorm, FastMatchesReferenceAndFiniteDifferences) {
  test::for_each_isa([&] {
  const int N = 29, C = 80;
  auto x = randn(N * C, 5), w = randn(C, 6), dout = randn(N * C, 7);
  std::vector<float> out(N * C), rstd(N), out_r(N * C), rstd_r(N);
  kernels::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  ref::rmsnorm_forward<float>(out_r.data(), rstd_r.data(), x.data(), w.data(), N, C, 1e-6f);
  expect_close(out, out_r, 1e-5, 1e-5, "rmsnorm out");
  std::vector<float> dx(N * C), dw(C), dx_r(N * C), dw_r(C);
  kernels::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  ref::rmsnorm_backward<float>(dx_r.data(), dw_r.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_close(dx, dx_r, 1e-4, 1e-5, "rmsnorm dx");
  expect_close(dw, dw_r, 1e-4, 1e-5, "rmsnorm dw");

  const int n = 3, c = 8;
  auto xd = randn<double>(n * c, 8), wd = randn<double>(c, 9), r = randn<double>(n * c, 10);
  std::vector<double> o(n * c), rs(n);
  auto loss = [&] {
    ref::rmsnorm_forward<double>(o.data(), rs.data(), xd.data(), wd.data(), n, c, 1e-6);
    return dot(o, r);
  };
  loss();
  std::vector<double> gx(n * c), gw(c);
  ref::rmsnorm_backward<double>(gx.data(), gw.data(), r.data(), xd.data(), wd.data(), rs.data(), n, c);
  expect_fd_grad(xd, gx, loss, "rmsnorm dx");
  expect_fd_grad(wd, gw, loss, "rmsnorm dw");
  });
}

TEST(Gelu, FastMatchesReferenceAndFiniteDifferences) {
  test::for_each_isa([&] {
  const int n = 4099;
  auto x = randn(n, 11, 3.0), dout = randn(n, 12);
  // The reference runs in double: in float, 1 - tanh^2 itself loses digits near saturation.
  auto xr = cast<double>(x), doutr = cast<double>(dout);
  std::vector<float> y(n), dx(n);
  std::vector<double> y_r(n), dx_r(n);
  kernels::gelu_forward(y.data(), x.data(), n);
  ref::gelu_forward<double>(y_r.data(), xr.data(), n);
  expect_close(y, y_r, 1e-5, 1e-6, "gelu");
  kernels::gelu_backward(dx.data(), dout.data(), x.data(), n);
  ref::gelu_backward<double>(dx_r.data(), doutr.data(), xr.data(), n);
  expect_close(dx, dx_r, 1e-5, 1e-6, "gelu backward");
  // Saturated inputs (pre-activations beyond +-10 occur in training): exp(2u) overflowed
  // float here once and made dx NaN.
  std::vector<float> xs{-1e4f, -100.f, -20.f, -10.5f, 10.5f, 20.f, 100.f, 1e4f}, ones(xs.size(), 1.f);
  std::vector<float> dxs(xs.size());
  std::vector<double> dxs_r(xs.size()), xs_r = cast<double>(xs), ones_r(xs.size(), 1.0);
  kernels::gelu_backward(dxs.data(), ones.data(), xs.data(), int64_t(xs.size()));
  ref::gelu_backward<double>(dxs_r.data(), ones_r.data(), xs_r.data(), int64_t(xs.size()));
  expect_close(dxs, dxs_r, 1e-5, 1e-6, "gelu backward, saturated");
  auto xd = randn<double>(16, 13, 2.0), r = randn<double>(16, 14);
  std::vector<double> yd(16), gd(16);
  auto loss = [&] {
    ref::gelu_forward<double>(yd.data(), xd.data(), 16);
    return dot(yd, r);
  };
  ref::gelu_backward<double>(gd.data(), r.data(), xd.data(), 16);
  expect_fd_grad(xd, gd, loss, "gelu dx");
  });
}

TEST(SwiGlu, FastMatchesReferenceAndFiniteDifferences) {
  test::for_each_isa([&] {
  const int N = 9, F = 50;
  auto x = randn(N * 2 * F, 15, 2.0), dout = randn(N * F, 16);
  std::vector<float> y(N * F), y_r(N * F), dx(N * 2 * F), dx_r(N * 2 * F);
  kernels::swiglu_forward(y.data(), x.data(), N, F);
  ref::swiglu_forward<float>(y_r.data(), x.data(), N, F);
  expect_close(y, y_r, 1e-5, 1e-6, "swiglu");
  kernels::swiglu_backward(dx.data(), dout.data(), x.data(), N, F);
  ref::swiglu_backward<float>(dx_r.data(), dout.data(), x.data(), N, F);
  expect_close(dx, dx_r, 1e-5, 1e-6, "swiglu backward");
  auto xd = randn<double>(2 * 2 * 5, 17), r = randn<double>(2 * 5, 18);
  std::vector<double> yd(10), gd(20);
  auto loss = [&] {
    ref::swiglu_forward<double>(yd.data(), xd.data(), 2, 5);
    return dot(yd, r);
  };
  ref::swiglu_backward<double>(gd.data(), r.data(), xd.data(), 2, 5);
  expect_fd_grad(xd, gd, loss, "swiglu dx");
  });
}

TEST(GeGlu, FastMatchesReferenceAndFiniteDifferences) {
  test::for_each_isa([&] {
  const int N = 9, F = 50;
  auto x = randn(N * 2 * F, 25, 3.0), dout = randn(N * F, 26);
  // The reference runs in double (as gelu's): in float, 1 - tanh^2 loses its digits near saturation.
  auto xr = cast<double>(x), doutr = cast<double>(dout);
  std::vector<float> y(N * F), dx(N * 2 * F);
  std::vector<double> y_r(N * F), dx_r(N * 2 * F);
  kernels::geglu_forward(y.data(), x.data(), N, F);
  ref::geglu_forward<double>(y_r.data(), xr.data(), N, F);
  expect_close(y, y_r, 1e-5, 1e-5, "geglu");  // the up half multiplies the GELU's absolute error
  kernels::geglu_backward(dx.data(), dout.data(), x.data(), N, F);
  ref::geglu_backward<double>(dx_r.data(), doutr.data(), xr.data(), N, F);
  expect_close(dx, dx_r, 1e-5, 1e-5, "geglu backward");
  auto xd = randn<double>(2 * 2 * 5, 27), r = randn<double>(2 * 5, 28);
  std::vector<double> yd(10), gd(20);
  auto loss = [&] {
    ref::geglu_forward<double>(yd.data(), xd.data(), 2, 5);
    return dot(yd, r);
  };
  ref::geglu_backward<double>(gd.data(), r.data(), xd.data(), 2, 5);
  expect_fd_grad(xd, gd, loss, "geglu dx");
  });
}

TEST(Rope, FastMatchesReferenceAndBackwardIsTranspose) {
  test::for_each_isa([&] {
  const int B = 2, T = 11, NH = 4, KVH = 2, HS = 16;
  const int64_t rs = (NH + 2 * KVH) * HS;
  auto x = randn(B * T * rs, 19);
  std::vector<float> cs(T * HS / 2), sn(T * HS / 2);
  kernels::rope_table(cs.data(), sn.data(), T, HS, 10000.f);
  auto y = x, y_r = x;
  kernels::rope_forward(y.data(), cs.data(), sn.data(), B, T, NH, KVH, HS, rs);
  ref::rope_forward<float>(y_r.data(), B, T, NH, KVH, HS, rs, 10000.0);
  expect_close(y, y_r, 1e-5, 1e-5, "rope");
  // <R x, g> == <x, R^T g>: the backward is the transposed rotation.
  auto g = randn(B * T * rs, 20), gt = g;
  kernels::rope_backward(gt.data(), cs.data(), sn.data(), B, T, NH, KVH, HS, rs);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += double(y[i]) * g[i];
    rhs += double(x[i]) * gt[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-3 * std::abs(lhs) + 1e-3);
  });
}

TEST(Embedding, FastMatchesReference) {
  test::for_each_isa([&] {
  const int N = 40, T = 10, C = 24, V = 7;
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 5) % V;
  auto wte = randn(V * C, 21), wpe = randn(T * C, 22), dout = randn(N * C, 23);
  std::vector<float> y(N * C), y_r(N * C);
  kernels::embedding_forward(y.data(), tok.data(), wte.data(), wpe.data(), N, T, C);
  ref::embedding_forward<float>(y_r.data(), tok.data(), wte.data(), wpe.data(), N, T, C);
  expect_close(y, y_r, 1e-6, 1e-6, "embedding");
  std::vector<float> de(V * C), dp(T * C), de_r(V * C), dp_r(T * C);
  kernels::embedding_backward(de.data(), dp.data(), dout.data(), tok.data(), N, T, C);
  ref::embedding_backward<float>(de_r.data(), dp_r.data(), dout.data(), tok.data(), N, T, C);
  expect_close(de, de_r, 1e-5, 1e-5, "embedding dwte");
  expect_close(dp, dp_r, 1e-5, 1e-5, "embedding dwpe");
  });
}

TEST(Bias, FastMatchesReference) {
  test::for_each_isa([&] {
  for (auto [N, M] : {std::tuple{1, 1}, {37, 96}, {130, 17}}) {
    auto y = randn(size_t(N) * M, 51), b = randn(size_t(M), 52), dy = randn(size_t(N) * M, 53);
    auto y_r = y;
    kernels::bias_forward(y.data(), b.data(), N, M);
    ref::bias_forward<float>(y_r.data(), b.data(), N, M);
    expect_close(y, y_r, 1e-6, 1e-6, "bias forward");
    std::vector<float> db(size_t(M), 0.5f), db_r = db;  // accumulates (+=)
    kernels::bias_backward(db.data(), dy.data(), N, M);
    ref::bias_backward<float>(db_r.data(), dy.data(), N, M);
    expect_close(db, db_r, 1e-5, 1e-5, "bias db");
  }
  });
}

TEST(Add, FastMatchesReferenceAlsoInPlace) {
  test::for_each_isa([&] {
  const int64_t n = 1000;
  auto a = randn(n, 54), b = randn(n, 55);
  std::vector<float> y(n), y_r(n);
  kernels::add(y.data(), a.data(), b.data(), n);
  ref::add<float>(y_r.data(), a.data(), b.data(), n);
  expect_close(y, y_r, 0, 0, "add");
  kernels::add(a.data(), a.data(), b.data(), n);  // the residual stream adds into itself
  expect_close(a, y_r, 0, 0, "add in place");
  });
}

// KV-cache decoding against the naive reference, with grouped-query heads and head sizes on
// and off the vector width; and the reference against the last row of full causal attention.
TEST(Attention, DecodeMatchesReference) {
  test::for_each_isa([&] {
  for (auto [n, NH, KVH, HS, scale, cap] : {std::tuple{1, 2, 2, 8, 0.f, 0.f}, {5, 4, 2, 64, 0.f, 0.f},
                                            {70, 6, 2, 32, 0.f, 0.f}, {129, 2, 1, 12, 0.f, 0.f},
                                            {33, 4, 2, 16, 0.6f, 0.f}, {33, 4, 2, 16, 0.6f, 1.2f}}) {
    kernels::AttnDims d{1, n, NH, KVH, HS, nullptr, scale, cap};
    const int64_t rs = d.row_stride(), os = int64_t(NH) * HS, ks = int64_t(KVH) * HS;
    auto qkv = randn(size_t(n * rs), 56);
    std::vector<float> kc(size_t(n * ks)), vc(size_t(n * ks));
    for (int j = 0; j < n; ++j)
      for (int64_t i = 0; i < ks; ++i) {
        kc[size_t(j * ks + i)] = qkv[size_t(j * rs + os + i)];
        vc[size_t(j * ks + i)] = qkv[size_t(j * rs + os + ks + i)];
      }
    const float* q = qkv.data() + (n - 1) * rs;  // the newest position queries the whole cache
    std::vector<float> out(static_cast<size_t>(os)), out_r(static_cast<size_t>(os));
    kernels::attention_decode(out.data(), q, kc.data(), vc.data(), n, NH, KVH, HS, scale, cap);
    ref::attention_decode<float>(out_r.data(), q, kc.data(), vc.data(), n, NH, KVH, HS, scale, cap);
    expect_close(out, out_r, 1e-4, 1e-5, "attention decode");
    std::vector<float> full(size_t(n * os)), lse(size_t(NH * n));
    ref::attention_forward<float>(full.data(), lse.data(), qkv.data(), d);
    expect_close(out_r, std::vector<float>(full.end() - os, full.end()), 1e-5, 1e-6, "decode = last row");
  }
  });
}

// Flash attention against the T x T reference, including sequence lengths that are not
// multiples of the 64-row tile, grouped-query heads, and head sizes off the fast path.
TEST(Attention, FlashMatchesNaive) {
  test::for_each_isa([&] {
  for (auto d :
       {kernels::AttnDims{2, 5, 2, 2, 8}, kernels::AttnDims{1, 70, 4, 2, 64}, kernels::AttnDims{2, 130, 6, 2, 32},
        kernels::AttnDims{1, 65, 2, 1, 128}, kernels::AttnDims{1, 64, 4, 4, 64},
        kernels::AttnDims{1, 70, 4, 2, 64, nullptr, 0.09f}, kernels::AttnDims{2, 5, 2, 2, 8, nullptr, 0.5f},
        kernels::AttnDims{1, 70, 4, 2, 64, nullptr, 0.f, 1.5f}, kernels::AttnDims{2, 9, 2, 1, 16, nullptr, 0.5f, 2.f}}) {
    const int64_t N = int64_t(d.B) * d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
    auto qkv = randn(N * rs, 24), dout = randn(N * os, 25);
    std::vector<float> out(N * os), lse(d.B * d.NH * d.T), out_r(N * os), lse_r(d.B * d.NH * d.T);
    kernels::attention_forward(out.data(), lse.data(), qkv.data(), d);
    ref::attention_forward<float>(out_r.data(), lse_r.data(), qkv.data(), d);
    expect_close(out, out_r, 1e-4, 1e-5, "attention out");
    expect_close(lse, lse_r, 1e-5, 1e-5, "attention lse");
    std::vector<float> dq(N * rs, 7.f), dq_r(N * rs);
    kernels::attention_backward(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), d);
    ref::attention_backward<float>(dq_r.data(), dout.data(), qkv.data(), d);
    expect_close(dq, dq_r, 1e-3, 1e-4, "attention dqkv");
  }
  });
}

TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  // scale 0: 1 / sqrt(HS); else Gemma's query_pre_attn_scalar^-1/2; softcap: Gemma 2's c tanh(s / c).
  for (auto [scale, softcap] : {std::pair{0.f, 0.f}, {0.7f, 0.f}, {0.7f, 0.8f}}) {
  kernels::AttnDims d{1, 4, 4, 2, 4, nullptr, scale, softcap};
  const int64_t N = d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
  auto qkv = randn<double>(N * rs, 26), r = randn<double>(N * os, 27);
  std::vector<double> out(N * os), lse(d.NH * d.T), g(N * rs);
  auto loss = [&] {
    ref::attention_forward<double>(out.data(), lse.data(), qkv.data(), d);
    return dot(out, r);
  };
  ref::attention_backward<double>(g.data(), r.data(), qkv.data(), d);
  expect_fd_grad(qkv, g, loss, "attention dqkv");
  }
}

// Packed documents: random boundaries (documents from 1 token to several 64-key tiles,
// rows that begin mid-document), GQA, head sizes on and off the fast path, odd T.
TEST(Attention, FlashMatchesNaiveWithDocuments) {
  test::for_each_isa([&] {
  uint64_t seed = 100;
  for (auto d :
       {kernels::AttnDims{2, 5, 2, 2, 8}, kernels::AttnDims{2, 70, 4, 2, 64}, kernels::AttnDims{2, 130, 6, 2, 32},
        kernels::AttnDims{1, 65, 2, 1, 128}, kernels::AttnDims{2, 201, 4, 2, 64}, kernels::AttnDims{2, 131, 4, 1, 128},
        kernels::AttnDims{3, 97, 2, 2, 16}})
    for (int max_len : {3, 20, d.T}) {
      const int64_t N = int64_t(d.B) * d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
      auto pos = test::packed_positions(d.B, d.T, max_len, ++seed);
      std::vector<int32_t> doc(N);
      kernels::attention_doc_start(doc.data(), pos.data(), d.B, d.T);
      d.doc_start = doc.data();
      auto qkv = randn(N * rs, ++seed, 2.0), dout = randn(N * os, ++seed);
      std::vector<float> out(N * os), lse(d.B * d.NH * d.T), out_r(N * os), lse_r(d.B * d.NH * d.T);
      kernels::attention_forward(out.data(), lse.data(), qkv.data(), d);
      ref::attention_forward<float>(out_r.data(), lse_r.data(), qkv.data(), d);
      expect_close(out, out_r, 1e-4, 1e-5, "attention out (documents)");
      expect_close(lse, lse_r, 1e-5, 1e-5, "attention lse (documents)");
      std::vector<float> dq(N * rs, 7.f), dq_r(N * rs);
      kernels::attention_backward(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), d);
      ref::attention_backward<float>(dq_r.data(), dout.data(), qkv.data(), d);
      expect_close(dq, dq_r, 1e-3, 1e-4, "attention dqkv (documents)");
    }
  });
}

// The bf16 kernel (AVX512-BF16 tile products) against the fp32 T x T reference on the same
// bf16-valued q, k, v (the model keeps them in bf16): errors are those of rounding dO, P and
// dS to bf16, so the bound is on the relative L2 error of each output (about 3e-3 measured).
// Plain causal and packed documents, GQA, odd T, head sizes 64 and 128. Every kernel level the
// CPU has: the vdpbf16ps kernel at avx512_bf16, the fp32 kernels below it.
TEST(Attention, Bf16MatchesNaive) {
  test::for_each_isa([&] {
  // Without AVX512-BF16 (or at a lower forced level) the bf16 entry points run the fp32
  // kernels, which must meet the same bound.
  auto rel_l2 = [](const std::vector<float>& a, const std::vector<float>& r) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
      den += double(r[i]) * r[i];
    }
    // A floor for all-zero references (T = 1: one key, so dq = dk = 0 exactly).
    return std::sqrt(num) / (std::sqrt(den) + 1e-3 * std::sqrt(double(a.size())));
  };
  uint64_t seed = 300;
  for (auto d : {kernels::AttnDims{2, 70, 4, 2, 64}, kernels::AttnDims{1, 201, 4, 1, 128},
                 kernels::AttnDims{2, 256, 4, 4, 64}, kernels::AttnDims{1, 1, 2, 2, 64},
                 kernels::AttnDims{2, 70, 4, 2, 64, nullptr, 0.2f}})
    for (bool docs : {false, true}) {
      const int64_t N = int64_t(d.B) * d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
      std::vector<int32_t> doc(N);
      if (docs) {
        auto pos = test::packed_positions(d.B, d.T, 40, ++seed);
        kernels::attention_doc_start(doc.data(), pos.data(), d.B, d.T);
      }
      d.doc_start = docs ? doc.data() : nullptr;
      auto qkv = randn(N * rs, ++seed, 2.0), dout = randn(N * os, ++seed);
      for (float& x : qkv) x = bf16_to_f32(f32_to_bf16(x));
      std::vector<float> out(N * os), lse(d.B * d.NH * d.T), out_r(N * os), lse_r(d.B * d.NH * d.T);
      kernels::attention_forward_bf16(out.data(), lse.data(), qkv.data(), d);
      ref::attention_forward<float>(out_r.data(), lse_r.data(), qkv.data(), d);
      EXPECT_LT(rel_l2(out, out_r), 1e-2) << "bf16 attention out, T " << d.T << " HS " << d.HS;
      expect_close(lse, lse_r, 1e-2, 2e-2, "bf16 attention lse");
      std::vector<float> dq(N * rs, 7.f), dq_r(N * rs);
      kernels::attention_backward_bf16(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), d);
      ref::attention_backward<float>(dq_r.data(), dout.data(), qkv.data(), d);
      for (int part = 0; part < 3; ++part) {  // q, k, v gradients separately (different scales)
        const int64_t c0 = part == 0 ? 0 : part == 1 ? os : os + int64_t(d.KVH) * d.HS;
        const int64_t c1 = part == 0 ? os : part == 1 ? os + int64_t(d.KVH) * d.HS : rs;
        std::vector<float> a, r;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = c0; c < c1; ++c) {
            a.push_back(dq[n * rs + c]);
            r.push_back(dq_r[n * rs + c]);
          }
        EXPECT_LT(rel_l2(a, r), 2e-2) << "bf16 attention d"
                                      << "qkv"[part] << ", T " << d.T << " HS " << d.HS << (docs ? " (documents)" : "");
      }
    }
  });
}

TEST(Attention, DocStartFromPositions) {
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1, 0, /* row 1 starts mid-document */ 5, 6, 7, 0, 1, 2};
  std::vector<int32_t> doc(12);
  kernels::attention_doc_start(doc.data(), pos.data(), 2, 6);
  EXPECT_EQ(doc, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 0, 0, 0, 3, 3, 3}));
}

// Mistral's sliding window is one more lower bound on each query's keys (t - W + 1), alone
// or combined with packed documents; the flash kernels skip and mask by it like doc_start.
TEST(Attention, FlashMatchesNaiveWithSlidingWindow) {
  test::for_each_isa([&] {
  uint64_t seed = 300;
  for (auto d : {kernels::AttnDims{2, 9, 2, 2, 8}, kernels::AttnDims{2, 150, 4, 2, 64},
                 kernels::AttnDims{1, 200, 2, 1, 128}, kernels::AttnDims{2, 97, 2, 2, 16}})
    for (int W : {1, 4, 63, 64, 65, 100})
      for (bool docs : {false, true}) {
        const int64_t N = int64_t(d.B) * d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
        std::vector<int32_t> doc(N, 0);
        if (docs) {
          auto pos = test::packed_positions(d.B, d.T, 40, ++seed);
          kernels::attention_doc_start(doc.data(), pos.data(), d.B, d.T);
        }
        std::vector<int32_t> expect(doc);
        for (int64_t r = 0; r < N; ++r) expect[r] = std::max<int32_t>(doc[r], int32_t(r % d.T) - W + 1);
        kernels::attention_window_start(doc.data(), d.B, d.T, W);
        ASSERT_EQ(doc, expect);
        d.doc_start = doc.data();
        auto qkv = randn(N * rs, ++seed, 2.0), dout = randn(N * os, ++seed);
        std::vector<float> out(N * os), lse(d.B * d.NH * d.T), out_r(N * os), lse_r(d.B * d.NH * d.T);
        kernels::attention_forward(out.data(), lse.data(), qkv.data(), d);
        ref::attention_forward<float>(out_r.data(), lse_r.data(), qkv.data(), d);
        expect_close(out, out_r, 1e-4, 1e-5, "attention out (window)");
        expect_close(lse, lse_r, 1e-5, 1e-5, "attention lse (window)");
        std::vector<float> dq(N * rs, 7.f), dq_r(N * rs);
        kernels::attention_backward(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), d);
        ref::attention_backward<float>(dq_r.data(), dout.data(), qkv.data(), d);
        expect_close(dq, dq_r, 1e-3, 1e-4, "attention dqkv (window)");
      }
  });
}

TEST(Attention, ReferenceBackwardWithDocumentsMatchesFiniteDifferences) {
  kernels::AttnDims d{2, 7, 4, 2, 4};
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1, 0, 1, 3, 4, 0, 1, 2, 3, 0};
  std::vector<int32_t> doc(pos.size());
  kernels::attention_doc_start(doc.data(), pos.data(), d.B, d.T);
  d.doc_start = doc.data();
  const int64_t N = int64_t(d.B) * d.T, rs = d.row_stride(), os = int64_t(d.NH) * d.HS;
  auto qkv = randn<double>(N * rs, 40), r = randn<double>(N * os, 41);
  std::vector<double> out(N * os), lse(d.B * d.NH * d.T), g(N * rs);
  auto loss = [&] {
    ref::attention_forward<double>(out.data(), lse.data(), qkv.data(), d);
    return dot(out, r);
  };
  ref::attention_backward<double>(g.data(), r.data(), qkv.data(), d);
  expect_fd_grad(qkv, g, loss, "attention dqkv (documents)");
}

// A packed row gives each document exactly what that document gives alone: outputs,
// log-sum-exps and gradients (including tiles that start inside a document).
TEST(Attention, DocumentsEqualSeparateSequences) {
  test::for_each_isa([&] {
  for (int HS : {64, 24}) {
    const int T = 150, NH = 4, KVH = 2;
    const std::vector<int> lens = {40, 1, 77, 32};
    kernels::AttnDims d{1, T, NH, KVH, HS};
    const int64_t rs = d.row_stride(), os = int64_t(NH) * HS;
    std::vector<int32_t> pos, doc(T);
    for (int n : lens)
      for (int i = 0; i < n; ++i) pos.push_back(i);
    kernels::attention_doc_start(doc.data(), pos.data(), 1, T);
    d.doc_start = doc.data();
    auto qkv = randn(T * rs, 42 + HS), dout = randn(T * os, 43 + HS);
    std::vector<float> out(T * os), lse(NH * T), dq(T * rs);
    kernels::attention_forward(out.data(), lse.data(), qkv.data(), d);
    kernels::attention_backward(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), d);
    int s0 = 0;
    for (int n : lens) {
      kernels::AttnDims e{1, n, NH, KVH, HS};
      std::vector<float> q1(qkv.begin() + s0 * rs, qkv.begin() + (s0 + n) * rs);
      std::vector<float> do1(dout.begin() + s0 * os, dout.begin() + (s0 + n) * os);
      std::vector<float> o1(n * os), l1(NH * n), dq1(n * rs);
      kernels::attention_forward(o1.data(), l1.data(), q1.data(), e);
      kernels::attention_backward(dq1.data(), do1.data(), q1.data(), o1.data(), l1.data(), e);
      expect_close(std::vector<float>(out.begin() + s0 * os, out.begin() + (s0 + n) * os), o1, 1e-5, 1e-6,
                   "document out");
      expect_close(std::vector<float>(dq.begin() + s0 * rs, dq.begin() + (s0 + n) * rs), dq1, 1e-4, 1e-6,
                   "document dqkv");
      for (int h = 0; h < NH; ++h)
        expect_close(std::vector<float>(lse.begin() + h * T + s0, lse.begin() + h * T + s0 + n),
                     std::vector<float>(l1.begin() + h * n, l1.begin() + (h + 1) * n), 1e-6, 1e-6, "document lse");
      s0 += n;
    }
  }
  });
}

// Position ids for RoPE and the learned position embedding: ids past T (a row that
// starts mid-document) read further rows of the tables.
TEST(Rope, PositionsMatchReference) {
  test::for_each_isa([&] {
  const int B = 3, T = 13, NH = 4, KVH = 2, HS = 16;
  const int64_t rs = (NH + 2 * KVH) * HS;
  auto pos = test::packed_positions(B, T, 5, 50, 30);
  const int rows = 1 + *std::max_element(pos.begin(), pos.end());
  ASSERT_GT(rows, T);
  auto x = randn(B * T * rs, 51);
  std::vector<float> cs(rows * HS / 2), sn(rows * HS / 2);
  kernels::rope_table(cs.data(), sn.data(), rows, HS, 10000.f);
  auto y = x, y_r = x;
  kernels::rope_forward(y.data(), cs.data(), sn.data(), B, T, NH, KVH, HS, rs, pos.data());
  ref::rope_forward<float>(y_r.data(), B, T, NH, KVH, HS, rs, 10000.0, 1.0, pos.data());
  expect_close(y, y_r, 1e-5, 2e-5, "rope (positions)");
  auto g = randn(B * T * rs, 52), gt = g, gt_r = g;
  kernels::rope_backward(gt.data(), cs.data(), sn.data(), B, T, NH, KVH, HS, rs, pos.data());
  ref::rope_forward<float>(gt_r.data(), B, T, NH, KVH, HS, rs, 10000.0, -1.0, pos.data());
  expect_close(gt, gt_r, 1e-5, 2e-5, "rope backward (positions)");
  });
}

TEST(Embedding, PositionsMatchReference) {
  test::for_each_isa([&] {
  const int B = 4, T = 10, C = 24, V = 7, P = 48;
  const int N = B * T;
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 5) % V;
  auto pos = test::packed_positions(B, T, 4, 53, P - T);
  auto wte = randn(V * C, 54), wpe = randn(P * C, 55), dout = randn(N * C, 56);
  std::vector<float> y(N * C), y_r(N * C);
  kernels::embedding_forward(y.data(), tok.data(), wte.data(), wpe.data(), N, T, C, pos.data());
  ref::embedding_forward<float>(y_r.data(), tok.data(), wte.data(), wpe.data(), N, T, C, pos.data());
  expect_close(y, y_r, 1e-6, 1e-6, "embedding (positions)");
  std::vector<float> de(V * C), dp(P * C, 0.5f), de_r(V * C), dp_r(P * C, 0.5f);
  kernels::embedding_backward(de.data(), dp.data(), dout.data(), tok.data(), N, T, C, pos.data());
  ref::embedding_backward<float>(de_r.data(), dp_r.data(), dout.data(), tok.data(), N, T, C, pos.data());
  expect_close(de, de_r, 1e-5, 1e-5, "embedding dwte (positions)");
  expect_close(dp, dp_r, 1e-5, 1e-5, "embedding dwpe (positions)");
  });
}

TEST(LmHeadCrossEntropy, FusedMatchesReferenceAcrossChunks) {
  test::for_each_isa([&] {
  const int N = 45, C = 24, V = 301;
  auto x = randn(N * C, 28), w = randn(V * C, 29, 0.3);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 37) % V;
  tgt[3] = kernels::kIgnoreIndex;
  std::vector<float> dx_r(N * C), dw_r(V * C, 0.1f);
  double loss_r = ref::lmhead_ce<float>(dx_r.data(), dw_r.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.02f);
  for (int64_t chunk : {int64_t(1), int64_t(8), int64_t(45)}) {
    std::vector<float> dx(N * C), dw(V * C, 0.1f), scratch(chunk * V);
    int64_t count = 0;
    double loss = kernels::lmhead_ce(dx.data(), dw.data(), x.data(), w.data(), tgt.data(), {N, C, V, chunk}, 0.02f,
                                     scratch.data(), &count);
    EXPECT_EQ(count, N - 1);
    EXPECT_NEAR(loss, loss_r, 1e-5 * std::abs(loss_r));
    expect_close(dx, dx_r, 1e-4, 1e-6, "lm head dx");
    expect_close(dw, dw_r, 1e-4, 1e-6, "lm head dw");
  }
  });
}

TEST(LmHeadCrossEntropy, ReferenceBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 4, V = 6;
  for (double cap : {0.0, 1.5}) {  // Gemma 2's final_logit_softcapping too
    auto x = randn<double>(N * C, 30), w = randn<double>(V * C, 31);
    std::vector<int32_t> tgt = {1, 5, 0};
    std::vector<double> dx(N * C), dw(V * C);
    auto loss = [&] {
      return ref::lmhead_ce<double>(nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 1.0, cap);
    };
    ref::lmhead_ce<double>(dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V, 1.0, cap);
    expect_fd_grad(x, dx, loss, "ce dx");
    expect_fd_grad(w, dw, loss, "ce dw");
  }
}

// Soft-capped logits (Gemma 2): the fused kernel against the reference, across chunks.
TEST(LmHeadCrossEntropy, SoftcapMatchesReference) {
  test::for_each_isa([&] {
  const int N = 20, C = 24, V = 101;
  auto x = randn(N * C, 32), w = randn(V * C, 33, 0.6);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 37) % V;
  std::vector<float> dx_r(N * C), dw_r(V * C, 0.1f);
  double loss_r = ref::lmhead_ce<float>(dx_r.data(), dw_r.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.05f, 2.f);
  for (int64_t chunk : {int64_t(7), int64_t(20)}) {
    std::vector<float> dx(N * C), dw(V * C, 0.1f), scratch(chunk * V);
    kernels::LmHeadDims d{N, C, V, chunk, 2.f};
    double loss = kernels::lmhead_ce(dx.data(), dw.data(), x.data(), w.data(), tgt.data(), d, 0.05f, scratch.data(),
                                     nullptr);
    EXPECT_NEAR(loss, loss_r, 1e-5 * std::abs(loss_r));
    expect_close(dx, dx_r, 1e-4, 1e-6, "softcapped lm head dx");
    expect_close(dw, dw_r, 1e-4, 1e-6, "softcapped lm head dw");
  }
  });
}

TEST(AdamW, MatchesScalarFormulaAndDecaysOnlyMarkedRanges) {
  const int n = 10;
  auto p = randn(n, 32), g = randn(n, 33);
  auto p0 = p;
  optim::OptimizerConfig cfg;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;
  auto opt = optim::make_optimizer("adamw", cfg, n);
  EXPECT_EQ(opt->name(), "adamw_torch");
  EXPECT_EQ(opt->state_bytes_per_param(), 8);
  EXPECT_EQ(opt->slot_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  const std::vector<optim::ParamRange> ranges = {{0, 6, true}, {6, 4, false}};
  std::vector<double> m(n, 0), v(n, 0), pd(p0.begin(), p0.end());
  for (int t = 1; t <= 3; ++t) {
    opt->step(optim::flat_pieces(p.data(), g.data(), ranges), 1e-2);
    for (int i = 0; i < n; ++i) {
      if (i < 6) pd[i] *= 1 - 1e-2 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * double(g[i]) * g[i];
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.95, t));
      pd[i] -= 1e-2 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  expect_close(p, pd, 1e-5, 1e-6, "adamw");
  EXPECT_EQ(opt->steps(), 3);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(opt->slot("exp_avg")[i], m[i], 1e-6);
  EXPECT_THROW(optim::make_optimizer("adafactr", cfg, n), Error);
}

TEST(Clipping, ScalesToMaxNormLikePyTorch) {
  std::vector<float> g = {3.f, 4.f};
  double n = optim::grad_norm(g.data(), 2);
  EXPECT_DOUBLE_EQ(n, 5.0);
  optim::clip_grads(g.data(), 2, n, 1.0);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], 0.8f, 1e-6);
  optim::clip_grads(g.data(), 2, 1.0, 2.0);  // below the threshold: untouched
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
}

TEST(Schedule, HuggingFaceFormulas) {
  optim::Schedule s;
  s.base_lr = 1.0f;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.kind = optim::ScheduleKind::linear;
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.f);
  EXPECT_FLOAT_EQ(s.lr_at(5), 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(10), 1.f);
  EXPECT_FLOAT_EQ(s.lr_at(60), 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(110), 0.f);
  s.kind = optim::ScheduleKind::cosine;
  EXPECT_FLOAT_EQ(s.lr_at(60), 0.5f);
  EXPECT_NEAR(s.lr_at(35), 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-6);
  s.kind = optim::ScheduleKind::constant_with_warmup;
  EXPECT_FLOAT_EQ(s.lr_at(5), 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(100), 1.f);
  s.kind = optim::ScheduleKind::constant;
  EXPECT_FLOAT_EQ(s.lr_at(0), 1.f);
}

}  // namespace zt
