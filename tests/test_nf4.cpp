// test_nf4.cpp: the NF4 kernels (kernels/nf4.h) against bitsandbytes' algorithm (fixed vectors
// from tests/kernels/nf4_vectors.py, a transcription of its quantize_4bit / dequantize_4bit and
// CUDA kernels), the naive references (kernels/reference.h), error bounds, the tiled GEMMs and
// the storage's bytes per parameter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/nf4.h"
#include "kernels/quant_maps.h"
#include "kernels/reference.h"
#include "test_util.h"

// A named namespace: the unity build puts this file beside others with helpers of the same names.
namespace zt::nf4_test {
namespace {

using kernels::kNf4Code;
using kernels::kNf4Threshold;
using kernels::Nf4Tensor;

uint64_t fnv(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}
template <class T>
uint64_t fnv(const std::vector<T>& v) {
  return fnv(v.data(), v.size() * sizeof(T));
}

// nf4_vectors.py's gen(): four 14-bit LCG draws summed and centred, times a per-block scale
// with few mantissa bits (every value exact in float32); block zero_block all 0.
std::vector<float> gen(int64_t n, uint32_t seed, int bs = 64, int64_t zero_block = -1) {
  std::vector<float> out(static_cast<size_t>(n));
  uint32_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    int32_t acc = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 1664525u + 1013904223u;
      acc += int32_t(s >> 18);
    }
    const int64_t b = i / bs;
    const float scale = float((8 + b % 9) / 8.0 * std::ldexp(1.0, -int(15 + b % 6)));
    out[size_t(i)] = b == zero_block ? 0.f : float(acc - 2 * 16383) * scale;
  }
  return out;
}

// nf4_vectors.py's probes(): absmax 1, each threshold and its two float neighbours, then +-0.
std::vector<float> probes() {
  std::vector<float> v = {1.f, -1.f};
  for (float t : kNf4Threshold) v.insert(v.end(), {t, std::nextafter(t, INFINITY), std::nextafter(t, -INFINITY)});
  v.insert(v.end(), {0.f, -0.f});
  return v;
}

std::string hex(const std::vector<uint8_t>& v) {
  std::string s;
  char b[3];
  for (uint8_t x : v) {
    std::snprintf(b, sizeof b, "%02x", x);
    s += b;
  }
  return s;
}

std::vector<float> dequantize(const Nf4Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  kernels::nf4_dequantize(t.view(), out.data());
  return out;
}

std::vector<float> decoded_absmax(const Nf4Tensor& t) {
  std::vector<float> a(size_t(t.view().blocks()));
  kernels::nf4_block_absmax(t.view(), 0, t.view().blocks(), a.data());
  return a;
}

}  // namespace

// The code table is get_4bit_type('nf4'). dQuantizeNF4's thresholds are the table's midpoints
// as decimal float literals: 4 of the 15 round to the float next to the float32 midpoint (their
// doubles are exact ties), which is what the GPU compares with; its tree counts the thresholds
// below x (nf4_code's form).
TEST(Nf4, TableThresholdsAndTree) {
  // nf4_vectors.py prints these: each literal rounded once to float32.
  const float expected[15] = {-0x1.b239b2p-1f, -0x1.38a4e0p-1f, -0x1.d70900p-2f, -0x1.5bd4ecp-2f, -0x1.e079d8p-3f,
                              -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f,  0x1.ec90c6p-4f,  0x1.a0cfc0p-3f,
                              0x1.2b05a8p-2f,  0x1.8ea7f2p-2f,  0x1.00da06p-1f,  0x1.491b5ep-1f,  0x1.b913b2p-1f};
  std::vector<int> off_midpoint;
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(kNf4Threshold[i], expected[i]) << i;
    EXPECT_LT(kNf4Code[i], kNf4Code[i + 1]);
    const float mid = (kNf4Code[i] + kNf4Code[i + 1]) / 2.f;
    if (mid != kNf4Threshold[i]) {
      off_midpoint.push_back(i);
      EXPECT_EQ(std::nextafter(mid, kNf4Threshold[i]), kNf4Threshold[i]) << i;
    }
  }
  EXPECT_EQ(off_midpoint, (std::vector<int>{0, 8, 12, 14}));
  EXPECT_EQ(kNf4Code[7], 0.f);
  std::vector<float> xs = probes();
  for (int k = 0; k <= 24000; ++k) xs.push_back(-1.2f + 2.4f * float(k) / 24000.f);
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  for (float x : xs) ASSERT_EQ(kernels::nf4_code(x), ref::nf4_code_tree(x)) << "x = " << x;
  EXPECT_EQ(kernels::nf4_code(std::numeric_limits<float>::quiet_NaN()), 0);
}

