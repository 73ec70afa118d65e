// gemm_lt.cpp: gemm_cuda.h on cuBLASLt. A row-major product is the column-major product of the
// transposes, C^T = op(B)^T op(A)^T, so cuBLASLt gets B's memory as its first operand and A's
// as its second, each with its own transpose flag, and writes C's memory as a column-major
// (n x m) matrix. Descriptors and the heuristic's algorithm are cached per shape, layout, types
// and pointer alignment: a training step repeats a handful of shapes.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/gemm_cuda.h"

namespace zt::kernels::cuda {

namespace {

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(str_cat("cuBLASLt ", what, " failed: ", cublasLtGetStatusString(s), " (status ", int(s), ")"));
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what cuBLAS asks of Hopper for its best kernels

struct Key {
  int t, c_t;
  bool ta, tb, beta_zero;
  int64_t m, n, k, lda, ldb, ldc;
  int align;  // the smallest alignment (bytes, up to 16) among the three pointers
  auto tie() const { return std::tie(t, c_t, ta, tb, beta_zero, m, n, k, lda, ldb, ldc, align); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct Lt {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  std::map<Key, Plan> plans;
  std::mutex mu;
  Lt() : workspace(kWorkspaceBytes, "cuBLASLt workspace") { lt_check(cublasLtCreate(&handle), "cublasLtCreate"); }
  ~Lt() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.op);
    }
    cublasLtDestroy(handle);
  }
};

Lt& lt() {
  static Lt instance;
  return instance;
}

const char* type_name(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "another type"; }

cudaDataType_t cuda_type(DType t) {
  if (t == DType::f32) return CUDA_R_32F;
  if (t == DType::bf16) return CUDA_R_16BF;
  throw Error(str_cat("GPU GEMM: ", type_name(t), " operands are not supported (f32 or bf16)"));
}

int alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && u % uint64_t(a) != 0) a /= 2;
  return a;
}

Plan make_plan(Lt& l, const Key& key) {
  Plan p;
  const cudaDataType_t ab = cuda_type(DType(key.t)), ct = cuda_type(DType(key.c_t));
  lt_check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  // First operand: B's memory; second: A's (see the file comment).
  const cublasOperation_t op1 = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof(op1)), "TRANSA");
  lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof(op2)), "TRANSB");
  // Column-major shapes of the stored matrices: B is (n x k) untransposed, (k x n) transposed.
  lt_check(cublasLtMatrixLayoutCreate(&p.a, ab, key.tb ? key.k : key.n, key.tb ? key.n : key.k, key.ldb), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&p.b, ab, key.ta ? key.m : key.k, key.ta ? key.k : key.m, key.lda), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&p.c, ct, key.n, key.m, key.ldc), "layout C");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t align = uint32_t(key.align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(l.handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Error(str_cat("cuBLASLt has no GEMM for m=", key.m, " n=", key.n, " k=", key.k, " (", type_name(DType(key.t)),
                        "): ", cublasLtGetStatusString(s)));
  p.algo = result.algo;
  return p;
}

}  // namespace

void gemm(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, float beta, void* c, int64_t ldc, DType c_t) {
  if (m == 0 || n == 0) return;
  ZT_ASSERT(c_t == DType::f32 || beta == 0.0f, "a bf16 C is written, never accumulated");
  if (k == 0) {  // C = beta * C: cuBLASLt rejects an empty reduction
    ZT_ASSERT(beta == 0.0f && ldc == n, "an empty reduction only zeroes a dense C");
    fill_device_zero(c, size_t(m * n) * dtype_size(c_t));
    return;
  }
  Lt& l = lt();
  Key key{int(t),       int(c_t), trans_a, trans_b,
          beta == 0.0f, m,        n,       k,
          lda,          ldb,      ldc,     std::min(alignment(a), std::min(alignment(b), alignment(c)))};
  std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.plans.find(key);
  if (it == l.plans.end()) it = l.plans.emplace(key, make_plan(l, key)).first;
  const Plan& p = it->second;
  lt_check(cublasLtMatmul(l.handle, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo, l.workspace.data(),
                          kWorkspaceBytes, nullptr),
           "Matmul");
}

}  // namespace zt::kernels::cuda
