// replayssm/reference/inputs.hpp — seeded random inputs, parameters and states for tests and fixtures.
//
// Every value comes from replayssm::Rng (SplitMix64) through written mappings, so the same seed gives the
// same bits on every platform. Inputs are rounded to cfg.act_dtype (they are what a model would hand a
// kernel); states to cfg.state_dtype.
//
// Distributions (chosen so that decays range from near-identity to strong, and every term matters):
//   q, k, v, a, b : normalish (Irwin-Hall, unit variance, |x| <= 3.47)
//   A_log         : U[0, 2.5)          -> exp(A_log) in [1, 12.2)
//   dt_bias       : U[-5, -1)          -> softplus(a + dt_bias) mostly in [0.005, 1]
//   state         : 0.5 * normalish
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/reference/gdn.hpp"

namespace replayssm::ref {

SequenceInputs random_inputs(const ModelConfig& cfg, int T, std::uint64_t seed);
LayerParams random_params(const ModelConfig& cfg, std::uint64_t seed);
std::vector<float> random_state(const ModelConfig& cfg, std::uint64_t seed);

template <class R>
std::vector<R> widen(const std::vector<float>& x) {
  return std::vector<R>(x.begin(), x.end());
}

}  // namespace replayssm::ref
