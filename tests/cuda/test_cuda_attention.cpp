// test_cuda_attention.cpp: the GPU attention kernels (kernels/cuda/attention_cuda.h) against
// ref::attention_forward / attention_backward in double. fp32 mode must match to 1e-5; bf16
// mode is compared with the reference on bf16-rounded inputs (what the kernel multiplies), so
// only the rounding of P and dS and fp32 accumulation separate them. Shapes cover both the
// CUDA-core kernels (fp32, and bf16 at HS 32 / 96) and the tensor-core ones (bf16, HS 64 / 128),
// MHA and GQA, rows shorter than, equal to and spanning several tiles, and packed documents.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/reference.h"

namespace zt::test {
namespace {

using kernels::AttnDims;

struct Case {
  int B, T, NH, KVH, HS;
  bool doc, bf16;
  int doc_len = 0;                   // > 0: documents of doc_len tokens (the last one shorter) instead of two
  float scale = 0.f, softcap = 0.f;  // Gemma's score scale and Gemma 2's soft-cap (0: none)
};

// Two documents per row: positions restart at T/3 + b (so rows differ); a cut at 0 or past the
// row leaves one document.
std::vector<int32_t> two_documents(int B, int T) {
  std::vector<int32_t> ds(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    const int cut = T / 3 + b;
    for (int t = 0; t < T; ++t) ds[size_t(b) * T + t] = cut > 0 && cut < T && t >= cut ? cut : 0;
  }
  return ds;
}

// Documents of len tokens each (row b shifted by b so that boundaries move between rows).
std::vector<int32_t> short_documents(int B, int T, int len) {
  std::vector<int32_t> ds(size_t(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) ds[size_t(b) * T + t] = t < b ? 0 : (t - b) / len * len + b;
  return ds;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " KVH=" << c.KVH << " HS=" << c.HS
                                  << " doc=" << c.doc << " bf16=" << c.bf16 << " doc_len=" << c.doc_len
                                  << " scale=" << c.scale << " softcap=" << c.softcap);
  AttnDims d{c.B, c.T, c.NH, c.KVH, c.HS, nullptr, c.scale, c.softcap};
  const size_t n_qkv = size_t(c.B) * c.T * d.row_stride(), n_out = size_t(c.B) * c.T * c.NH * c.HS;
  const size_t n_lse = size_t(c.B) * c.NH * c.T;
  const std::vector<float> qkv = randn(n_qkv, seed), dout = randn(n_out, seed + 1);
  const std::vector<int32_t> doc = c.doc_len > 0 ? short_documents(c.B, c.T, c.doc_len) : two_documents(c.B, c.T);

  // Reference in double, on the values the kernel actually multiplies.
  const std::vector<double> qkv_r = to_double(c.bf16 ? bf16_round(qkv) : qkv);
  const std::vector<double> dout_r = to_double(c.bf16 ? bf16_round(dout) : dout);
  AttnDims dh = d;
  dh.doc_start = c.doc ? doc.data() : nullptr;
  std::vector<double> out_r(n_out), lse_r(n_lse), dqkv_r(n_qkv);
  ref::attention_forward(out_r.data(), lse_r.data(), qkv_r.data(), dh);
  ref::attention_backward(dqkv_r.data(), dout_r.data(), qkv_r.data(), dh);

  DeviceBuffer qkv_g = to_gpu(qkv), dout_g = to_gpu(dout), doc_g = to_gpu(doc);
  DeviceBuffer out_g = gpu_poisoned(n_out), lse_g = gpu_poisoned(n_lse), dqkv_g = gpu_poisoned(n_qkv);
  AttnDims dg = d;
  dg.doc_start = c.doc ? doc_g.as<int32_t>() : nullptr;
  kernels::cuda::attention_forward(out_g.as<float>(), lse_g.as<float>(), qkv_g.as<float>(), dg, c.bf16);
  kernels::cuda::attention_backward(dqkv_g.as<float>(), dout_g.as<float>(), qkv_g.as<float>(), out_g.as<float>(),
                                    lse_g.as<float>(), dg, c.bf16);
  const double tol = c.bf16 ? 2e-2 : 1e-5, tol_lse = c.bf16 ? 1e-3 : 1e-5;
  EXPECT_LT(rel_error(from_gpu<float>(out_g, n_out), out_r), tol) << "out";
  EXPECT_LT(rel_error(from_gpu<float>(lse_g, n_lse), lse_r), tol_lse) << "lse";
  EXPECT_LT(rel_error(from_gpu<float>(dqkv_g, n_qkv), dqkv_r), tol) << "dqkv";
}

// Every (T, heads, doc) combination at B = 2 for one head size and precision.
void run_grid(int HS, bool bf16) {
  uint64_t seed = 100 + HS;
  for (int T : {1, 17, 64, 200})
    for (auto [NH, KVH] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{4, 1}})
      for (bool doc : {false, true}) run_case({2, T, NH, KVH, HS, doc, bf16}, seed += 7);
}

TEST(CudaAttention, Fp32HeadSize64) {
  ZT_REQUIRE_GPU();
  run_grid(64, false);
}
TEST(CudaAttention, Fp32HeadSize128) {
  ZT_REQUIRE_GPU();
  run_grid(128, false);
}
TEST(CudaAttention, Fp32OddHeadSizes) {
  ZT_REQUIRE_GPU();
  run_grid(32, false);
  run_grid(96, false);
  run_grid(40, false);  // not a multiple of 32: lanes past HS hold no column
}
TEST(CudaAttention, Bf16TensorCoresHeadSize64) {
  ZT_REQUIRE_GPU();
  ASSERT_TRUE(kernels::cuda::attention_uses_tensor_cores(64, true));
  run_grid(64, true);
}
TEST(CudaAttention, Bf16TensorCoresHeadSize128) {
  ZT_REQUIRE_GPU();
  ASSERT_TRUE(kernels::cuda::attention_uses_tensor_cores(128, true));
  run_grid(128, true);
}
TEST(CudaAttention, Bf16CudaCoresOddHeadSizes) {
  ZT_REQUIRE_GPU();
  ASSERT_FALSE(kernels::cuda::attention_uses_tensor_cores(96, true));
  run_grid(32, true);
  run_grid(96, true);
}
// Rows spanning several forward query tiles (128) and backward key tiles (64), partial last
// tiles, and documents whose boundary falls inside a tile.
TEST(CudaAttention, LongerRowsBothPaths) {
  ZT_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    run_case({1, 333, 4, 2, 128, true, bf16}, 7);
    run_case({2, 300, 2, 1, 64, true, bf16}, 8);
    run_case({1, 257, 2, 2, 64, false, bf16}, 9);
  }
}

