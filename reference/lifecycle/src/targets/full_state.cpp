// The oracle target: full-state verify (every window state kept in scratch) and commit copy of state n,
// through the batch-level reference of the CUDA full-state kernels.
#include "pooled.hpp"

#include <algorithm>

#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {

class FullStateTarget : public PooledTarget {
 public:
  explicit FullStateTarget(Fault f) : fault_(f) {
    conv_full_state_ = true;
    conv_fault_ = f;
  }
  std::string name() const override { return "full_state"; }
  std::string design() const override { return "full_state"; }
  // Under DecodePathDrift the target claims the bf16 tier, the drift inside it (a kernel's claim, not the oracle's).
  bool bit_exact() const override { return fault_ != Fault::DecodePathDrift; }
  Tolerance tolerance(const std::vector<double>& term_scale, bool state) const override {
    return tier_tolerance(kDecodeDriftTier, s_.cfg, term_scale, state);
  }

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& wire,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto rows = canonical_rows(wire, s_);
    auto out = zero_outputs(inputs);
    zero_fresh_slots(rows);
    batch_ = step_batch(rows, inputs.empty() ? 0 : inputs[0].T);
    // The scratch keeps its storage from step to step (a commit reads only states its row's verify wrote).
    const auto need = rows.size() * static_cast<std::size_t>(s_.max_T) * static_cast<std::size_t>(s_.cfg.state_elems());
    scratch_.resize(pools_.size());
    for (auto& x : scratch_)
      if (x.size() < need) x.resize(need);
    const auto ls = layers(&scratch_, nullptr);
    for (std::size_t l = 0; l < ls.size(); ++l) batch::verify_full_state(batch_, ls[l], inputs[l], out[l]);
    batch::commit_copy(batch_, ls);  // prefill chunks: their whole window
    return out;
  }
  void commit(const std::vector<TargetRow>& wire) override {
    set_commit_counts(batch_, canonical_rows(wire, s_));
    if (fault_ == Fault::FullStateCopyOffByOne)  // the fault: S_{n-1} is copied (n = 1 keeps the checkpoint)
      for (auto& r : batch_.rows)
        if (r.accepted >= 1) r.accepted -= 1;
    batch::commit_copy(batch_, layers(&scratch_, nullptr));
    if (fault_ == Fault::DecodePathDrift) drift_single_token_commits();
  }

 private:
  // DecodePathDrift: every committed single-token verify row's state scaled by (1 - kDecodeDrift), then stored at
  // the state dtype, as a separate decode kernel with its own decay would leave it.
  void drift_single_token_commits() {
    for (const auto& r : batch_.rows) {
      if (r.T != 1 || r.accepted != 1 || r.write_slot == kPadSlot) continue;
      for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) {
        auto S = get(l, r.write_slot);
        for (auto& x : S) x = static_cast<float>(x * (1.0 - kDecodeDrift));
        round_to_state_dtype(s_.cfg, S);
        put(l, r.write_slot, S);
      }
    }
  }

  Fault fault_;
  batch::Batch batch_;
  std::vector<std::vector<float>> scratch_;  // [layer][rows * max_T * HV*K*V]
};

}  // namespace

std::unique_ptr<Target> make_full_state_target(Fault fault) {
  const auto ts = fault_targets(fault);
  require(fault == Fault::None || std::find(ts.begin(), ts.end(), "full_state") != ts.end(), "fault", "fault '",
          to_string(fault), "' does not live in the full_state target (only faults of the full-state design do)");
  return std::make_unique<FullStateTarget>(fault);
}

}  // namespace replayssm::ref
