// The write sets of a step and its commit (call_rules.hpp).
#include "replayssm/lifecycle/call_rules.hpp"

#include <algorithm>

namespace replayssm::ref {

namespace {
void add(std::vector<std::int32_t>& v, std::int32_t s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}
}  // namespace

StepWrites step_writes(const std::vector<TargetRow>& canonical, const EngineSetup& s) {
  StepWrites w;
  // A dedicated pad slot may be written by PAD rows run as ordinary rows: it never holds a request.
  if (s.pad_convention == PadConvention::PadSlot) add(w.written, s.pad_sentinel());
  for (const auto& r : canonical) {
    if (r.row.slot == kPadSlot) continue;  // PAD and graph tail rows write nothing
    add(w.written, r.row.slot);
    if (r.row.write_slot != kPadSlot) add(w.written, r.row.write_slot);
    if (r.kind == RowKind::Verify) add(w.in_flight, r.row.slot);
  }
  return w;
}

CommitKept commit_kept(const std::vector<TargetRow>& canonical) {
  CommitKept k;
  for (const auto& r : canonical) {
    if (r.row.slot == kPadSlot || r.kind != RowKind::Verify) continue;
    const bool moved = r.row.write_slot != kPadSlot && r.row.write_slot != r.row.slot;
    if (moved) add(k.read_only, r.row.slot);
    if (r.row.accepted == 0) {
      add(k.at_zero, r.row.slot);
      if (r.row.write_slot != kPadSlot) add(k.at_zero, r.row.write_slot);
    }
  }
  return k;
}

std::vector<std::int32_t> CommitKept::all() const {
  std::vector<std::int32_t> v = read_only;
  for (auto s : at_zero) add(v, s);
  return v;
}

}  // namespace replayssm::ref