// A block of threshold probes (absmax 1), generated blocks and an odd tail of 11: every byte.
TEST(Nf4, SmallVectorEqualsBitsandbytes) {
  std::vector<float> w = gen(203, 7);
  const std::vector<float> p = probes();
  std::copy(p.begin(), p.end(), w.begin());
  ASSERT_EQ(fnv(w), 0xb601485b6b737b3aull);  // the same input as the script's
  const Nf4Tensor t = kernels::nf4_quantize(w.data(), int64_t(w.size()));
  EXPECT_EQ(hex(t.codes),
            "f00101212323434545656767878989a9ababcbcdcdedefe772847d3c3b6c8a9688b26a94266b1eb9244766a31d1b97a7537a52"
            "953901b15e9f0e78f576e41349c79490e7769678726fa1617d54b837634152513c4874ba9958943365767b71769eb3feed9857");
  EXPECT_EQ(t.absmax, (std::vector<float>{0x1p+0f, 0x1.89a08p-2f, 0x1.baf8p-3f, 0x1.c67bp-4f}));
  EXPECT_FALSE(t.double_quant());
  EXPECT_EQ(fnv(dequantize(t)), 0xe85bbab3021d58d6ull);
  // The reference quantizer: the same codes and absmax.
  std::vector<uint8_t> code;
  std::vector<float> absmax;
  ref::nf4_quantize(w.data(), int64_t(w.size()), 64, code, absmax);
  EXPECT_EQ(absmax, t.absmax);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(ref::nf4_unpack(t.codes.data(), int64_t(i)), code[i]) << i;
  EXPECT_EQ(t.codes.back() & 15, 7);  // the pad nibble: the GPU's 0 * (1 / absmax)
}

namespace {
struct Vector {
  const char* name;
  int64_t n;
  uint32_t seed;
  int bs;
  int64_t zero_block;
  bool nested;
  uint64_t input, codes, qabsmax, absmax, dequantized;
  float offset;
  std::vector<float> scales;
};
}  // namespace

// Double quantization (with an all-zero block), blocksizes 128 and 32, against the script's
// checksums of every byte and float.
TEST(Nf4, DoubleQuantVectorsEqualBitsandbytes) {
  const Vector vs[] = {
      {"nested",
       64 * 300 + 37,
       11,
       64,
       5,
       true,
       0x654769ad790faea4ull,
       0x994b73f31f4b7f95ull,
       0x0d580a0efc5519efull,
       0xe21e7636b7eea430ull,
       0xc8e3775feca2b032ull,
       0x1.593df6p-2f,
       {0x1.26bd02p+0f, 0x1.092002p+0f}},
      {"bs128",
       128 * 20 + 1,
       3,
       128,
       -1,
       false,
       0x9845f45b08cab377ull,
       0xa2e3856fe6e7f4f7ull,
       0,
       0xf2e6a257e6f14d63ull,
       0xe5c604999114fb3cull,
       0.f,
       {}},
      {"nested_bs32",
       32 * 600,
       5,
       32,
       2,
       true,
       0xcf57abe72e6de809ull,
       0xb05d72cd3acc7597ull,
       0xb35af36d44e9e40cull,
       0x8f8badd2e0d128a1ull,
       0x5de393e49abdcff1ull,
       0x1.396c96p-2f,
       {0x1.f6a0b4p-1f, 0x1.2d615ap+0f, 0x1.e7b2b4p-1f}},
  };
  for (const Vector& v : vs) {
    SCOPED_TRACE(v.name);
    const std::vector<float> w = gen(v.n, v.seed, v.bs, v.zero_block);
    ASSERT_EQ(fnv(w), v.input);
    const Nf4Tensor t = kernels::nf4_quantize(w.data(), v.n, v.bs, v.nested);
    EXPECT_EQ(fnv(t.codes), v.codes);
    EXPECT_EQ(t.double_quant(), v.nested);
    if (v.nested) {
      EXPECT_EQ(fnv(t.qabsmax), v.qabsmax);
      EXPECT_EQ(t.offset, v.offset);
      EXPECT_EQ(t.absmax_scale, v.scales);
      EXPECT_TRUE(t.absmax.empty());
    }
    EXPECT_EQ(fnv(decoded_absmax(t)), v.absmax);
    if (v.nested) {  // the naive double quantization of the single-quantized absmax
      const Nf4Tensor s = kernels::nf4_quantize(w.data(), v.n, v.bs, false);
      std::vector<uint8_t> q;
      std::vector<float> scale;
      float offset;
      ref::nf4_double_quantize(s.absmax, q, scale, offset);
      EXPECT_EQ(q, t.qabsmax);
      EXPECT_EQ(scale, t.absmax_scale);
      EXPECT_EQ(offset, t.offset);
    }
    const std::vector<float> out = dequantize(t);
    EXPECT_EQ(fnv(out), v.dequantized);
    std::vector<float> naive(out.size());
    ref::nf4_dequantize(t.view(), naive.data());
    EXPECT_EQ(fnv(naive), v.dequantized);
  }
}

