// tensor.h: the one element-type enum of ztrain (DType), its conversions (bf16 / fp16 <->
// fp32), and TensorView: a typed, shaped window on memory somebody else owns (a Buffer, an
// arena slice, an mmapped file). Every place that names a dtype (communicator,
// safetensors, checkpoints, kernels' callers) uses this enum.
//
// Dimension glossary, used in shape comments everywhere: B batch, T sequence, C model
// width, NH heads, KVH key/value heads, HS head size, F ffn width, V vocab, L layers,
// N = B*T rows. Write shapes as `// (B, T, 3*C)`.
//
// It deliberately is not a tensor library: a view has no operators, owns nothing and never
// allocates. Kernels take raw pointers in their inner loops; layers check a view's dtype
// and shape once at their boundary and pass its pointer on.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace zt {

enum class DType : uint8_t { f32, f64, bf16, f16, i8, u8, i32, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::i8:
    case DType::u8:
      return 1;
  }
  return 1;
}

// PyTorch's names ("float32", "bfloat16", ...), as logs and config.json's torch_dtype use them.
const char* dtype_name(DType t);
// safetensors' names ("F32", "BF16", "F16", "I8", "U8", "I32", "I64", "F64").
const char* dtype_st_name(DType t);
// The DType of a safetensors name; false if the name is not one of the above.
bool dtype_from_st_name(const std::string& name, DType* t);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::i8;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// bf16: round to nearest even (NaN stays NaN); fp16: IEEE binary16, round to nearest even,
// overflow to infinity, subnormals kept. These scalar forms are the references of the
// vectorized kernels (kernels/convert.h).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Up to 4 dimensions: every tensor of a dense transformer fits (B, T, NH, HS at most).
struct Shape {
  static constexpr int kMaxDims = 4;
  std::array<int64_t, kMaxDims> d{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    ZT_ASSERT(dims.size() <= size_t(kMaxDims), "a shape has at most 4 dimensions");
    for (int64_t x : dims) d[rank++] = x;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  std::string str() const;  // "(2, 3)"
};

// A typed window on memory. Views made here are contiguous (row-major strides); strides are
// kept so that a column slice of a weight (tensor parallelism) can be described later.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Shape strides;  // in elements

  TensorView() = default;
  TensorView(void* p, DType t, Shape s) : data(p), dtype(t), shape(s), strides(contiguous_strides(s)) {}
  template <class T>
  static TensorView of(T* p, Shape s) {
    return TensorView(const_cast<std::remove_const_t<T>*>(p), dtype_of<std::remove_const_t<T>>(), s);
  }

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  explicit operator bool() const { return data != nullptr; }
  // The pointer, after checking that the view holds T (a mismatch is our bug, not the user's).
  // uint16_t reads the bits of either 16-bit float type (bf16, f16).
  template <class T>
  T* as() const {
    if constexpr (std::is_same_v<std::remove_const_t<T>, uint16_t>)
      ZT_ASSERT(data == nullptr || dtype == DType::bf16 || dtype == DType::f16, "view holds ", dtype_name(dtype));
    else
      ZT_ASSERT(data == nullptr || dtype == dtype_of<std::remove_const_t<T>>(), "view holds ", dtype_name(dtype));
    return static_cast<T*>(data);
  }
  // A contiguous sub-view: `shape` elements starting `offset` elements in (row-major order).
  TensorView sub(int64_t offset, Shape s) const {
    ZT_ASSERT(offset >= 0 && offset + s.numel() <= numel(), "sub-view out of range");
    return TensorView(data ? static_cast<char*>(data) + size_t(offset) * dtype_size(dtype) : nullptr, dtype, s);
  }
  static Shape contiguous_strides(const Shape& s) {
    Shape st;
    st.rank = s.rank;
    int64_t acc = 1;
    for (int i = s.rank - 1; i >= 0; --i) {
      st.d[i] = acc;
      acc *= s.d[i];
    }
    return st;
  }
};

}  // namespace zt
