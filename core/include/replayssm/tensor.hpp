// replayssm/tensor.hpp — a small owning host tensor: dtype, row-major shape, little-endian bytes.
//
// This is the exchange type of fixtures and of the CLI: a dense, contiguous, row-major array exactly as
// safetensors stores it. Math code works on std::vector<float/double> views of it (to_f32/to_f64).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/dtype.hpp"

namespace replayssm {

using Shape = std::vector<std::int64_t>;

// Number of elements of a shape; throws Error(field) on a negative dimension or overflow.
std::int64_t shape_numel(const Shape& shape, const std::string& field = "shape");
std::string shape_str(const Shape& shape);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<std::uint8_t> data;  // numel * dtype_size bytes, little-endian, row-major

  std::int64_t numel() const { return shape_numel(shape); }
  std::size_t nbytes() const { return data.size(); }

  // Zero-filled tensor.
  static Tensor zeros(DType dtype, Shape shape);
  // From float values: F32 stores as is, BF16/F16 round to nearest even, F64 widens exactly.
  // Throws Error("values") if values.size() != numel(shape).
  static Tensor from_f32(DType dtype, Shape shape, const std::vector<float>& values);
  // From double values: F64 exact; F32 rounds to nearest; BF16/F16 round via F32 (double rounding is
  // avoided for fixture data by generating values that are already representable).
  static Tensor from_f64(DType dtype, Shape shape, const std::vector<double>& values);
  static Tensor from_i32(Shape shape, const std::vector<std::int32_t>& values);
  static Tensor from_i64(Shape shape, const std::vector<std::int64_t>& values);

  // Widening reads. Float dtypes only for to_f32/to_f64 (F64 -> F32 rounds); integer dtypes for to_i64.
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  std::vector<std::int64_t> to_i64() const;

  // Throws Error(field) unless dtype and shape are as given.
  void expect(DType want_dtype, const Shape& want_shape, const std::string& field) const;
};

}  // namespace replayssm
