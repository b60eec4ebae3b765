// replayssm/lifecycle/call_rules.hpp — what one call of a step may change, the one definition of the checks made
// after every target call: the judge applies it after `step` and after `commit` of every campaign case
// (judge.cpp), and the trace recorder writes it into every trace (recording_target.cpp), whose replay applies
// the recorded sets (trace_replay.cpp).
//
// After `step`: the pool may change only in the step's write set (every real row's read slot and write slot,
// and under the pad_slot convention the pad slot); the gaps after slots never; every resident request outside
// the step's in-flight set (the read slots of its verify rows) has its committed state as the oracle's — its
// prefill chunks committed, nothing else.
// After `commit`: the pool may change only in the step's write set, with the slots of `kept` (a verify row whose
// accepted n is 0, and the read slot of an out-of-place commit) bitwise as they were before the step; every
// resident request's committed state as the oracle's.
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

struct StepWrites {
  std::vector<std::int32_t> written;    // slots the step (and its commit) may write, in row order, no repeats
  std::vector<std::int32_t> in_flight;  // read slots of verify rows: their committed state is judged after commit
};
// rows: the step's rows in canonical form (canonical_rows: PAD and graph tail rows carry kPadSlot).
StepWrites step_writes(const std::vector<TargetRow>& canonical, const EngineSetup& s);
// rows: the commit's rows in canonical form, accepted counts set. The read slots that must be bitwise as before
// the step: n = 0, or committed out of place.
std::vector<std::int32_t> commit_kept(const std::vector<TargetRow>& canonical);

}  // namespace replayssm::ref
