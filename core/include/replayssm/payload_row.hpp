// replayssm/payload_row.hpp — the layout of one raw replay payload row, [k | v | a | b] (see PayloadGeometry
// in replayssm/step.hpp). Dependency-free and constexpr: the one formula of the layout, evaluated by the host
// (PayloadGeometry::row_layout) and by the CUDA kernels on the device (from the configuration they hold).
#pragma once

#include <cstdint>

#include "replayssm/host_device.hpp"

namespace replayssm {

// Element offsets inside one payload row (activation dtype elements).
struct PayloadRowLayout {
  std::int64_t k = 0;      // k [H, K] at element 0 of the row
  std::int64_t v = 0;      // v [HV, V] at H*K
  std::int64_t a = 0;      // a [HV, a_width] at H*K + HV*V
  std::int64_t b = 0;      // b [HV] at H*K + HV*V + HV*a_width
  std::int64_t width = 0;  // elements per row: H*K + HV*V + HV*a_width + HV
};

// The layout for a configuration d with H key heads of K, HV value heads of V and d.a_width() gate elements per
// value head (ModelConfig, or the kernels' DevCfg); products in 64 bits. A template reading d in place rather
// than a function of five integers: the kernels then compile exactly as with the formula written out inline.
template <class Config>
REPLAYSSM_HOST_DEVICE constexpr PayloadRowLayout payload_row_layout(const Config& d) {
  PayloadRowLayout l;
  l.k = 0;
  l.v = l.k + static_cast<std::int64_t>(d.H) * d.K;
  l.a = l.v + static_cast<std::int64_t>(d.HV) * d.V;
  l.b = l.a + static_cast<std::int64_t>(d.HV) * d.a_width();
  l.width = l.b + d.HV;
  return l;
}

}  // namespace replayssm
