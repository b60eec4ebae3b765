// replayssm/recurrence/spec_ring.hpp — one slot of one layer of a spec ring (ReplaySSM design 2; geometry and
// cursor rules in core step.hpp: SpecRingGeometry, SpecRingCursors, spec_ring_commit): a checkpoint plus P
// physical corrected-update records (u, k, g). These functions are the ring's one definition: the `ring`
// target keeps one checkpoint and record array per slot and layer and calls them, and ring.step fixtures
// (ring_fixture.hpp) record one verify + commit of one slot with them.
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/mtp.hpp"
#include "replayssm/step.hpp"

namespace replayssm::ref {

// Physical position of logical ring position x: x mod P (P a power of two).
std::size_t spec_ring_phys(const SpecRingGeometry& g, std::int32_t x);

// The committed history of a slot, oldest first: logical positions base .. base + write_pos - 1 of `records`
// (P entries; one never written is empty).
std::vector<const Record*> spec_ring_history(const SpecRingGeometry& g, const SpecRingCursors& c,
                                             const std::vector<Record>& records);

// The state a slot has committed: the checkpoint with the history folded in (F32, unrounded); NaN everywhere
// when a history record was never written (a cursor pointing at garbage).
std::vector<float> spec_ring_committed_state(const ModelConfig& cfg, const SpecRingGeometry& g,
                                             const SpecRingCursors& c, const std::vector<float>& checkpoint,
                                             const std::vector<Record>& records, Reconstruction recon);

struct SpecRingStepOptions {
  Reconstruction recon = Reconstruction::Serial;
  DType record_dtype = DType::F32;        // storage of u and k (g stays F32)
  bool window_at_origin_on_flush = false; // the catalogue fault flush_overwrites_live_record
  bool factored_weights = false;          // the catalogue fault decay_weights_factored (reconstruct, mtp.hpp)
};

// A verify of in.T window tokens from cursors c (which it does not change: spec_ring_commit does). On a flush
// step (c.is_flush) the history is first folded into the checkpoint, rounded to the state dtype (the
// checkpoint changes); every token then reads the checkpoint, the remaining history and the window records
// before it. The window's records, rounded to record_dtype, are stored right after the history: logical
// positions base + write_pos + s. Returns o [T, HV, V] rounded to the activation dtype.
std::vector<float> spec_ring_verify(const ModelConfig& cfg, const LayerParams& p, const SpecRingGeometry& g,
                                    const SpecRingCursors& c, const SequenceInputs& in,
                                    std::vector<float>& checkpoint, std::vector<Record>& records,
                                    const SpecRingStepOptions& opt);

}  // namespace replayssm::ref
