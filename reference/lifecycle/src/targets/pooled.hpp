// The shared base of the reference targets: per-layer state pools on the host (num_slots * slot_stride
// values each, poisoned at setup), slot copies, committed states read from the pool, and the translation of
// a step's TargetRows into the batch-level reference's descriptors (batch.hpp). Internal to the reference
// library: targets are created through make_target (target.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "conv_slots.hpp"
#include "replayssm/recurrence/batch.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

class PooledTarget : public Target {
 public:
  void setup(const EngineSetup& s) override;
  void allocate(std::int32_t) override {}
  // The reference targets follow every PAD convention and skip graph tail rows (canonical_rows).
  std::vector<PadConvention> pad_conventions() const override { return all_pad_conventions(); }
  bool graph_padding() const override { return true; }
  // batch::commit_copy / commit_replay write write_slot and only read slot.
  bool out_of_place_commit() const override { return true; }
  // A captured bucket is warmed up as PAD rows over scratch of its own (capture.cpp): no slot is addressed.
  bool captures() const override { return true; }
  // Every row of a step is computed apart from the others, the same way every time: a step repeated on copies,
  // or with its rows reordered, gives the same bits.
  SelfClaim self_claim() const override { return {{SelfCheckKind::Repeat, SelfCheckKind::Permute}, Tier::Fp32}; }
  void capture(std::int32_t rows, std::int32_t T) override;
  // Every step reads its rows afresh, so a replayed bucket is a step like any other; the bucket a replay names
  // is kept for the next step or commit (take_replay), where a graph replay fault acts on it.
  bool graph_replay() const override { return true; }
  void replaying(std::int32_t rows, std::int32_t T) override { replay_ = {{rows, T}}; }
  // Copies every layer's checkpoint and conv window (the whole per-slot state of a pooled target).
  void copy_slot(std::int32_t src, std::int32_t dst) override;
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override { return get(layer, slot); }
  std::vector<float> pool(std::int32_t layer) const override { return pools_[static_cast<std::size_t>(layer)]; }
  // The conv component (conv_slots.hpp), in the design of conv_full_state_, with conv_fault_.
  bool conv_state() const override { return true; }
  std::vector<std::vector<float>> conv_step(const std::vector<TargetRow>& rows,
                                            const std::vector<SequenceInputs>& inputs) override {
    return conv_.step(canonical_rows(rows, s_), inputs);
  }
  void conv_commit(const std::vector<TargetRow>& rows) override { conv_.commit(canonical_rows(rows, s_)); }
  std::vector<float> conv_committed_state(std::int32_t layer, std::int32_t slot) const override {
    return conv_.state(layer, slot);
  }
  std::vector<float> conv_pool(std::int32_t layer) const override { return conv_.pool(layer); }

 protected:
  // Slot `slot` of layer l (Error("slot") outside [0, num_slots)).
  std::vector<float> get(std::int32_t l, std::int32_t slot) const;
  void put(std::int32_t l, std::int32_t slot, const std::vector<float>& S);
  // A zero state in the slot of every fresh prefill row: it starts from zero whatever the slot held.
  void zero_fresh_slots(const std::vector<TargetRow>& rows);
  // The step's descriptors as the kernels would get them: prefill rows with accepted = T (they are committed
  // inside the step), verify rows with accepted = 0 until commit() sets them. Validated.
  batch::Batch step_batch(const std::vector<TargetRow>& rows, std::int64_t total_tokens) const;
  // Sets the accepted counts of commit(): a real Verify row's n, 0 for every other row. Error("commit") when
  // rows is not the last step's batch.
  static void set_commit_counts(batch::Batch& b, const std::vector<TargetRow>& rows);
  // Zero outputs for every layer ([total_tokens, HV, V]).
  std::vector<std::vector<float>> zero_outputs(const std::vector<SequenceInputs>& inputs) const;
  // Every layer's pool (and the given per-layer scratch or payload buffers) as batch::Layer entries.
  std::vector<batch::Layer> layers(std::vector<std::vector<float>>* scratch, std::vector<std::vector<float>>* payload);

  // Error("capture.rows" / "capture.T") outside the bucket shapes a setup allows.
  void check_capture(std::int32_t rows, std::int32_t T) const;
  // The dummy tokens a captured step is warmed up on ([tokens] rows per layer, seeded, the setup's gates).
  std::vector<SequenceInputs> capture_inputs(std::int32_t tokens) const;

  // The bucket (rows, T) the next step or commit replays, or none; reset by the call that takes it.
  std::optional<std::pair<std::int32_t, std::int32_t>> take_replay() {
    auto r = replay_;
    replay_.reset();
    return r;
  }

  EngineSetup s_;
  std::optional<std::pair<std::int32_t, std::int32_t>> replay_;
  std::vector<std::vector<float>> pools_;  // [layer][num_slots * stride]
  ConvSlots conv_;
  bool conv_full_state_ = false;  // the full-state conv design (the oracle's); else ReplaySSM
  Fault conv_fault_ = Fault::None;
};

// fault: a conv fault listed for "full_state" (fault_targets) or None; Error("fault") for any other (the oracle's
// recurrent path has no faults).
std::unique_ptr<Target> make_full_state_target(Fault fault = Fault::None);
std::unique_ptr<Target> make_replay_target(Fault fault);
// The replay design computed as a TF32 kernel computes it (dot-product operands rounded to TF32): the
// evidence that the tf32 precision tier's budget holds for a correct implementation of that tier.
std::unique_ptr<Target> make_replay_tf32_target();
std::unique_ptr<Target> make_spec_ring_target(Fault fault);

}  // namespace replayssm::ref
