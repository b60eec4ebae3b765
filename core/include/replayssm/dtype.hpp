// replayssm/dtype.hpp — element types and exact rounding helpers (no CUDA headers needed).
//
// DType names follow the safetensors spelling (F32, BF16, ...). Rounding to bf16 is IEEE
// round-to-nearest-even on the upper 16 bits of the binary32 pattern, the same rounding as CUDA's
// __float2bfloat16 and torch's .to(torch.bfloat16); NaN stays NaN (quiet), infinities stay infinite.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace replayssm {

enum class DType : std::uint8_t { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

// Size of one element in bytes.
std::size_t dtype_size(DType t);
// Safetensors name ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; throws Error(field, ...) for an unknown or unsupported name.
DType parse_dtype(std::string_view name, const std::string& field = "dtype");
bool is_float(DType t);

inline std::uint32_t f32_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float f32_from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// binary32 -> bfloat16 bit pattern, round to nearest, ties to even.
inline std::uint16_t bf16_bits_from_f32(float x) {
  std::uint32_t u = f32_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<std::uint16_t>(u >> 16);
}
inline float f32_from_bf16_bits(std::uint16_t h) { return f32_from_bits(static_cast<std::uint32_t>(h) << 16); }

// Rounds x to the nearest bfloat16 value (RNE) and returns it as float.
inline float round_bf16(float x) { return f32_from_bf16_bits(bf16_bits_from_f32(x)); }

// binary32 <-> binary16 (IEEE half), round to nearest even, subnormals and overflow to inf handled.
std::uint16_t f16_bits_from_f32(float x);
float f32_from_f16_bits(std::uint16_t h);

// Rounds a float value to what a tensor of dtype t can hold (F32: identity, BF16/F16: RNE).
// Only float dtypes are accepted; throws Error("dtype") otherwise.
float round_to(DType t, float x);

}  // namespace replayssm
