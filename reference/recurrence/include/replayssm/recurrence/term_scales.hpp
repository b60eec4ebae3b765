// replayssm/recurrence/term_scales.hpp — the magnitudes rounding errors are relative to (docs/numerics.md, "Term
// scales"): for every token of a window run from a state S0, per value head,
//   out[t * HV + hv]   = max over v of  sum_k |S_t[k, v]| * |qs_t[k]|      the absolute terms of the output's dot
//                        product (S_t the state after token t, qs_t the normalised, scaled query);
//   state[t * HV + hv] = max over k, v of |alpha_t S_{t-1}[k, v]|, |S_t[k, v] - alpha_t S_{t-1}[k, v]| (the rank-1
//                        update beta k d^T) and |S_t[k, v]|                  the state's own terms;
//   q_l1[t * HV + hv]  = sum_k |qs_t[k]|: what an error carried in the state (per element, relative to the state's
//                        terms) weighs in the output, so an output's full scale is out + q_l1 * (the state's scale).
// An implementation's rounding error in an element is a small multiple of u times these (a K-term dot product
// moves by at most about K u of the sum of its absolute terms), whatever the element's own size: a result that
// cancels to near zero is judged against its terms, a small tensor at its own size. Computed in binary64 with the
// recurrence's own token step (gdn.hpp).
#pragma once

#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/gdn.hpp"

namespace replayssm::ref {

struct TermScales {
  int T = 0, HV = 0;
  std::vector<double> out;    // [T * HV]
  std::vector<double> state;  // [T * HV]
  std::vector<double> q_l1;   // [T * HV]
};

// S0: cfg.state_elems() values in cfg.layout (empty: a zero state). Error("S0") for a wrong length.
TermScales term_scales(const ModelConfig& cfg, const LayerParams& p, const std::vector<float>& S0,
                       const SequenceInputs& in);

// Per-element scales of an output [T, HV, V] (each element its token's and head's out scale).
std::vector<double> output_element_scales(const ModelConfig& cfg, const TermScales& s);
// The state's scale per head after the first n tokens: the running maximum of `from` (the state's scale before
// the window, per head) and the window's state terms.
std::vector<double> running_state_scales(const TermScales& s, std::vector<double> from, int n);
// The full output scales: each token's out + q_l1 * (the state's running scale up to that token, from `from`),
// in place; what an output's error is relative to once the state's own error is counted.
void add_state_error(TermScales& s, std::vector<double> from);
// The scale of a given state per head: max |S| over the head's elements (a window's starting point).
std::vector<double> state_magnitude(const ModelConfig& cfg, const std::vector<float>& S);
// Per-element scales of a state [HV, ...] from one scale per head.
std::vector<double> state_element_scales(const ModelConfig& cfg, const std::vector<double>& per_head);

}  // namespace replayssm::ref
