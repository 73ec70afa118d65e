// test_cuda_ops.cpp: each GPU kernel of ops_cuda.h, gemm_cuda.h and cross_entropy_cuda.h against
// the naive reference of kernels/reference.h run in double on the host. fp32 kernels must agree
// to fp32 rounding (relative error < 1e-5 over the tensor); bf16 GEMMs to the error of bf16
// operands measured against the reference on the same bf16-rounded inputs (< 1e-3: only the
// accumulation order differs). Every output is poisoned with NaN first.
#include <algorithm>

#include "cuda_test_util.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/reference.h"

namespace zt {
namespace {

namespace kc = kernels::cuda;
using test::from_gpu;
using test::randn;
using test::rel_error;
using test::to_gpu;

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(CudaOps, LayerNormForwardBackward) {
  ZT_REQUIRE_GPU();
  for (int C : {7, 64, 768, 1027}) {
    SCOPED_TRACE(C);
    const int64_t N = 37;
    auto x = randn(N * C, 1, 2.0), w = randn(C, 2), b = randn(C, 3), dout = randn(N * C, 4);
    auto dx0 = randn(N * C, 5), dw0 = randn(C, 6), db0 = randn(C, 7);  // += targets start non-zero
    std::vector<double> out(N * C), mean(N), rstd(N);
    auto xd = as_double(x), wd = as_double(w);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), xd.data(), wd.data(), as_double(b).data(), N, C, 1e-5);
    auto dxd = as_double(dx0), dwd = as_double(dw0), dbd = as_double(db0);
    ref::layernorm_backward(dxd.data(), dwd.data(), dbd.data(), as_double(dout).data(), xd.data(), wd.data(),
                            mean.data(), rstd.data(), N, C);
    auto gx = to_gpu(x), gw = to_gpu(w), gb = to_gpu(b), gdout = to_gpu(dout);
    auto gout = test::gpu_poisoned(N * C), gmean = test::gpu_poisoned(N), grstd = test::gpu_poisoned(N);
    kc::layernorm_forward(gout.as<float>(), gmean.as<float>(), grstd.as<float>(), gx.as<float>(), gw.as<float>(),
                          gb.as<float>(), N, C, 1e-5f);
    EXPECT_LT(rel_error(from_gpu(gout, N * C), out), 1e-5);
    EXPECT_LT(rel_error(from_gpu(grstd, N), rstd), 1e-5);
    auto gdx = to_gpu(dx0), gdw = to_gpu(dw0), gdb = to_gpu(db0);
    kc::layernorm_backward(gdx.as<float>(), gdw.as<float>(), gdb.as<float>(), gdout.as<float>(), gx.as<float>(),
                           gw.as<float>(), gmean.as<float>(), grstd.as<float>(), N, C);
    EXPECT_LT(rel_error(from_gpu(gdx, N * C), dxd), 1e-5);
    EXPECT_LT(rel_error(from_gpu(gdw, C), dwd), 1e-5);
    EXPECT_LT(rel_error(from_gpu(gdb, C), dbd), 1e-5);
  }
}

TEST(CudaOps, RmsNormForwardBackward) {
  ZT_REQUIRE_GPU();
  for (int C : {5, 256, 2049}) {
    SCOPED_TRACE(C);
    const int64_t N = 300;
    auto x = randn(N * C, 11), w = randn(C, 12), dout = randn(N * C, 13), dx0 = randn(N * C, 14), dw0 = randn(C, 15);
    std::vector<double> out(N * C), rstd(N);
    auto xd = as_double(x), wd = as_double(w);
    ref::rmsnorm_forward(out.data(), rstd.data(), xd.data(), wd.data(), N, C, 1e-6);
    auto dxd = as_double(dx0), dwd = as_double(dw0);
    ref::rmsnorm_backward(dxd.data(), dwd.data(), as_double(dout).data(), xd.data(), wd.data(), rstd.data(), N, C);
    auto gx = to_gpu(x), gw = to_gpu(w), gdout = to_gpu(dout);
    auto gout = test::gpu_poisoned(N * C), grstd = test::gpu_poisoned(N);
    kc::rmsnorm_forward(gout.as<float>(), grstd.as<float>(), gx.as<float>(), gw.as<float>(), N, C, 1e-6f);
    EXPECT_LT(rel_error(from_gpu(gout, N * C), out), 1e-5);
    auto gdx = to_gpu(dx0), gdw = to_gpu(dw0);
    kc::rmsnorm_backward(gdx.as<float>(), gdw.as<float>(), gdout.as<float>(), gx.as<float>(), gw.as<float>(),
                         grstd.as<float>(), N, C);
    EXPECT_LT(rel_error(from_gpu(gdx, N * C), dxd), 1e-5);
    EXPECT_LT(rel_error(from_gpu(gdw, C), dwd), 1e-5);
  }
}

