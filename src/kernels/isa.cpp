// isa.cpp: see isa.h. The level is a Highway target mask (what hwy::SupportedTargets()
// reports, restricted when a lower level is forced) plus the AVX512-BF16 switch.
#include "kernels/isa.h"

#include <hwy/highway.h>
#include <hwy/targets.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <fstream>
#include <mutex>

#include "core/error.h"

namespace zt::kernels {
namespace {

struct Level {
  const char* name;
  int64_t target;  // the Highway target that runs our kernels at this level
  bool bf16_dot;   // the hand-written vdpbf16ps attention on top of it
};

// Best first. Only the targets this build compiled (HWY_TARGETS) are listed.
std::vector<Level> compiled_levels() {
  std::vector<Level> v;
#if HWY_ARCH_X86
  if (HWY_TARGETS & HWY_AVX3) v.push_back({"avx512_bf16", HWY_AVX3, true});
  if (HWY_TARGETS & HWY_AVX3) v.push_back({"avx512", HWY_AVX3, false});
  if (HWY_TARGETS & HWY_AVX2) v.push_back({"avx2", HWY_AVX2, false});
#elif HWY_ARCH_ARM
  if (HWY_TARGETS & HWY_SVE2) v.push_back({"sve2", HWY_SVE2, false});
  if (HWY_TARGETS & HWY_SVE) v.push_back({"sve", HWY_SVE, false});
  if (HWY_TARGETS & HWY_NEON) v.push_back({"neon", HWY_NEON, false});
#endif
  if (HWY_TARGETS & HWY_EMU128) v.push_back({"emu128", HWY_EMU128, false});
  if (HWY_TARGETS & HWY_SCALAR) v.push_back({"scalar", HWY_SCALAR, false});
  return v;
}

bool cpu_has_avx512_bf16() {
#if HWY_ARCH_X86 && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

struct State {
  std::mutex mu;
  int64_t hw_targets = 0;  // what the CPU supports (before any forcing)
  std::string current;
  std::atomic<bool> bf16_dot{false};
  bool onednn_capped = false;
};

State& state() {
  static State s;
  return s;
}

bool level_supported(const Level& l, int64_t hw) {
  return (hw & l.target) != 0 && (!l.bf16_dot || cpu_has_avx512_bf16());
}

// Caps oneDNN at the forced level the first time a lower one is forced (oneDNN takes the cap only
// before its first kernel is generated; later calls are refused by oneDNN and ignored here).
void cap_onednn(const Level& l, State& s) {
#if HWY_ARCH_X86
  if (s.onednn_capped || l.target != HWY_AVX2) return;
  s.onednn_capped = dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) == dnnl_success;
#else
  (void)l, (void)s;
#endif
}

void init_locked(State& s) {
  if (!s.current.empty()) return;
  hwy::SetSupportedTargetsForTest(0);
  s.hw_targets = hwy::SupportedTargets();
  for (const Level& l : compiled_levels())
    if (level_supported(l, s.hw_targets)) {
      s.current = l.name;
      s.bf16_dot = l.bf16_dot;
      return;
    }
  ZT_ASSERT(false, "no compiled kernel target runs on this CPU");
}

std::vector<std::string> available_locked(const State& s) {
  std::vector<std::string> r;
  for (const Level& l : compiled_levels())
    if (level_supported(l, s.hw_targets)) r.push_back(l.name);
  return r;
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& x : v) r += (r.empty() ? "" : ", ") + x;
  return r;
}

}  // namespace

std::vector<std::string> isa_available() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  init_locked(s);
  return available_locked(s);
}

std::vector<std::string> isa_known() {
  std::vector<std::string> r;
  for (const Level& l : compiled_levels()) r.push_back(l.name);
  return r;
}

void isa_select(const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  init_locked(s);
  const std::vector<Level> levels = compiled_levels();
  const std::string want = name.empty() || name == "auto" ? "" : name;
  for (const Level& l : levels) {
    if (!want.empty() && want != l.name) continue;
    if (!level_supported(l, s.hw_targets)) {
      ZT_CHECK(want.empty(), "ZT_ISA=", want, " asks for instructions this CPU (", cpu_model_name(),
               ") does not have; unset ZT_ISA or choose one it has: ", join(available_locked(s)));
      continue;
    }
    // Highway picks the best target of the mask: keep this level's target and those below it.
    const int64_t mask = s.hw_targets & ~(l.target - 1);
    hwy::SetSupportedTargetsForTest(want.empty() ? 0 : mask);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    s.current = l.name;
    s.bf16_dot = l.bf16_dot;
    if (!want.empty()) cap_onednn(l, s);
    return;
  }
  ZT_CHECK(false, "unknown ZT_ISA ", quote(name), "; choose auto or one of: ", join(isa_known()));
}

std::string isa_current() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  init_locked(s);
  return s.current;
}

bool isa_bf16_dot() {
  [[maybe_unused]] static const bool initialised = (isa_current(), true);  // once, thread-safe
  return state().bf16_dot;  // atomic: read on every bf16 attention call without the lock
}

std::string gemm_isa() {
#if HWY_ARCH_X86
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
#elif HWY_ARCH_ARM
  return "aarch64";
#else
  return "generic";
#endif
}

bool gemm_has_bf16() {
#if HWY_ARCH_X86
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core || isa == dnnl_cpu_isa_avx512_core_vnni ||
         isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
#else
  return false;  // oneDNN 2.6's bf16 matmul needs AVX-512 (x86) or SVE builds we do not assume
#endif
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  auto trim = [](const std::string& t) {
    const auto b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  // x86: "model name"; aarch64 kernels print no model name, so fall back to the part number.
  std::string line, part;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), val = trim(line.substr(colon + 1));
    if (key == "model name" && !val.empty()) return val;
    if (key == "CPU part" && part.empty()) part = "arm part " + val;
  }
  return part.empty() ? "unknown" : part;
}

}  // namespace zt::kernels
