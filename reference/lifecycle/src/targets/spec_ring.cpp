// ReplaySSM design 2 on a spec ring: per slot a checkpoint (the pool) plus a ring of corrected-update
// records (u, k, g) with base / write_pos / is_flush cursors (core SpecRingGeometry, spec_ring_commit). A
// verify reads the checkpoint and the committed history; on a flush step it first folds the history into
// the checkpoint. Carries the teeth catalogue's ring faults.
#include "pooled.hpp"

#include <limits>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/spec_ring.hpp"

namespace replayssm::ref {

namespace {

class SpecRingTarget : public PooledTarget {
 public:
  explicit SpecRingTarget(Fault f) : fault_(f) {}
  std::string name() const override { return "ring"; }
  std::string design() const override { return "spec_ring"; }
  // Checkpoint, ring records and cursors live with one slot: commits are in place.
  bool out_of_place_commit() const override { return false; }
  bool bit_exact() const override {
    return s_.recon == Reconstruction::Serial && s_.record_dtype == DType::F32 && s_.cfg.state_dtype == DType::F32;
  }
  void setup(const EngineSetup& s) override {
    PooledTarget::setup(s);
    s_.spec_ring.validate();
    require(s_.spec_ring.T >= s_.max_T, "ring.T", "must be >= max_T (", s_.max_T, "), got ", s_.spec_ring.T);
    cursors_.assign(static_cast<std::size_t>(s.num_slots), spec_ring_reset(s_.spec_ring));
    // Every record starts as NaN poison of its shape, like the pools: a record read before any window wrote it
    // (a cursor that ran past the live records) poisons the state the judge compares, instead of reading nothing.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Record poison;
    poison.u.assign(static_cast<std::size_t>(s.cfg.HV) * s.cfg.V, nan);
    poison.k.assign(static_cast<std::size_t>(s.cfg.H) * s.cfg.K, nan);
    poison.g.assign(static_cast<std::size_t>(s.cfg.HV) * s.cfg.a_width(), nan);
    records_.assign(static_cast<std::size_t>(s.num_slots),
                    std::vector<std::vector<Record>>(static_cast<std::size_t>(s.cfg.num_layers),
                                                     std::vector<Record>(static_cast<std::size_t>(s_.spec_ring.physical()), poison)));
  }
  void allocate(std::int32_t slot) override {
    if (fault_ != Fault::StaleCursorOnSlotReuse) cursors_.at(static_cast<std::size_t>(slot)) = spec_ring_reset(s_.spec_ring);
  }

  std::vector<std::vector<float>> step(const std::vector<TargetRow>& wire,
                                       const std::vector<SequenceInputs>& inputs) override {
    const auto& cfg = s_.cfg;
    const auto rows = canonical_rows(wire, s_);
    auto out = zero_outputs(inputs);
    for (const auto& r : rows) {
      if (r.row.slot == kPadSlot) continue;  // no read, no write, zero output
      for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
        const auto in = inputs[static_cast<std::size_t>(l)].slice(cfg, r.row.token_offset, r.row.T);
        const std::vector<float> o = r.kind == RowKind::Prefill ? prefill(l, r, in) : verify(l, r, in);
        std::copy(o.begin(), o.end(),
                  out[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(r.row.token_offset) * cfg.HV * cfg.V);
      }
    }
    return out;
  }

  void commit(const std::vector<TargetRow>& wire) override {
    for (const auto& r : canonical_rows(wire, s_)) {
      if (r.row.slot == kPadSlot || r.kind != RowKind::Verify) continue;
      require(r.row.write_slot == r.row.slot, "commit.write_slot", "the spec ring commits in place (slot ",
              r.row.slot, ", write_slot ", r.row.write_slot, ")");
      auto& cur = cursors_[static_cast<std::size_t>(r.row.slot)];
      const bool flushed = cur.is_flush;
      cur = spec_ring_commit(cur, s_.spec_ring, r.row.accepted);
      if (fault_ == Fault::DoubleCursorAdvance && !flushed) {
        cur.write_pos += r.row.accepted;
        cur.is_flush = cur.write_pos + 2 * s_.spec_ring.T > s_.spec_ring.logical();
      }
    }
  }
  void copy_slot(std::int32_t src, std::int32_t dst) override {
    PooledTarget::copy_slot(src, dst);
    if (fault_ == Fault::CopyDropsRingRecords) {
      cursors_[static_cast<std::size_t>(dst)] = spec_ring_reset(s_.spec_ring);
      return;
    }
    // A copy of an un-flushed source carries its live records and cursors with it.
    records_[static_cast<std::size_t>(dst)] = records_[static_cast<std::size_t>(src)];
    cursors_[static_cast<std::size_t>(dst)] = cursors_[static_cast<std::size_t>(src)];
  }
  std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const override {
    return spec_ring_committed_state(s_.cfg, s_.spec_ring, cursors_.at(static_cast<std::size_t>(slot)), get(layer, slot),
                                     records_[static_cast<std::size_t>(slot)][static_cast<std::size_t>(layer)], s_.recon);
  }

 private:
  // Prefill writes the checkpoint directly, all tokens committed, rounded once; the ring is empty here
  // because allocation reset it (cursors are per slot and reset exactly once, when the slot is allocated).
  std::vector<float> prefill(std::int32_t l, const TargetRow& r, const SequenceInputs& in) {
    std::vector<float> S = r.fresh ? std::vector<float>(static_cast<std::size_t>(s_.cfg.state_elems()), 0.0f)
                                   : committed_state(l, r.row.slot);
    std::vector<float> o;
    run_recurrent<float>(s_.cfg, s_.params[static_cast<std::size_t>(l)], in, S, o, nullptr, RecurrentOptions{false, true});
    round_to_state_dtype(s_.cfg, S);
    put(l, r.row.slot, S);
    return o;
  }

  std::vector<float> verify(std::int32_t l, const TargetRow& r, const SequenceInputs& in) {
    const auto slot = static_cast<std::size_t>(r.row.slot);
    const SpecRingCursors cur = cursors_[slot];
    std::vector<float> checkpoint = get(l, r.row.slot);
    const SpecRingStepOptions opt{s_.recon, s_.record_dtype, fault_ == Fault::FlushOverwritesLiveRecord,
                                  fault_ == Fault::DecayWeightsFactored};
    auto o = spec_ring_verify(s_.cfg, s_.params[static_cast<std::size_t>(l)], s_.spec_ring, cur, in, checkpoint,
                              records_[slot][static_cast<std::size_t>(l)], opt);
    if (cur.is_flush) put(l, r.row.slot, checkpoint);  // the history was folded into the checkpoint
    return o;
  }

  Fault fault_;
  std::vector<SpecRingCursors> cursors_;                   // per slot (shared by all layers)
  std::vector<std::vector<std::vector<Record>>> records_;  // [slot][layer][physical position]
};

}  // namespace

std::unique_ptr<Target> make_spec_ring_target(Fault fault) { return std::make_unique<SpecRingTarget>(fault); }

}  // namespace replayssm::ref