// Gemma's (1 + w) RMSNorm: the kernels' w_offset against the reference on 1 + w (dw is the
// gradient of the multiplier, the same as w's).
TEST(CudaOps, RmsNormUnitOffset) {
  ZT_REQUIRE_GPU();
  const int64_t N = 70;
  const int C = 300;
  auto x = randn(N * C, 41), w = randn(C, 42, 0.1), dout = randn(N * C, 43), dx0 = randn(N * C, 44), dw0 = randn(C, 45);
  std::vector<double> out(N * C), rstd(N), w1(C);
  for (int c = 0; c < C; ++c) w1[c] = double(1.0f + w[c]);
  auto xd = as_double(x);
  ref::rmsnorm_forward(out.data(), rstd.data(), xd.data(), w1.data(), N, C, 1e-6);
  auto dxd = as_double(dx0), dwd = as_double(dw0);
  ref::rmsnorm_backward(dxd.data(), dwd.data(), as_double(dout).data(), xd.data(), w1.data(), rstd.data(), N, C);
  auto gx = to_gpu(x), gw = to_gpu(w), gdout = to_gpu(dout);
  auto gout = test::gpu_poisoned(N * C), grstd = test::gpu_poisoned(N);
  kc::rmsnorm_forward(gout.as<float>(), grstd.as<float>(), gx.as<float>(), gw.as<float>(), N, C, 1e-6f, 1.0f);
  EXPECT_LT(rel_error(from_gpu(gout, N * C), out), 1e-5);
  auto gdx = to_gpu(dx0), gdw = to_gpu(dw0);
  kc::rmsnorm_backward(gdx.as<float>(), gdw.as<float>(), gdout.as<float>(), gx.as<float>(), gw.as<float>(),
                       grstd.as<float>(), N, C, 1.0f);
  EXPECT_LT(rel_error(from_gpu(gdx, N * C), dxd), 1e-5);
  EXPECT_LT(rel_error(from_gpu(gdw, C), dwd), 1e-5);
}

