// convert.cpp: see convert.h. Written once with Highway and compiled for every target
// (kernels/isa.h): whole vectors in the hot loop, the last partial vector through the scalar
// references of core/tensor.h (the same rounding). OpenMP over large arrays (a 124M-parameter
// model's weights convert in a few milliseconds).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/convert.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <omp.h>

#include "core/error.h"
#include "kernels/convert.h"

HWY_BEFORE_NAMESPACE();
namespace zt::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kParallelMin = 1 << 16;  // below this, threads cost more than they save

const hn::ScalableTag<float> df;
const hn::RebindToUnsigned<decltype(df)> du32;
const hn::RebindToSigned<decltype(df)> di32;
const hn::Rebind<uint16_t, decltype(df)> du16;
const hn::Rebind<hwy::float16_t, decltype(df)> df16;

// fp32 -> bf16 bits, round to nearest even by integer arithmetic; NaN keeps a quiet NaN payload.
HWY_INLINE hn::Vec<decltype(du16)> cvt_bf16(hn::Vec<decltype(df)> v) {
  const auto u = hn::BitCast(du32, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du32, 1));
  auto r = hn::Add(u, hn::Add(lsb, hn::Set(du32, 0x7fff)));
  r = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), hn::Or(u, hn::Set(du32, 0x400000)), r);
  return hn::DemoteTo(du16, hn::BitCast(di32, hn::ShiftRight<16>(r)));
}
HWY_INLINE hn::Vec<decltype(df)> bf16_to_ps(hn::Vec<decltype(du16)> h) {
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, h)));
}

// f(i) for every whole vector at i; tail(i) for the rest. Called from inside a parallel loop
// (the LM head converts one row per iteration) it runs on the calling thread.
template <class F, class Tail>
void blocks(int64_t n, F f, Tail tail) {
  const int64_t N = int64_t(hn::Lanes(df)), nb = n / N;
#pragma omp parallel for schedule(static) if (n >= kParallelMin && !omp_in_parallel())
  for (int64_t b = 0; b < nb; ++b) f(b * N);
  for (int64_t i = nb * N; i < n; ++i) tail(i);
}

void to_lowp_impl(DType t, uint16_t* dst, const float* src, int64_t n) {
  if (t == DType::bf16)
    blocks(
        n, [&](int64_t i) { hn::StoreU(cvt_bf16(hn::LoadU(df, src + i)), du16, dst + i); },
        [&](int64_t i) { dst[i] = f32_to_bf16(src[i]); });
  else
    blocks(
        n,
        [&](int64_t i) {
          hn::StoreU(hn::DemoteTo(df16, hn::LoadU(df, src + i)), df16, reinterpret_cast<hwy::float16_t*>(dst + i));
        },
        [&](int64_t i) { dst[i] = f32_to_f16(src[i]); });
}

void to_bf16_keep_impl(uint16_t* dst, float* src, int64_t n) {
  blocks(
      n,
      [&](int64_t i) {
        const auto h = cvt_bf16(hn::LoadU(df, src + i));
        hn::StoreU(h, du16, dst + i);
        hn::StoreU(bf16_to_ps(h), df, src + i);
      },
      [&](int64_t i) { src[i] = bf16_to_f32(dst[i] = f32_to_bf16(src[i])); });
}

void from_lowp_impl(DType t, float* dst, const uint16_t* src, int64_t n) {
  if (t == DType::bf16)
    blocks(
        n, [&](int64_t i) { hn::StoreU(bf16_to_ps(hn::LoadU(du16, src + i)), df, dst + i); },
        [&](int64_t i) { dst[i] = bf16_to_f32(src[i]); });
  else
    blocks(
        n,
        [&](int64_t i) {
          hn::StoreU(hn::PromoteTo(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(src + i))), df, dst + i);
        },
        [&](int64_t i) { dst[i] = f16_to_f32(src[i]); });
}

void round_to_f16_impl(float* dst, const float* src, int64_t n) {
  blocks(
      n, [&](int64_t i) { hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(df16, hn::LoadU(df, src + i))), df, dst + i); },
      [&](int64_t i) { dst[i] = f16_to_f32(f32_to_f16(src[i])); });
}

}  // namespace HWY_NAMESPACE
}  // namespace zt::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zt::kernels {
HWY_EXPORT(to_lowp_impl);
HWY_EXPORT(to_bf16_keep_impl);
HWY_EXPORT(from_lowp_impl);
HWY_EXPORT(round_to_f16_impl);

void to_lowp(DType t, uint16_t* dst, const float* src, int64_t n) {
  ZT_ASSERT(t == DType::bf16 || t == DType::f16, "to_lowp: ", dtype_name(t), " is not a 16-bit float type");
  HWY_DYNAMIC_DISPATCH(to_lowp_impl)(t, dst, src, n);
}
void to_bf16_keep(uint16_t* dst, float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(to_bf16_keep_impl)(dst, src, n); }
void from_lowp(DType t, float* dst, const uint16_t* src, int64_t n) {
  ZT_ASSERT(t == DType::bf16 || t == DType::f16, "from_lowp: ", dtype_name(t), " is not a 16-bit float type");
  HWY_DYNAMIC_DISPATCH(from_lowp_impl)(t, dst, src, n);
}
void round_to_f16(float* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(round_to_f16_impl)(dst, src, n); }
}  // namespace zt::kernels
#endif
