// Term scales per slot through a lifecycle (term_scale_tracker.hpp).
#include "replayssm/lifecycle/term_scale_tracker.hpp"

#include <algorithm>

namespace replayssm::ref {

void TermScaleTracker::reset(const EngineSetup& s) {
  s_ = s;
  slot_.clear();
  pending_.clear();
}

std::vector<std::vector<double>>& TermScaleTracker::at(std::int32_t slot) {
  auto& v = slot_[slot];
  if (v.empty()) v.assign(static_cast<std::size_t>(s_.cfg.num_layers), std::vector<double>(static_cast<std::size_t>(s_.cfg.HV), 0.0));
  return v;
}

void TermScaleTracker::absorb(std::vector<std::vector<double>>& into, const std::vector<TermScales>& w, int n) const {
  for (std::size_t l = 0; l < w.size(); ++l) into[l] = running_state_scales(w[l], into[l], n);
}

std::vector<std::vector<double>> TermScaleTracker::step(
    const std::vector<TargetRow>& rows, const std::vector<SequenceInputs>& inputs,
    const std::function<std::vector<float>(std::int32_t, std::int32_t)>& before) {
  const auto& cfg = s_.cfg;
  const std::size_t per = static_cast<std::size_t>(cfg.HV) * cfg.V;
  std::vector<std::vector<double>> out;
  for (const auto& in : inputs) out.emplace_back(static_cast<std::size_t>(in.T) * per, 0.0);
  pending_.assign(rows.size(), Pending{});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TargetRow& r = rows[i];
    if (r.row.slot == kPadSlot) continue;
    const bool fresh = r.kind == RowKind::Prefill && r.fresh;
    std::vector<TermScales> w;
    for (std::int32_t l = 0; l < cfg.num_layers; ++l) {
      const auto& in = inputs[static_cast<std::size_t>(l)];
      const auto S0 = fresh ? std::vector<float>() : before(l, r.row.slot);
      w.push_back(term_scales(cfg, s_.params[static_cast<std::size_t>(l)], S0, in.slice(cfg, r.row.token_offset, r.row.T)));
      // An output also reads the error the state carries: its scale adds |q|_1 times the state's running scale
      // (the read slot's history, then the window's tokens up to this one).
      TermScales o = w.back();
      add_state_error(o, fresh ? std::vector<double>(static_cast<std::size_t>(cfg.HV), 0.0)
                               : at(r.row.slot)[static_cast<std::size_t>(l)]);
      const auto e = output_element_scales(cfg, o);
      std::copy(e.begin(), e.end(), out[static_cast<std::size_t>(l)].begin() +
                                        static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.row.token_offset) * per));
    }
    if (r.kind == RowKind::Prefill) {  // committed by the step: its slot's scale restarts on a fresh prefill
      auto base = fresh ? std::vector<std::vector<double>>() : at(r.row.slot);
      auto& dst = at(r.row.write_slot);
      if (fresh) std::fill(dst.begin(), dst.end(), std::vector<double>(static_cast<std::size_t>(cfg.HV), 0.0));
      else dst = base;
      absorb(dst, w, r.row.T);
      continue;
    }
    pending_[i] = Pending{r.row.slot, r.row.write_slot, std::move(w)};
  }
  return out;
}

void TermScaleTracker::commit(const std::vector<TargetRow>& rows) {
  for (std::size_t i = 0; i < rows.size() && i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    const std::int32_t n = rows[i].row.accepted;
    if (p.slot == kPadSlot || p.write_slot == kPadSlot || n <= 0 || rows[i].kind != RowKind::Verify) continue;
    auto scales = at(p.slot);  // the read slot's history, carried to where the commit writes
    absorb(scales, p.layers, n);
    at(p.write_slot) = scales;
  }
  pending_.clear();
}

void TermScaleTracker::copy(std::int32_t src, std::int32_t dst) { at(dst) = at(src); }

std::vector<double> TermScaleTracker::state_scales(std::int32_t layer, std::int32_t slot) const {
  const auto it = slot_.find(slot);
  std::vector<double> per_head(static_cast<std::size_t>(s_.cfg.HV), 0.0);
  if (it != slot_.end()) per_head = it->second.at(static_cast<std::size_t>(layer));
  return state_element_scales(s_.cfg, per_head);
}

}  // namespace replayssm::ref