// GeGLU (Gemma's MLP) and the in-place scale (its embedding multiplier) against the references.
TEST(CudaOps, GegluAndScale) {
  ZT_REQUIRE_GPU();
  const int64_t N = 65, F = 301;
  auto x2 = randn(N * 2 * F, 51, 3.0), dout = randn(N * F, 52);
  std::vector<double> out(N * F), dx(N * 2 * F);
  auto x2d = as_double(x2);
  ref::geglu_forward(out.data(), x2d.data(), N, F);
  ref::geglu_backward(dx.data(), as_double(dout).data(), x2d.data(), N, F);
  auto gx2 = to_gpu(x2), gd = to_gpu(dout), gout = test::gpu_poisoned(N * F), gdx = test::gpu_poisoned(N * 2 * F);
  kc::geglu_forward(gout.as<float>(), gx2.as<float>(), N, F);
  kc::geglu_backward(gdx.as<float>(), gd.as<float>(), gx2.as<float>(), N, F);
  EXPECT_LT(rel_error(from_gpu(gout, N * F), out), 1e-5);
  EXPECT_LT(rel_error(from_gpu(gdx, N * 2 * F), dx), 1e-5);
  const float m = 27.712812921102035f;  // sqrt(768) as a float, Gemma's multiplier
  std::vector<float> want(dout.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = dout[i] * m;
  kc::scale(gd.as<float>(), int64_t(dout.size()), m);
  EXPECT_EQ(from_gpu(gd, dout.size()), want);
}

TEST(CudaOps, ElementwiseActivations) {
  ZT_REQUIRE_GPU();
  const int64_t N = 129, F = 333, n = N * F;
  auto x = randn(n, 21, 3.0), dout = randn(n, 22), x2 = randn(N * 2 * F, 23, 3.0);
  std::vector<double> out(n), dx(n), sw(n), dsw(N * 2 * F);
  auto xd = as_double(x), dd = as_double(dout), x2d = as_double(x2);
  ref::gelu_forward(out.data(), xd.data(), n);
  ref::gelu_backward(dx.data(), dd.data(), xd.data(), n);
  ref::swiglu_forward(sw.data(), x2d.data(), N, F);
  ref::swiglu_backward(dsw.data(), dd.data(), x2d.data(), N, F);
  auto gx = to_gpu(x), gd = to_gpu(dout), gx2 = to_gpu(x2);
  auto gout = test::gpu_poisoned(n), gdx = test::gpu_poisoned(n), gsw = test::gpu_poisoned(n);
  auto gdsw = test::gpu_poisoned(N * 2 * F);
  kc::gelu_forward(gout.as<float>(), gx.as<float>(), n);
  kc::gelu_backward(gdx.as<float>(), gd.as<float>(), gx.as<float>(), n);
  kc::swiglu_forward(gsw.as<float>(), gx2.as<float>(), N, F);
  kc::swiglu_backward(gdsw.as<float>(), gd.as<float>(), gx2.as<float>(), N, F);
  EXPECT_LT(rel_error(from_gpu(gout, n), out), 1e-5);
  EXPECT_LT(rel_error(from_gpu(gdx, n), dx), 1e-5);
  EXPECT_LT(rel_error(from_gpu(gsw, n), sw), 1e-5);
  EXPECT_LT(rel_error(from_gpu(gdsw, N * 2 * F), dsw), 1e-5);
}

TEST(CudaOps, BiasAddAndConversions) {
  ZT_REQUIRE_GPU();
  const int64_t N = 1000, M = 77, n = N * M;
  auto y = randn(n, 31), b = randn(M, 32), a = randn(n, 33), db0 = randn(M, 34);
  auto yd = as_double(y), dbd = as_double(db0), sum(yd);
  ref::bias_forward(yd.data(), as_double(b).data(), N, int(M));
  ref::bias_backward(dbd.data(), as_double(a).data(), N, int(M));
  ref::add(sum.data(), as_double(y).data(), as_double(a).data(), n);
  auto gy = to_gpu(y), gb = to_gpu(b), ga = to_gpu(a), gdb = to_gpu(db0), gsum = test::gpu_poisoned(n);
  kc::add(gsum.as<float>(), gy.as<float>(), ga.as<float>(), n);
  kc::bias_forward(gy.as<float>(), gb.as<float>(), N, int(M));
  kc::bias_backward(gdb.as<float>(), ga.as<float>(), N, int(M));
  EXPECT_LT(rel_error(from_gpu(gy, n), yd), 1e-6);
  EXPECT_LT(rel_error(from_gpu(gdb, M), dbd), 1e-5);
  EXPECT_EQ(from_gpu(gsum, n), std::vector<float>(sum.begin(), sum.end()));
  // Round-to-nearest-even against core/tensor.h's scalar conversion, NaN and infinities included.
  auto v = randn(4096, 35, 100.0);
  v[0] = NAN;
  v[1] = INFINITY;
  v[2] = -0.0f;
  v[3] = 3.0e38f;
  DeviceBuffer g16(v.size() * 2, "bf16");
  auto gv = to_gpu(v), back = test::gpu_poisoned(v.size());
  kc::to_bf16(g16.as<uint16_t>(), gv.as<float>(), int64_t(v.size()));
  kc::from_bf16(back.as<float>(), g16.as<uint16_t>(), int64_t(v.size()));
  auto h16 = from_gpu<uint16_t>(g16, v.size());
  auto hb = from_gpu(back, v.size());
  EXPECT_TRUE(std::isnan(hb[0]));
  for (size_t i = 1; i < v.size(); ++i) {
    ASSERT_EQ(h16[i], f32_to_bf16(v[i])) << "at " << i << " value " << v[i];
    ASSERT_EQ(hb[i], bf16_to_f32(h16[i]));
  }
}

TEST(CudaOps, RopeWithAndWithoutPositions) {
  ZT_REQUIRE_GPU();
  const int B = 2, T = 19, NH = 4, KVH = 2, HS = 16, half = HS / 2;
  const int64_t rs = int64_t(NH + 2 * KVH) * HS;
  const double theta = 10000.0;
  std::vector<float> cos_t(T * half), sin_t(T * half);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double ang = t / std::pow(theta, 2.0 * i / HS);
      cos_t[t * half + i] = float(std::cos(ang));
      sin_t[t * half + i] = float(std::sin(ang));
    }
  std::vector<int32_t> pos(B * T);
  for (int i = 0; i < B * T; ++i) pos[i] = (i % T) % 7;  // documents restarting every 7 tokens
  for (const int32_t* p : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(pos.data())}) {
    auto qkv = randn(B * T * rs, 41);
    auto want = as_double(qkv);
    ref::rope_forward(want.data(), B, T, NH, KVH, HS, rs, theta, 1.0, p);
    auto g = to_gpu(qkv), gc = to_gpu(cos_t), gs = to_gpu(sin_t), gp = to_gpu(pos);
    kc::rope_forward(g.as<float>(), gc.as<float>(), gs.as<float>(), B, T, NH, KVH, HS, rs,
                     p ? gp.as<int32_t>() : nullptr);
    EXPECT_LT(rel_error(from_gpu(g, qkv.size()), want), 1e-6);
    kc::rope_backward(g.as<float>(), gc.as<float>(), gs.as<float>(), B, T, NH, KVH, HS, rs,
                      p ? gp.as<int32_t>() : nullptr);
    EXPECT_LT(rel_error(from_gpu(g, qkv.size()), qkv), 1e-6);  // the inverse rotation restores the input
  }
}