// Gemma: a score scale other than 1 / sqrt(HS) on both paths; Gemma 2's soft-capped scores (the
// CUDA-core kernels, also under bf16: soft-capped attention never takes the tensor cores), with
// caps that bend the scores (randn q.k at HS 64 reaches ~ +-20 before scaling).
TEST(CudaAttention, GemmaScaleAndSoftcap) {
  ZT_REQUIRE_GPU();
  EXPECT_FALSE(kernels::cuda::attention_uses_tensor_cores(64, true, 50.f));
  uint64_t seed = 70;
  for (bool bf16 : {false, true})
    for (int HS : {64, 128, 32}) {
      run_case({2, 150, 4, 2, HS, true, bf16, 0, 0.3f}, ++seed);
      run_case({2, 150, 4, 2, HS, true, bf16, 0, 0.f, 1.0f}, ++seed);
      run_case({1, 200, 4, 1, HS, false, bf16, 0, 0.25f, 0.5f}, ++seed);
    }
}

// The tensor-core kernels' tile edges: T one past / short of the forward's 128-query and the
// backward's 128-key tiles, and many short documents, so that key tiles see only a few query
// tiles, whole tiles are skipped, and boundaries fall inside 16-row warp slices.
TEST(CudaAttention, Bf16TensorCoreTileEdges) {
  ZT_REQUIRE_GPU();
  uint64_t seed = 40;
  for (int HS : {64, 128}) {
    for (int T : {2, 127, 129, 385}) run_case({2, T, 4, 2, HS, false, true}, ++seed);
    run_case({2, 500, 4, 1, HS, true, true, 37}, ++seed);
    run_case({1, 700, 2, 2, HS, true, true, 130}, ++seed);
    run_case({2, 300, 8, 2, HS, true, true, 9}, ++seed);
  }
}

TEST(CudaAttention, RefusesUnsupportedHeadSize) {
  ZT_REQUIRE_GPU();
  DeviceBuffer buf(1 << 20, "test");
  AttnDims d{1, 4, 2, 2, 12};
  float* p = buf.as<float>();
  EXPECT_THROW(kernels::cuda::attention_forward(p, p, p, d, false), Error);
  d.HS = 264;
  EXPECT_THROW(kernels::cuda::attention_forward(p, p, p, d, true), Error);
}

}  // namespace
}  // namespace zt::test
