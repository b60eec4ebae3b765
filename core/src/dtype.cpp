#include "replayssm/dtype.hpp"

#include <array>
#include <cmath>

#include "replayssm/error.hpp"

namespace replayssm {

namespace {
struct Info {
  DType t;
  std::string_view name;
  std::size_t size;
  bool is_float;
};
constexpr std::array<Info, 13> kInfo{{
    {DType::BOOL, "BOOL", 1, false}, {DType::U8, "U8", 1, false},     {DType::I8, "I8", 1, false},
    {DType::I16, "I16", 2, false},   {DType::U16, "U16", 2, false},   {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},  {DType::I32, "I32", 4, false},   {DType::U32, "U32", 4, false},
    {DType::F32, "F32", 4, true},    {DType::I64, "I64", 8, false},   {DType::U64, "U64", 8, false},
    {DType::F64, "F64", 8, true},
}};
const Info& info(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i;
  fail("dtype", "invalid DType value ", static_cast<int>(t));
}
}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool is_float(DType t) { return info(t).is_float; }

DType parse_dtype(std::string_view name, const std::string& field) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.t;
  fail(field, "unknown or unsupported dtype '", std::string(name),
       "' (supported: BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64)");
}

std::uint16_t f16_bits_from_f32(float x) {
  const std::uint32_t u = f32_bits(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t exp = (u >> 23) & 0xffu;
  std::uint32_t man = u & 0x7fffffu;
  if (exp == 0xffu) return static_cast<std::uint16_t>(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign;  // underflow to signed zero (also rounds tiny values correctly: < half of min subnormal)
    man |= 0x800000u;          // implicit bit
    const int shift = 14 - e;  // 24-bit significand -> (11 - (1 - e)) bits
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rem = man & ((1u << shift) - 1u);
    std::uint32_t r = man >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = (static_cast<std::uint32_t>(e) << 10) | (man >> 13);
  const std::uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: correct (to inf too)
  return static_cast<std::uint16_t>(sign | r);
}

float f32_from_f16_bits(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(man), -24);
    return sign ? -mag : mag;
  }
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  return f32_from_bits(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

float round_to(DType t, float x) {
  switch (t) {
    case DType::F32: return x;
    case DType::BF16: return round_bf16(x);
    case DType::F16: return f32_from_f16_bits(f16_bits_from_f32(x));
    default: fail("dtype", "cannot round a value to non-float dtype ", std::string(dtype_name(t)));
  }
}

}  // namespace replayssm