// dQuantize<0> (the nested codes' search) on every midpoint of the signed dynamic map and its
// float neighbours: the script's codes; elsewhere it is the nearest code.
TEST(Nf4, DynamicSearchEqualsBitsandbytes) {
  const float* map = kernels::kDynamicSigned;
  std::vector<uint8_t> q;
  int unlike_nearest = 0;  // 8-bit AdamW's rule (ties to the lower code) picks another code
  for (int i = 0; i < 255; ++i) {
    const float m = (map[i] + map[i + 1]) * 0.5f;
    for (float x : {m, std::nextafter(m, INFINITY), std::nextafter(m, -INFINITY)}) {
      q.push_back(kernels::dynamic_quantize_bnb(map, x));
      unlike_nearest += q.back() != kernels::quantize_nearest(map, x);
    }
  }
  EXPECT_EQ(unlike_nearest, 123);  // why double quantization needs its own search
  for (float x : {-1.f, 1.f, 0.f, -1.5f, 1.5f}) q.push_back(kernels::dynamic_quantize_bnb(map, x));
  EXPECT_EQ(fnv(q), 0x6717158d20e3187full);
  EXPECT_EQ(kernels::dynamic_quantize_bnb(map, std::numeric_limits<float>::quiet_NaN()), 0);
  // The search equals its closed form (ref::dynamic_quantize_bnb: nearest by the float32
  // midpoint, ties to the even code) on the probes, every code and random values.
  std::vector<float> xs;
  for (int i = 0; i < 255; ++i) {
    const float m = (map[i] + map[i + 1]) * 0.5f;
    xs.insert(xs.end(), {m, std::nextafter(m, INFINITY), std::nextafter(m, -INFINITY), map[i]});
  }
  Rng g(9);
  for (int k = 0; k < 100000; ++k) xs.push_back(float(g.uniform() * 2.2 - 1.1));
  for (float x : xs) ASSERT_EQ(kernels::dynamic_quantize_bnb(map, x), ref::dynamic_quantize_bnb(map, x)) << x;
  Rng r(3);
  for (int k = 0; k < 20000; ++k) {
    const float x = float(r.uniform() * 2.0 - 1.0);
    const int c = kernels::dynamic_quantize_bnb(map, x);
    double best = 1e9;
    for (int j = 0; j < 256; ++j) best = std::min(best, std::fabs(double(x) - map[j]));
    ASSERT_LE(std::fabs(double(x) - map[c]), best + 1e-7) << "x = " << x;
  }
}

