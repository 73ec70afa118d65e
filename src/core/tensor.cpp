// tensor.cpp: dtype names and the fp16 conversion (see tensor.h).
#include "core/tensor.h"

#include <cmath>

namespace zt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    case DType::i8:
      return "int8";
    case DType::u8:
      return "uint8";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  return "?";
}

namespace {
constexpr std::pair<DType, const char*> kStNames[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::bf16, "BF16"},
                                                      {DType::f16, "F16"}, {DType::i8, "I8"},   {DType::u8, "U8"},
                                                      {DType::i32, "I32"}, {DType::i64, "I64"}};
}

const char* dtype_st_name(DType t) {
  for (auto& [d, n] : kStNames)
    if (d == t) return n;
  return "?";
}

bool dtype_from_st_name(const std::string& name, DType* t) {
  for (auto& [d, n] : kStNames)
    if (name == n) {
      *t = d;
      return true;
    }
  return false;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                                 // below 2^-14: fp16 subnormal (or zero)
    // value / 2^-24 rounded to nearest even gives the subnormal's mantissa.
    const float scaled = std::nearbyint(std::ldexp(std::fabs(f), 24));
    return uint16_t(sign | uint16_t(scaled));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t r = abs - ((127u - 15u) << 23);
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | uint16_t(r >> 13));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (rank == 1 ? ",)" : ")");
}

}  // namespace zt
