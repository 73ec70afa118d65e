// gemm.cpp: oneDNN sgemm behind ztrain's gemm signature, and oneDNN's bf16 matmul for
// mixed precision. oneDNN picks its AVX-512 kernels from the CPU itself, so
// OPENBLAS_CORETYPE and friends cannot slow it down.
#include "kernels/gemm.h"

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "core/error.h"

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

void gemm_typed(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (t == DType::f32)
    return gemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                beta, c, ldc);
  ZT_ASSERT(t == DType::bf16, "gemm_typed: no ", dtype_name(t), " matmul (fp16 runs on fp32 storage)");
  if (m == 0 || n == 0) return;
  MatmulCache& mc = matmul_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
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
    ZT_ASSERT(false, "oneDNN bf16 matmul failed (", e.what(), ") for m=", m, " n=", n, " k=", k,
              "; this CPU may lack AVX512-BF16: train without --bf16");
  }
}

}  // namespace zt::kernels