TEST(CudaOps, EmbeddingForwardBackward) {
  ZT_REQUIRE_GPU();
  const int64_t N = 200;
  const int T = 50, C = 48, V = 31;
  std::vector<int32_t> tok(N), pos(N);
  Rng r(51);
  for (int64_t i = 0; i < N; ++i) {
    tok[i] = int32_t(r.next_u64() % V);
    pos[i] = int32_t(i % T) / 2;
  }
  auto wte = randn(V * C, 52), wpe = randn(T * C, 53), dout = randn(N * C, 54);
  auto dwte0 = randn(V * C, 55), dwpe0 = randn(T * C, 56);
  for (const int32_t* p : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(pos.data())}) {
    std::vector<double> out(N * C);
    auto dwted = as_double(dwte0), dwped = as_double(dwpe0);
    ref::embedding_forward(out.data(), tok.data(), as_double(wte).data(), as_double(wpe).data(), N, T, C, p);
    ref::embedding_backward(dwted.data(), dwped.data(), as_double(dout).data(), tok.data(), N, T, C, p);
    auto gtok = to_gpu(tok), gpos = to_gpu(pos), gwte = to_gpu(wte), gwpe = to_gpu(wpe), gd = to_gpu(dout);
    auto gout = test::gpu_poisoned(N * C), gdwte = to_gpu(dwte0), gdwpe = to_gpu(dwpe0);
    const int32_t* gp = p ? gpos.as<int32_t>() : nullptr;
    kc::embedding_forward(gout.as<float>(), gtok.as<int32_t>(), gwte.as<float>(), gwpe.as<float>(), N, T, C, gp);
    kc::embedding_backward(gdwte.as<float>(), gdwpe.as<float>(), gd.as<float>(), gtok.as<int32_t>(), N, T, C, gp);
    EXPECT_LT(rel_error(from_gpu(gout, N * C), out), 1e-7);
    EXPECT_LT(rel_error(from_gpu(gdwte, V * C), dwted), 1e-6);
    EXPECT_LT(rel_error(from_gpu(gdwpe, T * C), dwped), 1e-6);
  }
}

