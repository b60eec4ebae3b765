#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"
#include "replayssm/tensor.hpp"

using namespace replayssm;

// Exhaustive-by-construction oracle for bf16 RNE: the two neighbouring bf16 values around x, pick the closer
// one, ties to the even mantissa. Written independently of the bit trick under test.
static float bf16_oracle(float x) {
  const std::uint32_t u = f32_bits(x);
  const float lo = f32_from_bits(u & 0xffff0000u);
  const float hi = f32_from_bits((u & 0xffff0000u) + 0x10000u);  // next bf16 away from zero
  const double dlo = std::fabs(static_cast<double>(x) - lo), dhi = std::fabs(static_cast<double>(hi) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return ((f32_bits(lo) >> 16) & 1u) ? hi : lo;
}

TEST(Bf16, HandCheckedValues) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd mantissa) and 1+2^-6 (even) -> 1 + 2^-6.
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::infinity())));
  // The largest finite float rounds up to infinity in bf16 (RNE overflow), as in torch.
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::max())));
}

RC_GTEST_PROP(Bf16, RoundToNearestEvenMatchesOracle, (std::uint32_t bits)) {
  const float x = f32_from_bits(bits);
  RC_PRE(std::isfinite(x) && std::fabs(x) < 3.0e38f);
  RC_ASSERT(f32_bits(round_bf16(x)) == f32_bits(bf16_oracle(x)));
}

TEST(F16, HandCheckedValues) {
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(1.0f)), 1.0f);
  EXPECT_EQ(f16_bits_from_f32(65504.0f), 0x7bffu);
  EXPECT_EQ(f16_bits_from_f32(65520.0f), 0x7c00u);  // rounds to inf
  EXPECT_EQ(f16_bits_from_f32(0x1p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(f16_bits_from_f32(0x1p-25f), 0x0000u);  // tie -> even (zero)
  EXPECT_EQ(f16_bits_from_f32(0x1.8p-25f), 0x0001u);
  EXPECT_EQ(f16_bits_from_f32(-2.0f), 0xc000u);
}

RC_GTEST_PROP(F16, EveryHalfRoundTrips, (std::uint16_t h)) {
  RC_PRE((h & 0x7c00u) != 0x7c00u);  // finite halves
  RC_ASSERT(f16_bits_from_f32(f32_from_f16_bits(h)) == h);
}

TEST(DType, ParseNamesAndRejectUnknown) {
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  try {
    parse_dtype("F8_E4M3", "tensors.x.dtype");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "tensors.x.dtype");
  }
}

TEST(Tensor, RoundTripsThroughEveryFloatDtype) {
  const std::vector<float> v{1.0f, -0.5f, 3.140625f, 0.0f};
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    const Tensor x = Tensor::from_f32(t, {2, 2}, v);
    EXPECT_EQ(x.nbytes(), 4 * dtype_size(t));
    EXPECT_EQ(x.to_f32(), v) << dtype_name(t);
  }
  EXPECT_THROW(Tensor::from_f32(DType::F32, {3}, v), Error);
  EXPECT_THROW(Tensor::from_f32(DType::I32, {4}, v), Error);
}
