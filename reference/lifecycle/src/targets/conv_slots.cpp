// The conv windows of the reference targets (conv_slots.hpp).
#include "conv_slots.hpp"

#include <algorithm>

#include "replayssm/error.hpp"

namespace replayssm::ref {

void ConvSlots::setup(const EngineSetup& s, bool full_state, Fault fault) {
  on_ = s.conv.has_value();
  pools_.clear();
  pending_.clear();
  if (!on_) return;
  full_state_ = full_state;
  fault_ = fault;
  model_ = s.cfg;
  conv_ = *s.conv;
  num_slots_ = s.num_slots;
  stride_ = conv_.cfg.state_elems() + 4;  // a gap after every window that nothing may write
  pools_.assign(static_cast<std::size_t>(s.cfg.num_layers),
                std::vector<float>(static_cast<std::size_t>(num_slots_ * stride_), s.poison));
}

std::vector<float> ConvSlots::state(std::int32_t l, std::int32_t slot) const {
  require(on_, "conv", "the setup has no conv component");
  require(slot >= 0 && slot < num_slots_, "slot", "is ", slot, ", outside [0, ", num_slots_, ")");
  const auto at = pools_.at(static_cast<std::size_t>(l)).begin() + static_cast<std::ptrdiff_t>(slot * stride_);
  return std::vector<float>(at, at + static_cast<std::ptrdiff_t>(conv_.cfg.state_elems()));
}

std::vector<float> ConvSlots::pool(std::int32_t l) const {
  require(on_, "conv", "the setup has no conv component");
  return pools_.at(static_cast<std::size_t>(l));
}

void ConvSlots::put(std::int32_t l, std::int32_t slot, const std::vector<float>& w) {
  require(slot >= 0 && slot < num_slots_, "slot", "is ", slot, ", outside [0, ", num_slots_, ")");
  std::copy(w.begin(), w.end(), pools_[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride_));
}

std::vector<std::vector<float>> ConvSlots::step(const std::vector<TargetRow>& rows,
                                                const std::vector<SequenceInputs>& inputs) {
  require(on_, "conv", "the setup has no conv component");
  require(static_cast<std::int32_t>(inputs.size()) == model_.num_layers, "inputs", "has ", inputs.size(),
          " layers, expected ", model_.num_layers);
  const auto& cc = conv_.cfg;
  const std::int64_t C = cc.channels();
  const std::vector<float> zeros(static_cast<std::size_t>(cc.state_elems()), 0.0f);
  std::vector<std::vector<float>> y;
  for (const auto& in : inputs) y.emplace_back(static_cast<std::size_t>(in.T * C), 0.0f);
  pending_.assign(rows.size(), std::vector<Pending>(static_cast<std::size_t>(model_.num_layers)));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TargetRow& r = rows[i];
    // PAD and graph tail rows: no read, no write, zero outputs. The fault ConvPadRowWritesSlot0 clamps a PAD
    // verify row to slot 0: its window is read from slot 0 and committed there (its outputs stay zero).
    const bool pad = r.row.slot == kPadSlot;
    if (pad && !(fault_ == Fault::ConvPadRowWritesSlot0 && r.kind == RowKind::Verify)) continue;
    const std::int32_t slot = pad ? 0 : r.row.slot, write_slot = pad ? 0 : r.row.write_slot;
    const bool prefill = r.kind == RowKind::Prefill;
    for (std::int32_t l = 0; l < model_.num_layers; ++l) {
      const auto& in = inputs[static_cast<std::size_t>(l)];
      const auto x = conv_raw_inputs(model_, in, r.row.token_offset, r.row.T);
      // ConvFreshKeepsTenantWindow / ConvStaleStateOnFreshPrefill (the same slip in the two designs): a fresh
      // prefill starts from the slot's window instead of zeros.
      const bool stale = fault_ == Fault::ConvFreshKeepsTenantWindow || fault_ == Fault::ConvStaleStateOnFreshPrefill;
      const bool zero = prefill && r.fresh && !stale;
      const auto from = zero ? zeros : state(l, slot);
      auto w = conv_update(cc, conv_.params[static_cast<std::size_t>(l)], from, x, r.row.T, ConvPrecision::KernelFaithful,
                           full_state_ && !prefill);
      if (!pad)
        std::copy(w.y.begin(), w.y.end(), y[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(r.row.token_offset * C));
      if (prefill) {  // a prefill chunk commits its whole window inside the step
        put(l, r.row.write_slot, w.final_state);
        continue;
      }
      Pending& p = pending_[i][static_cast<std::size_t>(l)];
      p.write_slot = write_slot;
      p.T = r.row.T;
      p.checkpoint = from;
      if (full_state_)
        p.states = std::move(w.states);
      else
        p.x = x;
    }
  }
  return y;
}

void ConvSlots::commit(const std::vector<TargetRow>& rows) {
  require(on_, "conv", "the setup has no conv component");
  require(rows.size() == pending_.size(), "conv_commit", "commits ", rows.size(), " rows, the last step had ",
          pending_.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TargetRow& r = rows[i];
    if (r.kind != RowKind::Verify) continue;
    for (std::int32_t l = 0; l < model_.num_layers; ++l) {
      const Pending& p = pending_[i][static_cast<std::size_t>(l)];
      if (p.write_slot == kPadSlot) continue;  // a PAD or graph tail row (nothing pending)
      std::int32_t n = r.row.accepted;
      require(n >= 0 && n <= p.T, "conv_commit.accepted", "row ", i, ": ", n, " outside [0, T=", p.T, "]");
      // ConvCommitKeepsWindowTail / ConvRollbackToWindow (the same slip in the two designs): every draft taken
      // as accepted. ConvColumnOffByOne: the window ends one token early.
      if (fault_ == Fault::ConvCommitKeepsWindowTail || fault_ == Fault::ConvRollbackToWindow) n = p.T;
      if (fault_ == Fault::ConvColumnOffByOne && n > 0) n -= 1;
      if (n == 0) continue;  // nothing accepted: the slot keeps its bytes
      put(l, p.write_slot, full_state_ ? conv_commit_full_state(p.checkpoint, p.states, n)
                                       : conv_commit_replay(conv_.cfg, p.checkpoint, p.x, p.T, n));
    }
  }
  pending_.clear();
}

void ConvSlots::copy(std::int32_t src, std::int32_t dst) {
  if (!on_ || fault_ == Fault::ConvWindowNotCopied) return;  // the fault: the recurrent state moves, the window not
  for (std::int32_t l = 0; l < model_.num_layers; ++l) put(l, dst, state(l, src));
}

}  // namespace replayssm::ref