TEST(CudaOps, AdamWMatchesTheCpuArithmetic) {
  ZT_REQUIRE_GPU();
  // Three pieces of one flat buffer, one without decay, state offsets as the optimizer lays them.
  const int64_t sizes[3] = {1000, 17, 4099}, total = 1000 + 17 + 4099;
  auto p0 = randn(total, 61), g = randn(total, 62, 0.1), m0 = randn(total, 63, 0.01), v0 = randn(total, 64, 0.01);
  for (auto& x : v0) x = x * x;
  const kc::AdamWHyper h{3e-4, 0.9, 0.999, 1e-8, 0.1, 7};
  auto p = p0, m = m0, v = v0;
  {  // optim/adamw.cpp's loop, in float, as the reference of the same arithmetic
    const double bc1 = 1.0 - std::pow(h.beta1, 7.0), bc2 = 1.0 - std::pow(h.beta2, 7.0);
    const float step_size = float(h.lr / bc1), bc2_sqrt = float(std::sqrt(bc2));
    int64_t off = 0;
    for (int piece = 0; piece < 3; ++piece) {
      const float decay = piece != 1 ? float(1.0 - h.lr * h.weight_decay) : 1.0f;
      for (int64_t i = off; i < off + sizes[piece]; ++i) {
        const float pi = p[i] * decay;
        const float mi = m[i] * float(h.beta1) + g[i] * float(1.0 - h.beta1);
        const float vi = v[i] * float(h.beta2) + g[i] * g[i] * float(1.0 - h.beta2);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + float(h.eps));
      }
      off += sizes[piece];
    }
  }
  auto gp = to_gpu(p0), gg = to_gpu(g), gm = to_gpu(m0), gv = to_gpu(v0);
  std::vector<kc::AdamWPiece> pieces;
  int64_t off = 0;
  for (int piece = 0; piece < 3; ++piece) {
    pieces.push_back({gp.as<float>() + off, gg.as<float>() + off, off, sizes[piece], piece != 1});
    off += sizes[piece];
  }
  kc::adamw_step(pieces.data(), 3, gm.as<float>(), gv.as<float>(), h);
  EXPECT_LT(rel_error(from_gpu(gp, total), p), 1e-6);
  EXPECT_LT(rel_error(from_gpu(gm, total), m), 1e-6);
  EXPECT_LT(rel_error(from_gpu(gv, total), v), 1e-6);
}

