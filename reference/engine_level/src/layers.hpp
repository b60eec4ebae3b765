// Per-layer token inputs of one request (one SequenceInputs per layer), shared by the project's engine-level
// engines (reference_engine.cpp, ring_engine.cpp): join, cut and an empty history.
#pragma once

#include <cstddef>
#include <vector>

#include "replayssm/lifecycle/engine.hpp"

namespace replayssm::ref::engine_level {

using Layers = std::vector<SequenceInputs>;  // one entry per layer

inline Layers concat(const ModelConfig& cfg, const Layers& x, const Layers& y) {
  Layers r(x.size());
  for (std::size_t l = 0; l < x.size(); ++l) r[l] = SequenceInputs::concat(cfg, x[l], y[l]);
  return r;
}
inline Layers slice(const ModelConfig& cfg, const Layers& x, int t0, int n) {
  Layers r;
  for (const auto& s : x) r.push_back(s.slice(cfg, t0, n));
  return r;
}
inline Layers empty_layers(const ModelConfig& cfg) {
  Layers v(static_cast<std::size_t>(cfg.num_layers));
  for (auto& x : v) x.validate(cfg);
  return v;
}

}  // namespace replayssm::ref::engine_level
