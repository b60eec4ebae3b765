// Host values <-> device bytes of an F32 or BF16 tensor for the CUDA lifecycle targets (core's Tensor does the
// rounding and widening).
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/tensor.hpp"

namespace replayssm::conformance {

inline std::vector<std::uint8_t> encode_values(DType t, const std::vector<float>& x) {
  return Tensor::from_f32(t, {static_cast<std::int64_t>(x.size())}, x).data;
}
inline std::vector<float> decode_values(DType t, const std::vector<std::uint8_t>& b) {
  Tensor x;
  x.dtype = t;
  x.shape = {static_cast<std::int64_t>(b.size() / dtype_size(t))};
  x.data = b;
  return x.to_f32();
}

}  // namespace replayssm::conformance