// Row-major products in every transpose combination, fp32 and bf16, odd shapes, beta 0 and 1.
TEST(CudaGemm, MatchesTheReferenceInEveryLayout) {
  ZT_REQUIRE_GPU();
  const int64_t m = 67, n = 45, k = 129;
  for (DType t : {DType::f32, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(testing::Message()
                       << "bf16 " << (t == DType::bf16) << " ta " << ta << " tb " << tb << " beta " << beta);
          auto a = randn(m * k, 71), b = randn(k * n, 72), c0 = randn(m * n, 73);
          if (t == DType::bf16) {
            a = test::bf16_round(a);
            b = test::bf16_round(b);
          }
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          auto cd = as_double(c0);
          kernels::gemm_ref<double>(ta, tb, m, n, k, 1.0, as_double(a).data(), lda, as_double(b).data(), ldb, beta,
                                    cd.data(), n);
          auto ga = to_gpu(a), gb = to_gpu(b), gc = to_gpu(c0);
          DeviceBuffer a16(a.size() * 2, "a"), b16(b.size() * 2, "b");
          const void* pa = ga.data();
          const void* pb = gb.data();
          if (t == DType::bf16) {
            kc::to_bf16(a16.as<uint16_t>(), ga.as<float>(), int64_t(a.size()));
            kc::to_bf16(b16.as<uint16_t>(), gb.as<float>(), int64_t(b.size()));
            pa = a16.data();
            pb = b16.data();
          }
          kc::gemm(t, ta, tb, m, n, k, 1.0f, pa, lda, pb, ldb, beta, gc.data(), n);
          EXPECT_LT(rel_error(from_gpu(gc, m * n), cd), t == DType::f32 ? 1e-6 : 1e-5);
        }
}

// The fused LM head against ref::lmhead_ce in double: loss, dx, dw, ignored targets, chunks that
// do not divide N, fp32 and bf16 compute, with and without Gemma 2's final soft-cap.
TEST(CudaLmHead, MatchesTheReference) {
  ZT_REQUIRE_GPU();
  const int64_t N = 45;
  const int C = 32, V = 301;
  auto x = randn(N * C, 81), w = randn(V * C, 82, 0.3), dw0 = randn(V * C, 83);
  std::vector<int32_t> tgt(N);
  Rng r(84);
  for (int64_t i = 0; i < N; ++i) tgt[i] = i % 9 == 4 ? kernels::kIgnoreIndex : int32_t(r.next_u64() % V);
  // Gemma 2's final soft-capping too (cap 2: the logits, ~N(0, 1.7), are bent).
  for (const double cap : {0.0, 2.0})
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message() << (t == DType::bf16 ? "bf16" : "f32") << " softcap " << cap);
      auto xr = t == DType::bf16 ? test::bf16_round(x) : x, wr = t == DType::bf16 ? test::bf16_round(w) : w;
      std::vector<double> dx(N * C), dw = as_double(dw0);
      const double want = ref::lmhead_ce(dx.data(), dw.data(), as_double(xr).data(), as_double(wr).data(), tgt.data(),
                                         N, C, V, 0.01, cap);
      auto gx = to_gpu(x), gw = to_gpu(w), gt = to_gpu(tgt), gdx = test::gpu_poisoned(N * C), gdw = to_gpu(dw0);
      kernels::LmHeadDims d{N, C, V, 16};
      d.softcap = float(cap);
      DeviceBuffer scratch(size_t(16) * V * 4, "scratch"), x16(x.size() * 2, "x16"), w16(w.size() * 2, "w16"),
          dl16(size_t(16) * V * 2, "dlogits");
      kc::to_bf16(x16.as<uint16_t>(), gx.as<float>(), int64_t(x.size()));
      kc::to_bf16(w16.as<uint16_t>(), gw.as<float>(), int64_t(w.size()));
      kernels::LmHeadCompute k{DType::bf16, x16.data(), w16.data(), dl16.data(), false};
      int64_t count = 0;
      std::vector<double> token_loss(N, -1.0);
      const double got =
          kc::lmhead_ce(gdx.as<float>(), gdw.as<float>(), gx.as<float>(), gw.as<float>(), gt.as<int32_t>(), d, 0.01f,
                        scratch.as<float>(), &count, t == DType::bf16 ? &k : nullptr, token_loss.data());
      EXPECT_EQ(count, int64_t(std::count_if(tgt.begin(), tgt.end(), [](int32_t v) { return v >= 0; })));
      EXPECT_NEAR(got, want, std::abs(want) * 1e-5);
      EXPECT_EQ(token_loss[4], 0.0);
      // bf16: the logits' gradient is rounded to bf16 before the two backward GEMMs (as on the CPU).
      const double tol = t == DType::f32 ? 1e-5 : 1e-2;
      EXPECT_LT(rel_error(from_gpu(gdx, N * C), dx), tol);
      EXPECT_LT(rel_error(from_gpu(gdw, V * C), dw), tol);
    }
  // A target outside the vocabulary is refused with the CPU kernel's message, before any work.
  tgt[3] = V;
  auto gt = to_gpu(tgt), gx = to_gpu(x), gw = to_gpu(w);
  DeviceBuffer scratch(size_t(16) * V * 4, "scratch");
  int64_t count = 0;
  EXPECT_THROW(kc::lmhead_ce(nullptr, nullptr, gx.as<float>(), gw.as<float>(), gt.as<int32_t>(),
                             kernels::LmHeadDims{N, C, V, 16}, 1.0f, scratch.as<float>(), &count),
               Error);
}

TEST(CudaDevice, OutOfMemoryNamesTheBuffer) {
  ZT_REQUIRE_GPU();
  try {
    DeviceBuffer huge(size_t(1) << 50, "the test's petabyte");
    FAIL() << "a petabyte allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the test's petabyte"), std::string::npos) << e.what();
  }
  DeviceBuffer after(1024, "after");  // the failed allocation left no sticky error behind
  EXPECT_NE(after.data(), nullptr);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// --device on a machine without a GPU (CI): auto falls back to the CPU, cuda is refused with a
// message that says what to do, a misspelt device names the valid ones.
TEST(CudaDevice, ResolveWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(resolve_device("auto"), DeviceKind::cpu);
  EXPECT_EQ(resolve_device("cpu"), DeviceKind::cpu);
  try {
    resolve_device("cuda");
    FAIL() << "--device cuda accepted without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_device("gpu"), Error);
}

}  // namespace
}  // namespace zt
