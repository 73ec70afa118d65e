// fast_math.h: branch-free exp/tanh that the compiler vectorizes inside loops (a call
// to libm's expf would not be). Relative error about 2e-7 over the range used by
// softmax and GELU; inputs below -87 flush to 0 as softmax wants.
#pragma once
#include <bit>
#include <cstdint>

namespace zt::kernels {

inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2/2.
  // Round to nearest by the 1.5*2^23 trick (vectorizes, unlike a call to roundf).
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  float y = p * scale;
  return x <= -87.0f ? 0.0f : y;
}

inline float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1), accurate to ~1e-7 absolute.
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

}  // namespace zt::kernels
