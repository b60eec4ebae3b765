#include "replayssm/tensor.hpp"

#include <cstring>
#include <limits>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm {

std::int64_t shape_numel(const Shape& shape, const std::string& field) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t d = shape[i];
    require(d >= 0, field, "dimension ", i, " is negative (", d, ")");
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) fail(field, "element count overflows");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(static_cast<std::size_t>(shape_numel(t.shape)) * dtype_size(dtype), 0);
  return t;
}

namespace {
template <class T>
void put(std::vector<std::uint8_t>& d, std::size_t i, T v) {
  std::memcpy(d.data() + i * sizeof(T), &v, sizeof(T));
}
template <class T>
T get(const std::vector<std::uint8_t>& d, std::size_t i) {
  T v;
  std::memcpy(&v, d.data() + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace

Tensor Tensor::from_f32(DType dtype, Shape shape, const std::vector<float>& values) {
  Tensor t = zeros(dtype, std::move(shape));
  require(static_cast<std::int64_t>(values.size()) == t.numel(), "values", "got ", values.size(),
          " values for shape ", shape_str(t.shape));
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::F32: put<float>(t.data, i, values[i]); break;
      case DType::F64: put<double>(t.data, i, values[i]); break;
      case DType::BF16: put<std::uint16_t>(t.data, i, bf16_bits_from_f32(values[i])); break;
      case DType::F16: put<std::uint16_t>(t.data, i, f16_bits_from_f32(values[i])); break;
      default: fail("dtype", "from_f32 needs a float dtype, got ", std::string(dtype_name(dtype)));
    }
  }
  return t;
}

Tensor Tensor::from_f64(DType dtype, Shape shape, const std::vector<double>& values) {
  if (dtype == DType::F64) {
    Tensor t = zeros(dtype, std::move(shape));
    require(static_cast<std::int64_t>(values.size()) == t.numel(), "values", "got ", values.size(),
            " values for shape ", shape_str(t.shape));
    for (std::size_t i = 0; i < values.size(); ++i) put<double>(t.data, i, values[i]);
    return t;
  }
  std::vector<float> f(values.begin(), values.end());
  return from_f32(dtype, std::move(shape), f);
}

Tensor Tensor::from_i32(Shape shape, const std::vector<std::int32_t>& values) {
  Tensor t = zeros(DType::I32, std::move(shape));
  require(static_cast<std::int64_t>(values.size()) == t.numel(), "values", "got ", values.size(),
          " values for shape ", shape_str(t.shape));
  for (std::size_t i = 0; i < values.size(); ++i) put<std::int32_t>(t.data, i, values[i]);
  return t;
}

Tensor Tensor::from_i64(Shape shape, const std::vector<std::int64_t>& values) {
  Tensor t = zeros(DType::I64, std::move(shape));
  require(static_cast<std::int64_t>(values.size()) == t.numel(), "values", "got ", values.size(),
          " values for shape ", shape_str(t.shape));
  for (std::size_t i = 0; i < values.size(); ++i) put<std::int64_t>(t.data, i, values[i]);
  return t;
}

std::vector<double> Tensor::to_f64() const {
  const std::size_t n = static_cast<std::size_t>(numel());
  require(data.size() == n * dtype_size(dtype), "data", "byte size ", data.size(), " does not match shape ",
          shape_str(shape), " of ", std::string(dtype_name(dtype)));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32: out[i] = get<float>(data, i); break;
      case DType::F64: out[i] = get<double>(data, i); break;
      case DType::BF16: out[i] = f32_from_bf16_bits(get<std::uint16_t>(data, i)); break;
      case DType::F16: out[i] = f32_from_f16_bits(get<std::uint16_t>(data, i)); break;
      default: fail("dtype", "expected a float tensor, got ", std::string(dtype_name(dtype)));
    }
  }
  return out;
}

std::vector<float> Tensor::to_f32() const {
  const auto d = to_f64();
  return std::vector<float>(d.begin(), d.end());
}

std::vector<std::int64_t> Tensor::to_i64() const {
  const std::size_t n = static_cast<std::size_t>(numel());
  require(data.size() == n * dtype_size(dtype), "data", "byte size ", data.size(), " does not match shape ",
          shape_str(shape), " of ", std::string(dtype_name(dtype)));
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::BOOL:
      case DType::U8: out[i] = get<std::uint8_t>(data, i); break;
      case DType::I8: out[i] = get<std::int8_t>(data, i); break;
      case DType::I16: out[i] = get<std::int16_t>(data, i); break;
      case DType::U16: out[i] = get<std::uint16_t>(data, i); break;
      case DType::I32: out[i] = get<std::int32_t>(data, i); break;
      case DType::U32: out[i] = get<std::uint32_t>(data, i); break;
      case DType::I64: out[i] = get<std::int64_t>(data, i); break;
      case DType::U64: {
        const auto v = get<std::uint64_t>(data, i);
        require(v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), "data",
                "U64 value does not fit in int64");
        out[i] = static_cast<std::int64_t>(v);
        break;
      }
      default: fail("dtype", "expected an integer tensor, got ", std::string(dtype_name(dtype)));
    }
  }
  return out;
}

void Tensor::expect(DType want_dtype, const Shape& want_shape, const std::string& field) const {
  require(dtype == want_dtype, field, "dtype is ", std::string(dtype_name(dtype)), ", expected ",
          std::string(dtype_name(want_dtype)));
  require(shape == want_shape, field, "shape is ", shape_str(shape), ", expected ", shape_str(want_shape));
}

}  // namespace replayssm
