// isa.h: the one run-time choice of which instruction set our own CPU kernels run on
// (docs/kernels.md#dispatch). The build targets a baseline (x86-64-v3: AVX2 + FMA + F16C;
// armv8-a on aarch64) and every SIMD kernel is also compiled for the wider targets
// through Google Highway's foreach_target; each public op (kernels/*.h) dispatches to the
// best compiled target the running CPU has, or to the one forced here. The AVX512-BF16
// attention kernel (vdpbf16ps, which Highway 1.0.3 does not expose) is one more level,
// "avx512_bf16", on top of Highway's AVX-512 target.
// oneDNN chooses its own GEMM kernels; isa_select() caps it at the same level when the
// user forces one (ONEDNN_MAX_CPU_ISA, read by oneDNN itself, caps it further).
// Not here: reading the environment (apps/ passes ZT_ISA in), the device seam (CPU/GPU).
#pragma once
#include <string>
#include <vector>

namespace zt::kernels {

// Names of the levels this CPU can run, best first, e.g. {"avx512_bf16", "avx512", "avx2"}.
std::vector<std::string> isa_available();
// Every level name ztrain knows on this architecture (for error messages).
std::vector<std::string> isa_known();
// Chooses the level: "" or "auto" = the best available. Throws zt::Error naming the choices
// for an unknown name or a level this CPU lacks.
void isa_select(const std::string& name);
// The level in force (the best available until isa_select says otherwise).
std::string isa_current();
// True when the AVX512-BF16 attention kernel may run (level avx512_bf16).
bool isa_bf16_dot();
// oneDNN's GEMM ISA in force, e.g. "avx2", "avx512_core_bf16", "avx512_core_amx".
std::string gemm_isa();
// True when oneDNN can run bf16 matmuls here (AVX-512 and up on x86); otherwise
// gemm_typed widens bf16 operands to fp32 and runs sgemm.
bool gemm_has_bf16();
// The CPU's model name ("AMD EPYC 9R14", "Neoverse-V2"), from /proc/cpuinfo; "unknown" if none.
std::string cpu_model_name();

// Runs f once per available level (best first) with that level selected, then restores the
// previous one: the kernel tests run every compiled path the CPU has.
template <class F>
void for_each_isa(F&& f) {
  const std::string saved = isa_current();
  for (const std::string& name : isa_available()) {
    isa_select(name);
    f(name);
  }
  isa_select(saved);
}

}  // namespace zt::kernels
