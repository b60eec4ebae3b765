// replayssm/reference/recording_target.hpp — records a trace (trace.hpp): a Target decorator that passes every
// call to the target it wraps (the oracle, make_target("full_state")) and logs it with its results, and the
// driver that runs a lifecycle command sequence through an Engine over that decorator.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "replayssm/reference/command.hpp"
#include "replayssm/reference/target.hpp"
#include "replayssm/reference/trace.hpp"

namespace replayssm::ref {

// Logs setup, allocate, step, commit, copy_slot and capture with their arguments and results; reads pass through. The
// expectations of a command (committed states of the settled resident slots, the bitwise-unchanged slots by
// the write-set rule) are taken just before the next mutating call or at finish(), so that a driver can first
// say which slots are still resident (retain). Throws Error("oracle...") if the wrapped target breaks the
// write-set rule itself: a trace never records a violation as an expectation.
class RecordingTarget : public Target {
 public:
  explicit RecordingTarget(std::unique_ptr<Target> inner);

  std::string name() const override { return inner_->name(); }
  bool bit_exact() const override { return inner_->bit_exact(); }
  Tolerance tolerance(double scale, bool state) const override { return inner_->tolerance(scale, state); }
  bool pad_outputs_zero() const override { return inner_->pad_outputs_zero(); }
  void setup(const EngineSetup& s) override;
  void allocate(std::int32_t slot) override;
  std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                       const std::vector<SequenceInputs>& inputs) override;
  void commit(const std::vector<TargetRow>& rows) override;
  void copy_slot(std::int32_t src, std::int32_t dst) override;
  // A capture (trace 1.2) is recorded like the other calls: its expectations are the committed states of the
  // live requests and every slot unchanged (under pad_slot, all but the pad slot).
  bool captures() const override { return inner_->captures(); }
  void capture(std::int32_t rows, std::int32_t T) override;
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    return inner_->committed_state(layer, slot);
  }
  std::vector<float> pool(std::int32_t layer) const override { return inner_->pool(layer); }

  // Commands recorded from now on belong to lifecycle command `index`.
  void begin_lifecycle(std::int32_t index) { lifecycle_ = index; }
  // Only these slots hold a request from now on: the others get no state expectation (a finished or preempted
  // request's slot is free; its bytes stay covered by the unchanged rule).
  void retain(const std::set<std::int32_t>& resident);
  // The commands recorded so far (annotations may be added); the last one's expectations are settled by finish.
  std::vector<TraceCommand>& commands() { return cmds_; }
  // Settles the last command and returns every recorded command.
  std::vector<TraceCommand> finish();

 private:
  std::vector<std::vector<float>> pools() const;
  void begin();                                       // settles the pending command, snapshots the pools
  void record(TraceCommand c, std::vector<std::int32_t> written);
  void settle();

  std::unique_ptr<Target> inner_;
  EngineSetup setup_;
  std::vector<TraceCommand> cmds_;
  std::int32_t lifecycle_ = -1;
  bool pending_ = false;
  std::set<std::int32_t> live_;       // slots with a defined committed state (a request's, settled)
  std::set<std::int32_t> in_flight_;  // verify rows between their step and its commit
  std::vector<std::int32_t> step_written_;  // the last step's real rows' slots
  std::vector<std::vector<float>> before_, before_step_;
};

// Runs `cmds` through an Engine over RecordingTarget(make_target("full_state")) and returns the trace, every
// step row annotated with its request and early-stop position. An invalid sequence is the Engine's Error.
Trace record_trace(const EngineSetup& setup, const std::vector<Cmd>& cmds, std::uint64_t seed,
                   const std::string& source);

}  // namespace replayssm::ref