// |w - dequantized| is at most half the widest gap between codes times the block's absmax;
// double quantization keeps the same 4-bit codes and moves each absmax by at most half a step
// of the dynamic map times its 256-block's scale.
TEST(Nf4, RoundTripErrorBounds) {
  double half_gap = 0;
  for (int i = 0; i < 15; ++i) half_gap = std::max(half_gap, (double(kNf4Code[i + 1]) - kNf4Code[i]) / 2);
  for (int bs : {32, 64, 256}) {
    SCOPED_TRACE("blocksize " + std::to_string(bs));
    const int64_t n = 64 * 1000 + 3;
    const std::vector<float> w = test::randn(size_t(n), 17 + uint64_t(bs), 0.02);
    const Nf4Tensor single = kernels::nf4_quantize(w.data(), n, bs, false);
    const Nf4Tensor dq = kernels::nf4_quantize(w.data(), n, bs, true);
    EXPECT_EQ(single.codes, dq.codes);
    const std::vector<float> a = decoded_absmax(dq), ws = dequantize(single), wd = dequantize(dq);
    double se_s = 0, se_d = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float am = single.absmax[size_t(i / bs)];
      ASSERT_LE(std::fabs(double(w[size_t(i)]) - ws[size_t(i)]), half_gap * am * (1 + 1e-6)) << i;
      se_s += std::pow(double(w[size_t(i)]) - ws[size_t(i)], 2);
      se_d += std::pow(double(w[size_t(i)]) - wd[size_t(i)], 2);
      ss += double(w[size_t(i)]) * w[size_t(i)];
    }
    for (size_t b = 0; b < a.size(); ++b) {
      const double scale = dq.absmax_scale[b / kernels::kNf4NestedBlock];
      ASSERT_LE(std::fabs(double(a[b]) - single.absmax[b]), scale * 0.0071 + 1e-7) << b;
    }
    // Normal weights: about 10% RMS error (the table is optimal for N(0, 1) per block), and
    // double quantization adds little to it.
    EXPECT_LT(std::sqrt(se_s / ss), bs <= 64 ? 0.11 : 0.13);
    EXPECT_LT(std::sqrt(se_d / ss), std::sqrt(se_s / ss) * 1.02);
  }
}

// A range at any offset (mid-byte, mid-block) equals that slice of the whole; bf16 is the fp32
// value rounded to nearest even; rows are ranges of the flattened matrix.
TEST(Nf4, DequantizeRangesAndRows) {
  const int64_t R = 23, C = 45;  // blocks straddle rows; odd row length
  const std::vector<float> w = test::randn(size_t(R * C), 5);
  for (bool nested : {false, true}) {
    const Nf4Tensor t = kernels::nf4_quantize_weight(w.data(), R, C, 64, nested);
    const std::vector<float> all = dequantize(t);
    test::for_each_isa([&] {
      for (int64_t i0 : {0, 1, 63, 64, 65, 500}) {
        const int64_t i1 = std::min<int64_t>(R * C, i0 + 77 + i0 % 3);
        std::vector<float> f(size_t(i1 - i0));
        std::vector<uint16_t> h(size_t(i1 - i0));
        kernels::nf4_dequantize_range(t.view(), i0, i1, f.data());
        kernels::nf4_dequantize_range(t.view(), i0, i1, h.data());
        for (int64_t i = i0; i < i1; ++i) {
          ASSERT_EQ(f[size_t(i - i0)], all[size_t(i)]) << i;
          ASSERT_EQ(h[size_t(i - i0)], f32_to_bf16(all[size_t(i)])) << i;
        }
      }
      std::vector<float> tile(size_t(5 * C));
      std::vector<uint16_t> tile16(size_t(5 * C));
      kernels::nf4_dequantize_rows(t.view(), 7, 12, DType::f32, tile.data());
      kernels::nf4_dequantize_rows(DeviceKind::cpu, t.view(), 7, 12, DType::bf16, tile16.data());
      for (int64_t i = 0; i < 5 * C; ++i) {
        ASSERT_EQ(tile[size_t(i)], all[size_t(7 * C + i)]);
        ASSERT_EQ(tile16[size_t(i)], f32_to_bf16(all[size_t(7 * C + i)]));
      }
    });
  }
}

