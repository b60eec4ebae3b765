// replayssm/recurrence/inputs.hpp — seeded random inputs, parameters and states for tests and fixtures.
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
//
// Realistic gates (GateRange::Realistic), the ranges of trained models instead of the benign ones above:
//   A_log         : U[0, ln 16)        -> exp(A_log) in [1, 16) (trained GDN/KDA layers reach ~ln 16)
//   dt_bias       : U[-5, 2)
//   a             : 4 * normalish      -> |a| <= 13.9: softplus(a + dt_bias) from ~1e-8 (near-identity
//                                         tokens) to ~16, so a GDN decay exp(g) reaches exp(-256), i.e. 0 in
//                                         binary32, and per-token decays of 1e-10 and below are common
//   b             : per (token, value head) one of +20 (beta = sigmoid(20) = 1 in binary32: saturated),
//                   -20 (beta ~ 2e-9: near zero) or normalish, each with probability 1/3
//   q, k, v       : as above
// Checkpoint magnitudes (GateRange::Checkpoint): the realistic gates, and q, k, v at the sizes real checkpoints
// hand a kernel (a decode fixture of a real Qwen3.5 checkpoint has outputs of scale 3e-4), from a third stream
// that rescales each row of the draws above (its direction kept), rounded to act_dtype:
//   q, k rows     : norm m * 10^e before normalisation, m uniform in [1, 10) and the decade e uniform in [-3, 0]:
//                   1e-3 .. 10 (e in [-3, -1], 1e-3 .. 1, with L2Norm::None, whose inputs are normalised
//                   upstream); sum(x^2) reaches 1e-6, the size of the l2norm's eps, so where eps sits shows
//   v rows        : norm m * 10^e x sqrt(V), e in [-3, -1] (1e-3 .. 1 of the unit-variance row's norm): small states and
//                   outputs, judged at their own size (term_scales.hpp)
// Every mix draws q, k and v from the same stream, so benign and realistic differ only in the gates, and
// checkpoint only in the gates and the rows' sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/gdn.hpp"

namespace replayssm::ref {

// Which ranges the gate inputs (a, b) and parameters (A_log, dt_bias) are drawn from (see above).
enum class GateRange : std::uint8_t { Benign, Realistic, Checkpoint };
std::string to_string(GateRange g);  // "benign", "realistic", "checkpoint"
GateRange parse_gate_range(const std::string& s, const std::string& field = "gates");  // Error(field) otherwise

SequenceInputs random_inputs(const ModelConfig& cfg, int T, std::uint64_t seed, GateRange gates = GateRange::Benign);
LayerParams random_params(const ModelConfig& cfg, std::uint64_t seed, GateRange gates = GateRange::Benign);
std::vector<float> random_state(const ModelConfig& cfg, std::uint64_t seed);

template <class R>
std::vector<R> widen(const std::vector<float>& x) {
  return std::vector<R>(x.begin(), x.end());
}

}  // namespace replayssm::ref
