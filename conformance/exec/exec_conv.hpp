// The conv component of the kernel-level lifecycle over the target protocol (version 1.5,
// docs/target-protocol.md "The conv component (1.5)"): the frames the exec target sends for Target::conv_step,
// conv_commit, conv_committed_state and conv_pool, and the strict parsing of their answers. No process and no
// I/O here: exec_target.cpp sends the frames.
//
// Shapes (C = 2*H*K + HV*V channels, W the kernel size, N the step's packed tokens, S slots):
//   setup tensors   conv_weight.{l} F32 [C, W], conv_bias.{l} F32 [C] (only when setup.conv.bias)
//   conv_step       x.{l} act [N, C] (raw conv inputs x_t = [q_t | k_t | v_t], conv_component.hpp)
//                   -> y.{l} act [N, C]
//   conv_committed_state -> state conv-state dtype [C, W-1]
//   conv_pool       digests as `pool`, values conv-state dtype [len(slots), C*(W-1) + 4]
// Every answer error is Error("target.<command>.<field>"), naming the tensor or field.
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/frame.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::exec {

// The conv pool's slot stride: the window's C*(W-1) values and a 4-value gap nothing may write.
std::int64_t conv_stride(const ref::ConvSetup& c);

// Adds the conv weights of every layer to a `setup` frame (no-op when the setup has no conv component).
void add_conv_setup_tensors(const ref::EngineSetup& s, Frame& f);

// {"op": "conv_step", "rows", "total_tokens", "live_rows"} with x.{l}; rows as the `step` command sends them.
Frame conv_step_command(const ref::EngineSetup& s, const std::vector<ref::TargetRow>& rows,
                        const std::vector<ref::SequenceInputs>& inputs);
// Exactly y.0 .. y.{L-1}, each act [N, C]; another tensor, dtype or shape is Error("target.conv_step.<name>").
std::vector<std::vector<float>> parse_conv_step_answer(const Frame& a, const ref::EngineSetup& s, std::int64_t N);

// {"op": "conv_commit", "rows", "live_rows"}: rows with their accepted counts, as `commit` sends them.
Frame conv_commit_command(const std::vector<ref::TargetRow>& rows);

// {"op": "conv_committed_state", "layer", "slot"}; the answer holds exactly `state` [C, W-1] in the conv state
// dtype (Error("target.conv_committed_state.<name>")).
Frame conv_committed_state_command(std::int32_t layer, std::int32_t slot);
std::vector<float> parse_conv_committed_state_answer(const Frame& a, const ref::EngineSetup& s);

// The judge's mirror of the conv pools: `conv_pool` sends the 2*S digests held (state part and gap of every
// slot) and the answer carries only the slots whose digests differ, exactly as `pool` does.
class ConvPoolMirror {
 public:
  void reset(const ref::EngineSetup& s);  // every slot poisoned, digests 0 (unknown)
  void invalidate() { std::fill(valid_.begin(), valid_.end(), false); }
  bool valid(std::int32_t layer) const;   // Error("layer") outside [0, L)
  const std::vector<float>& values(std::int32_t layer) const { return pools_.at(static_cast<std::size_t>(layer)); }
  Frame request(std::int32_t layer) const;
  // Applies a conv_pool answer (parse_pool_answer with op "conv_pool"); a slot whose digest changed without
  // its values is Error("target.conv_pool.slots").
  const std::vector<float>& apply(std::int32_t layer, const Frame& answer);

 private:
  std::int32_t num_slots_ = 0;
  std::int64_t stride_ = 0;
  DType dtype_ = DType::F32;
  std::vector<std::vector<float>> pools_;
  std::vector<std::vector<std::uint64_t>> digests_;
  std::vector<bool> valid_;
};

}  // namespace replayssm::exec