namespace {
// The tiled GEMMs against the naive ones in double on the dequantized weight (rounded to bf16
// when the inputs are bf16, as the tiles are).
void check_linear(int64_t N, int64_t out, int64_t in, DType t, int64_t tile_rows, bool int8 = false) {
  SCOPED_TRACE("N " + std::to_string(N) + " W " + std::to_string(out) + "x" + std::to_string(in) + " " + dtype_name(t) +
               " tile rows " + std::to_string(tile_rows) + (int8 ? " int8" : " nf4"));
  const std::vector<float> w = test::randn(size_t(out * in), uint64_t(out * 31 + in), 0.05);
  const Nf4Tensor q = int8 ? kernels::int8_quantize_weight(w.data(), out, in)
                           : kernels::nf4_quantize_weight(w.data(), out, in, 64, true);
  std::vector<float> wd = dequantize(q), x = test::randn(size_t(N * in), 7), dy = test::randn(size_t(N * out), 8);
  std::vector<uint16_t> x16(x.size()), dy16(dy.size());
  const bool bf = t == DType::bf16;
  if (bf) {
    for (auto* v : {&wd, &x, &dy})
      for (float& e : *v) e = bf16_to_f32(f32_to_bf16(e));
    for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
    for (size_t i = 0; i < dy.size(); ++i) dy16[i] = f32_to_bf16(dy[i]);
  }
  const void* xp = bf ? static_cast<const void*>(x16.data()) : x.data();
  const void* dyp = bf ? static_cast<const void*>(dy16.data()) : dy.data();
  std::vector<double> yr(size_t(N * out)), dxr(size_t(N * in));
  const auto wdd = test::cast<double>(wd), xd = test::cast<double>(x), dyd = test::cast<double>(dy);
  ref::nf4_linear_forward(yr.data(), xd.data(), wdd.data(), N, out, in);
  ref::nf4_linear_backward_input(dxr.data(), dyd.data(), wdd.data(), N, out, in);
  kernels::nf4_tile_rows_for_tests(tile_rows);
  std::vector<float> y(size_t(N * out), NAN), dx(size_t(N * in), 1.f);
  kernels::nf4_linear_forward(DeviceKind::cpu, t, y.data(), xp, q.view(), N);
  kernels::nf4_linear_backward_input(t, dx.data(), dyp, q.view(), N, 1.f);  // accumulates onto 1
  // A range of W's rows [r0, r0 + m) (DoRA's per-part outputs): y's columns of those rows, and the
  // reduction over them alone with dy's columns (leading dimension out).
  const int64_t r0 = out / 3, m = std::max<int64_t>(1, out / 2);
  std::vector<float> ys(size_t(N * m), NAN), dxs(size_t(N * in), NAN);
  const size_t elt = bf ? 2 : 4;
  kernels::nf4_linear_forward_rows(DeviceKind::cpu, t, ys.data(), m, xp, q.view(), r0, m, N);
  kernels::nf4_linear_backward_input_rows(DeviceKind::cpu, t, dxs.data(), static_cast<const char*>(dyp) + r0 * elt, out,
                                          q.view(), r0, m, N);
  kernels::nf4_tile_rows_for_tests(0);
  std::vector<double> ysr(ys.size()), dxsr(dxs.size(), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < m; ++j) {
      ysr[size_t(i * m + j)] = yr[size_t(i * out + r0 + j)];
      for (int64_t k = 0; k < in; ++k)
        dxsr[size_t(i * in + k)] += dyd[size_t(i * out + r0 + j)] * wdd[size_t((r0 + j) * in + k)];
    }
  for (double& e : dxr) e += 1.0;
  test::expect_close(y, yr, 1e-4, 1e-4, "y = x W^T");
  test::expect_close(dx, dxr, 1e-4, 1e-4, "dx = dy W");
  test::expect_close(ys, ysr, 1e-4, 1e-4, "y = x W[rows]^T");
  test::expect_close(dxs, dxsr, 1e-4, 1e-4, "dx = dy[:, rows] W[rows]");
}
}  // namespace

TEST(Nf4, TiledLinearMatchesDequantizedGemm) {
  test::for_each_isa([&] {
    for (DType t : {DType::f32, DType::bf16}) {
      check_linear(13, 37, 45, t, 8);        // odd shapes, 5 tiles with a short last one
      check_linear(7, 100, 129, t, 0);       // the default tile (one)
      check_linear(33, 130, 64, t, 16);      // blocks aligned to rows
      check_linear(1, 200, 33, t, 64);       // one token
      check_linear(13, 37, 45, t, 8, true);  // --load_in_8bit's Int8Params, tiles of rows
      check_linear(7, 100, 129, t, 0, true);
    }
  });
}

