// One slot of a spec ring: history, committed state and the verify (spec_ring.hpp).
#include <limits>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/spec_ring.hpp"

namespace replayssm::ref {

std::size_t spec_ring_phys(const SpecRingGeometry& g, std::int32_t x) {
  return static_cast<std::size_t>(x & (g.physical() - 1));
}

namespace {
// The ring's records hold one entry per physical position; cursors beyond the ring's length are a named error.
void check_ring(const SpecRingGeometry& g, const SpecRingCursors& c, std::size_t records, std::int32_t window) {
  require(records == static_cast<std::size_t>(g.physical()), "records", "has ", records,
          " entries, the ring holds ", g.physical());
  require(c.write_pos >= 0 && c.write_pos + window <= g.physical(), "cursors.write_pos", "is ", c.write_pos,
          " with a window of ", window, ", outside the ring of ", g.physical(), " records");
}
}  // namespace

std::vector<const Record*> spec_ring_history(const SpecRingGeometry& g, const SpecRingCursors& c,
                                             const std::vector<Record>& records) {
  check_ring(g, c, records.size(), 0);
  std::vector<const Record*> hist;
  for (std::int32_t i = 0; i < c.write_pos; ++i) hist.push_back(&records.at(spec_ring_phys(g, c.base + i)));
  return hist;
}

std::vector<float> spec_ring_committed_state(const ModelConfig& cfg, const SpecRingGeometry& g,
                                             const SpecRingCursors& c, const std::vector<float>& checkpoint,
                                             const std::vector<Record>& records, Reconstruction recon) {
  const auto hist = spec_ring_history(g, c, records);
  for (const Record* h : hist)
    if (h->u.empty())
      return std::vector<float>(static_cast<std::size_t>(cfg.state_elems()), std::numeric_limits<float>::quiet_NaN());
  return reconstruct(cfg, checkpoint, hist, recon);
}

std::vector<float> spec_ring_verify(const ModelConfig& cfg, const LayerParams& p, const SpecRingGeometry& g,
                                    const SpecRingCursors& c, const SequenceInputs& in,
                                    std::vector<float>& checkpoint, std::vector<Record>& records,
                                    const SpecRingStepOptions& opt) {
  std::vector<const Record*> hist = spec_ring_history(g, c, records);
  check_ring(g, c.is_flush ? SpecRingCursors{c.base, 0, c.is_flush} : c, records.size(), in.T);
  if (c.is_flush) {  // fold the committed history into the checkpoint first
    checkpoint = reconstruct(cfg, checkpoint, hist, opt.recon, opt.factored_weights);
    round_to_state_dtype(cfg, checkpoint);
    hist.clear();
  }
  std::vector<Record> window(static_cast<std::size_t>(in.T));
  std::vector<float> o_all;
  for (int s = 0; s < in.T; ++s) {
    std::vector<const Record*> list = hist;
    for (int j = 0; j < s; ++j) list.push_back(&window[static_cast<std::size_t>(j)]);
    std::vector<float> S = reconstruct(cfg, checkpoint, list, opt.recon, opt.factored_weights);
    auto o = ring_token(cfg, p, in, s, S, window[static_cast<std::size_t>(s)], opt.recon);
    round_record(window[static_cast<std::size_t>(s)], opt.record_dtype);
    o_all.insert(o_all.end(), o.begin(), o.end());
  }
  // Window records go right after the (possibly folded) history, never over a live record.
  const std::int32_t start = (opt.window_at_origin_on_flush && c.is_flush) ? c.base : c.base + c.write_pos;
  for (int s = 0; s < in.T; ++s) records.at(spec_ring_phys(g, start + s)) = window[static_cast<std::size_t>(s)];
  round_to_act_dtype(cfg, o_all);
  return o_all;
}

}  // namespace replayssm::ref
