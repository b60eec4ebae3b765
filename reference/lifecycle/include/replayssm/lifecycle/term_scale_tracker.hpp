// replayssm/lifecycle/term_scale_tracker.hpp — the term scales of a lifecycle's compared values (term_scales.hpp,
// docs/numerics.md "Term scales"), kept per slot and layer by the judge (judge.cpp) and by a trace's replay
// (trace_replay.cpp) alike, so both judge a tolerance-based implementation by the same bounds:
//   * a step's outputs: per row, from the state the row reads (its committed state before the step; zeros for a
//     fresh prefill) over the row's tokens;
//   * a committed state: per head, the running maximum of the state's own terms over every token committed into
//     the slot since its last fresh start (errors made while the state was large persist, damped at most by the
//     decays), carried by a copy and by an out-of-place commit to the slot the request moves to.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "replayssm/lifecycle/target.hpp"
#include "replayssm/recurrence/term_scales.hpp"

namespace replayssm::ref {

class TermScaleTracker {
 public:
  void reset(const EngineSetup& s);
  // A step's rows (canonical: PAD and graph tail rows carry kPadSlot) and packed tokens; `before(layer, slot)`
  // gives a real row's read slot's committed state before the step. Returns per layer the term scale of every
  // output element [total_tokens * HV * V] (PAD rows: 0). Prefill rows are committed into their slot here.
  std::vector<std::vector<double>> step(const std::vector<TargetRow>& rows, const std::vector<SequenceInputs>& inputs,
                                        const std::function<std::vector<float>(std::int32_t, std::int32_t)>& before);
  // The commit of the last step's verify rows (accepted counts set; canonical).
  void commit(const std::vector<TargetRow>& rows);
  void copy(std::int32_t src, std::int32_t dst);
  // Per-element scales of the committed state of `slot` in `layer` ([HV * K * V]).
  std::vector<double> state_scales(std::int32_t layer, std::int32_t slot) const;

 private:
  EngineSetup s_;
  std::map<std::int32_t, std::vector<std::vector<double>>> slot_;  // slot -> [layer][hv] running max
  struct Pending {
    std::int32_t slot = kPadSlot, write_slot = kPadSlot;
    std::vector<TermScales> layers;  // per layer, the row's window
  };
  std::vector<Pending> pending_;     // one per row of the last step (verify rows only)
  std::vector<std::vector<double>>& at(std::int32_t slot);
  void absorb(std::vector<std::vector<double>>& into, const std::vector<TermScales>& w, int n) const;
};

}  // namespace replayssm::ref