// bitsandbytes' int8_vectorwise_quant / dequant: per row absmax (SCB), code round(w (127 / SCB)) half
// to even, value code SCB / 127; a zero row codes 0. Hand-checked rows and a random matrix's bound.
TEST(Nf4, Int8RowwiseQuantizationAsBitsandbytes) {
  const std::vector<float> w = {0.5f, -1.0f, 0.25f, 0.f, 0.f, 0.f, 0.f, 0.f, 2.f, -0.5f, 1.f, 0.1f};
  const Nf4Tensor q = kernels::int8_quantize_weight(w.data(), 3, 4);
  EXPECT_EQ(q.bytes(), size_t(12 + 3 * 4));  // a byte a value, an fp32 absmax a row
  EXPECT_EQ(q.bytes(), size_t(kernels::int8_stored_bytes(3, 4)));
  const std::vector<float> absmax = {1.f, 0.f, 2.f};
  EXPECT_EQ(q.absmax, absmax);
  // 0.5 * 127 = 63.5 -> 64 (even); 0.25 * 127 = 31.75 -> 32; -0.5 * 63.5 = -31.75 -> -32; 0.1 * 63.5 = 6.35 -> 6.
  const std::vector<int> want = {64, -127, 32, 0, 0, 0, 0, 0, 127, -32, 64, 6};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(int(int8_t(q.codes[i])), want[i]) << i;
  std::vector<float> back(w.size());
  kernels::nf4_dequantize(q.view(), back.data());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(back[i], float(want[i]) * (absmax[i / 4] * 7.874015718698502e-3f)) << i;
  const std::vector<float> r = test::randn(64 * 96, 5, 0.05);
  const Nf4Tensor big = kernels::int8_quantize_weight(r.data(), 64, 96);
  std::vector<float> rb(r.size());
  kernels::nf4_dequantize(big.view(), rb.data());
  for (size_t i = 0; i < r.size(); ++i) EXPECT_LE(std::fabs(rb[i] - r[i]), 0.5f * big.absmax[i / 96] / 127.f * 1.0001f);
}

// ≤ 0.55 bytes per parameter with double quantization (the bound) on GPT-2-sized
// projections; 0.5625 without it.
TEST(Nf4, BytesPerParameter) {
  for (auto [R, C] : {std::pair<int64_t, int64_t>{768, 768}, {2048, 768}}) {
    const std::vector<float> w = test::randn(size_t(R * C), 1, 0.02);
    const Nf4Tensor dq = kernels::nf4_quantize_weight(w.data(), R, C, 64, true);
    const Nf4Tensor single = kernels::nf4_quantize_weight(w.data(), R, C, 64, false);
    const double n = double(R * C), bpp = double(dq.bytes()) / n;
    std::printf("NF4 %lldx%lld: %zu bytes double-quantized = %.5f bytes/param; %.5f single\n", (long long)R,
                (long long)C, dq.bytes(), bpp, double(single.bytes()) / n);
    EXPECT_LE(bpp, 0.55);
    // codes n/2, one 8-bit absmax a block, an fp32 scale per 256 blocks, the offset.
    const int64_t nb = (R * C + 63) / 64;
    EXPECT_EQ(dq.bytes(), size_t(R * C / 2 + nb + (nb + 255) / 256 * 4 + 4));
    EXPECT_EQ(single.bytes(), size_t(R * C / 2 + nb * 4));
    EXPECT_EQ(dq.bytes(), size_t(kernels::nf4_stored_bytes(R * C, 64, true)));  // what estimates use
    EXPECT_EQ(single.bytes(), size_t(kernels::nf4_stored_bytes(R * C, 64, false)));
  }
}

TEST(Nf4, BadArguments) {
  const std::vector<float> w(100, 1.f);
  EXPECT_NE(test::error_of([&] { kernels::nf4_quantize(w.data(), 100, 48); }).find("blocksize 48"), std::string::npos);
  EXPECT_NE(test::error_of([&] { kernels::nf4_quantize(w.data(), 0); }).find("empty"), std::string::npos);
  const Nf4Tensor q = kernels::nf4_quantize_weight(w.data(), 10, 10);
  std::vector<float> y(10);
  EXPECT_NE(test::error_of([&] {
              kernels::nf4_linear_forward(DType::f16, y.data(), w.data(), q.view(), 1);
            }).find("f32 or bf16"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              kernels::nf4_linear_forward(DeviceKind::cuda, DType::f32, y.data(), w.data(), q.view(), 1);
            }).find("no GPU version"),
            std::string::npos);
}

}  // namespace zt::nf4_test
