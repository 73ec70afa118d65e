// gemm.cpp: oneDNN sgemm behind ztrain's gemm signature, and oneDNN's bf16 matmul for
// mixed precision. oneDNN picks its kernels from the CPU itself at run time, so
// OPENBLAS_CORETYPE and friends cannot slow it down. Where oneDNN has no bf16 matmul (x86
// without AVX-512, aarch64), bf16 operands are widened to fp32 panel by panel and multiplied
// by sgemm: the same products (bf16 values are exact in fp32) with fp32 accumulation.
#include "kernels/gemm.h"

#include <atomic>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>
#include <algorithm>

#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/isa.h"

namespace zt::kernels {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  ZT_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st));
}

namespace {
// One matmul primitive per (shape, layout, alpha, beta): creating one costs far more than a
// small product, and a step issues the same dozen shapes over and over.
struct MatmulCache {
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  std::map<Key, dnnl::matmul> prims;
  std::mutex mu;
  std::vector<float> scratch_a, scratch_b;  // gemm_bf16_widened's operands in fp32

  const dnnl::matmul& get(const Key& key) {
    auto it = prims.find(key);
    if (it != prims.end()) return it->second;
    const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
    using dt = dnnl::memory::data_type;
    // Row-major operands as strided 2-D descriptors: a transposed operand is the same
    // memory read with swapped strides, so nothing is copied or reordered.
    const dnnl::memory::desc ad({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const dnnl::memory::desc bd({k, n}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const dnnl::memory::desc cd({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, eng);
    return prims.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}
}  // namespace

namespace {
// Test hooks (gemm_bf16_force_widened): the widened path even where oneDNN has bf16 matmul,
// and the panel size.
std::atomic<bool> g_force_widened{false};
std::atomic<int64_t> g_panel_floats{int64_t(4) << 20};  // 16 MiB of A and B slices at a time

// Widens nr rows of `cols` bf16 values, row i at src + i * ld, into dst (nr, cols), dense: one
// (parallel) conversion when the rows are contiguous, else rows spread over the threads.
void widen_rows(float* dst, const uint16_t* src, int64_t ld, int64_t nr, int64_t cols) {
  if (ld == cols) return from_lowp(DType::bf16, dst, src, nr * cols);
#pragma omp parallel for schedule(static) if (nr * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < nr; ++r) from_lowp(DType::bf16, dst + r * cols, src + r * ld, cols);
}

// C = alpha op(A) op(B) + beta C for bf16 A and B on fp32 arithmetic, in panels of the reduction
// dimension k: each panel's slices of A and B are widened once into scratch of at most
// panel_floats floats together, multiplied and summed into C (beta on the first panel only). Every
// element is widened exactly once and the scratch stays small even for the LM head's (V, C)
// weight or (tokens, V) logits' gradient. Scratch is kept between calls (under the cache's lock).
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc,
                       std::vector<float>& sa, std::vector<float>& sb) {
  if (k == 0) {  // an empty sum: C = beta C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const int64_t kb = std::max<int64_t>(1, std::min<int64_t>(k, g_panel_floats / std::max<int64_t>(m + n, 1)));
  sa.resize(size_t(m * kb));
  sb.resize(size_t(kb * n));
  for (int64_t p0 = 0; p0 < k; p0 += kb) {
    const int64_t w = std::min(kb, k - p0);
    // The panel's slices, dense: A (w, m) when stored transposed (k, m), else (m, w); B (n, w)
    // when stored transposed (n, k), else (w, n).
    if (trans_a)
      widen_rows(sa.data(), a + p0 * lda, lda, w, m);
    else
      widen_rows(sa.data(), a + p0, lda, m, w);
    if (trans_b)
      widen_rows(sb.data(), b + p0, ldb, n, w);
    else
      widen_rows(sb.data(), b + p0 * ldb, ldb, w, n);
    gemm(trans_a, trans_b, m, n, w, alpha, sa.data(), trans_a ? m : w, sb.data(), trans_b ? w : n,
         p0 == 0 ? beta : 1.f, c, ldc);
  }
}
}  // namespace

void gemm_bf16_force_widened(bool on, int64_t panel_floats) {
  g_force_widened = on;
  g_panel_floats = panel_floats > 0 ? panel_floats : int64_t(4) << 20;
}

void gemm_typed(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (t == DType::f32)
    return gemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                beta, c, ldc);
  ZT_ASSERT(t == DType::bf16, "gemm_typed: no ", dtype_name(t), " matmul (fp16 runs on fp32 storage)");
  if (m == 0 || n == 0) return;
  MatmulCache& mc = matmul_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
  if (g_force_widened || !gemm_has_bf16())
    return gemm_bf16_widened(trans_a, trans_b, m, n, k, alpha, static_cast<const uint16_t*>(a), lda,
                             static_cast<const uint16_t*>(b), ldb, beta, c, ldc, mc.scratch_a, mc.scratch_b);
  try {
    const dnnl::matmul& mm = mc.get({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta});
    using dt = dnnl::memory::data_type;
    // Memory objects are thin wrappers over our pointers (no copies).
    dnnl::memory am({{m, k}, dt::bf16, trans_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1}}, mc.eng,
                    const_cast<void*>(a));
    dnnl::memory bm({{k, n}, dt::bf16, trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1}}, mc.eng,
                    const_cast<void*>(b));
    dnnl::memory cm({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, mc.eng, c);
    mm.execute(mc.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    mc.stream.wait();
  } catch (const dnnl::error& e) {
    ZT_ASSERT(false, "oneDNN bf16 matmul failed (", e.what(), ") for m=", m, " n=", n, " k=", k, ")");
  }
}

}  // namespace zt::kernels
