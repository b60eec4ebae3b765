// The conv windows of a reference target (conv_component.hpp): per layer a pool of num_slots windows
// ([C, W-1] each, a 4-element gap after every one, poisoned at setup), run by the conv reference (conv.hpp:
// conv_update, kernel-faithful binary32) in one of the two designs of conv.hpp — full-state (the window after
// every draft token kept, the one at n committed: conv_commit_full_state) or ReplaySSM (the read slot's window
// as checkpoint plus the window's raw inputs, cut at n: conv_commit_replay) — with out-of-place commits
// (write_slot != slot) as the recurrent pools have them. Internal to the reference library.
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

class ConvSlots {
 public:
  // fault: the conv faults of the catalogue act here (conv_fault(): ConvCommitKeepsWindowTail and
  // ConvRollbackToWindow, ConvWindowNotCopied, ConvFreshKeepsTenantWindow and ConvStaleStateOnFreshPrefill,
  // ConvColumnOffByOne, ConvPadRowWritesSlot0); any other is ignored.
  void setup(const EngineSetup& s, bool full_state, Fault fault);
  bool on() const { return on_; }
  // rows in canonical form (canonical_rows: PAD and graph tail rows carry kPadSlot).
  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows, const std::vector<SequenceInputs>& inputs);
  // Error("conv_commit") when rows is not the last step's batch.
  void commit(const std::vector<TargetRow>& rows);
  void copy(std::int32_t src, std::int32_t dst);
  std::vector<float> state(std::int32_t layer, std::int32_t slot) const;  // Error("slot") outside [0, num_slots)
  std::vector<float> pool(std::int32_t layer) const;

 private:
  void put(std::int32_t layer, std::int32_t slot, const std::vector<float>& w);
  bool on_ = false, full_state_ = false;
  Fault fault_ = Fault::None;
  ModelConfig model_;
  ConvSetup conv_;
  std::int32_t num_slots_ = 0;
  std::int64_t stride_ = 0;
  std::vector<std::vector<float>> pools_;  // [layer][num_slots * stride]
  struct Pending {                          // one per row of the last step, per layer
    std::int32_t write_slot = kPadSlot;
    int T = 0;
    std::vector<float> checkpoint, x;        // ReplaySSM
    std::vector<std::vector<float>> states;  // full-state
  };
  std::vector<std::vector<Pending>> pending_;  // [row][layer]
};

}  // namespace replayssm::ref
