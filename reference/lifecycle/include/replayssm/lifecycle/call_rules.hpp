// replayssm/lifecycle/call_rules.hpp — what one call of a step may change, the one definition of the checks made
// after every target call: the judge applies it after `step` and after `commit` of every campaign case
// (judge.cpp), and the trace recorder writes it into every trace (recording_target.cpp), whose replay applies
// the recorded sets (trace_replay.cpp).
//
// After `step`: the pool may change only in the step's write set (every real row's read slot and write slot,
// and under the pad_slot convention the pad slot); the gaps after slots never; every resident request outside
// the step's in-flight set (the read slots of its verify rows) has its committed state as the oracle's — its
// prefill chunks committed, nothing else.
// After `commit`: the pool may change only in the step's write set, with the kept slots (CommitKept: the read and
// write slot of a verify row whose accepted n is 0, and the read slot of an out-of-place commit) bitwise as they
// were before the step; every resident request's committed state as the oracle's.
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
// The slots a commit must leave bitwise as before its step, by rule.
struct CommitKept {
  std::vector<std::int32_t> at_zero;    // read and write slot of every verify row with n = 0: nothing is written
  std::vector<std::int32_t> read_only;  // the read slot of every out-of-place verify row, whatever its n
  std::vector<std::int32_t> all() const;  // both, no repeats (what a trace records as `kept`)
};
// rows: the commit's rows in canonical form, accepted counts set.
CommitKept commit_kept(const std::vector<TargetRow>& canonical);

}  // namespace replayssm::ref
