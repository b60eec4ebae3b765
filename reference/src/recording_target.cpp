// The recording Target decorator (recording_target.hpp): every mutating call is passed on and logged; its
// expectations are settled before the next one.
#include "replayssm/reference/recording_target.hpp"

#include <algorithm>
#include <cstring>

#include "replayssm/error.hpp"

namespace replayssm::ref {

RecordingTarget::RecordingTarget(std::unique_ptr<Target> inner) : inner_(std::move(inner)) {}

void RecordingTarget::setup(const EngineSetup& s) {
  inner_->setup(s);
  setup_ = s;
  cmds_.clear();
  pending_ = false;
  live_.clear();
  in_flight_.clear();
  step_written_.clear();
}

std::vector<std::vector<float>> RecordingTarget::pools() const {
  std::vector<std::vector<float>> p;
  for (std::int32_t l = 0; l < setup_.cfg.num_layers; ++l) p.push_back(inner_->pool(l));
  return p;
}

void RecordingTarget::begin() {
  settle();
  before_ = pools();
}

// Every slot except `written` must keep its state bytes.
void RecordingTarget::record(TraceCommand c, std::vector<std::int32_t> written) {
  c.lifecycle = lifecycle_;
  for (std::int32_t s = 0; s < setup_.num_slots; ++s)
    if (std::find(written.begin(), written.end(), s) == written.end()) c.unchanged.push_back(s);
  cmds_.push_back(std::move(c));
  pending_ = true;
}

void RecordingTarget::allocate(std::int32_t slot) {
  begin();
  inner_->allocate(slot);
  TraceCommand c;
  c.op = TraceCommand::Op::Allocate;
  c.slot = slot;
  live_.erase(slot);  // whatever the slot holds is garbage until a fresh prefill
  record(std::move(c), {});
}

std::vector<std::vector<float>> RecordingTarget::step(const std::vector<TargetRow>& rows,
                                                      const std::vector<SequenceInputs>& inputs) {
  begin();
  before_step_ = before_;
  auto out = inner_->step(rows, inputs);
  TraceCommand c;
  c.op = TraceCommand::Op::Step;
  c.rows = rows;
  for (auto& r : c.rows)
    if (r.kind == RowKind::Verify) r.row.accepted = 0;  // as the protocol sends it: not known yet
  c.notes.assign(rows.size(), TraceRowNote{});
  c.inputs = inputs;
  c.outputs = out;
  step_written_.clear();
  // PAD rows (the convention's sentinel) and graph tail rows are PAD whatever their slot says: they write
  // nothing, so a tail row's stale slot stays in the unchanged set. A dedicated pad slot may be written by
  // PAD rows run as ordinary rows: it is in every step's write set (it never holds a request).
  if (setup_.pad_convention == PadConvention::PadSlot) step_written_.push_back(setup_.pad_sentinel());
  for (const auto& r : canonical_rows(rows, setup_)) {
    if (r.row.slot == kPadSlot) continue;
    step_written_.push_back(r.row.slot);
    if (r.row.write_slot != kPadSlot) step_written_.push_back(r.row.write_slot);
    if (r.kind == RowKind::Prefill) {
      live_.insert(r.row.write_slot);
    } else {
      in_flight_.insert(r.row.slot);
    }
  }
  record(std::move(c), step_written_);
  return out;
}

void RecordingTarget::commit(const std::vector<TargetRow>& rows) {
  begin();
  inner_->commit(rows);
  TraceCommand c;
  c.op = TraceCommand::Op::Commit;
  c.rows = rows;
  c.notes.assign(rows.size(), TraceRowNote{});
  for (const auto& r : canonical_rows(rows, setup_)) {
    if (r.row.slot == kPadSlot || r.kind != RowKind::Verify) continue;
    const bool moved = r.row.write_slot != kPadSlot && r.row.write_slot != r.row.slot;
    // n = 0 keeps the slot's bytes; an out-of-place commit never writes its read slot.
    if (r.row.accepted == 0 || moved) c.kept.push_back(r.row.slot);
    if (moved && r.row.accepted > 0) live_.insert(r.row.write_slot);  // the request's state is there now
  }
  in_flight_.clear();
  record(std::move(c), step_written_);
}

void RecordingTarget::copy_slot(std::int32_t src, std::int32_t dst) {
  begin();
  inner_->copy_slot(src, dst);
  TraceCommand c;
  c.op = TraceCommand::Op::CopySlot;
  c.src = src;
  c.dst = dst;
  if (live_.count(src)) {
    live_.insert(dst);
  } else {
    live_.erase(dst);
  }
  record(std::move(c), {dst});
}

void RecordingTarget::capture(std::int32_t rows, std::int32_t T) {
  begin();
  inner_->capture(rows, T);
  TraceCommand c;
  c.op = TraceCommand::Op::Capture;
  c.capture_rows = rows;
  c.capture_T = T;
  // The warm-up runs PAD rows: nothing is written but, under pad_slot, the pad slot (as by any step).
  std::vector<std::int32_t> written;
  if (setup_.pad_convention == PadConvention::PadSlot) written.push_back(setup_.pad_sentinel());
  record(std::move(c), written);
}

void RecordingTarget::retain(const std::set<std::int32_t>& resident) {
  for (auto it = live_.begin(); it != live_.end();) it = resident.count(*it) ? std::next(it) : live_.erase(it);
}

// The expectations of the last command, taken from the wrapped target now (nothing has changed it since).
void RecordingTarget::settle() {
  if (!pending_) return;
  pending_ = false;
  TraceCommand& c = cmds_.back();
  const std::int64_t E = setup_.cfg.state_elems();
  const std::int64_t stride = setup_.pool_geometry().stride(setup_.cfg);
  const auto now = pools();
  auto same = [&](const std::vector<float>& a, const std::vector<float>& b, std::int64_t s, std::int64_t from,
                  std::int64_t n) {
    return std::memcmp(a.data() + s * stride + from, b.data() + s * stride + from, static_cast<std::size_t>(n) * 4) == 0;
  };
  for (std::int32_t l = 0; l < setup_.cfg.num_layers; ++l) {
    const auto& b = before_[static_cast<std::size_t>(l)];
    const auto& a = now[static_cast<std::size_t>(l)];
    for (std::int32_t s = 0; s < setup_.num_slots; ++s)
      require(same(b, a, s, E, stride - E), "oracle", "the gap after slot ", s, " (layer ", l, ") changed in ", c.str());
    for (auto s : c.unchanged)
      require(same(b, a, s, 0, E), "oracle", "slot ", s, " (layer ", l, ") changed in ", c.str(),
              " although the write-set rule keeps it");
    for (auto s : c.kept)
      require(same(before_step_[static_cast<std::size_t>(l)], a, s, 0, E), "oracle", "slot ", s, " (layer ", l,
              ") changed although its commit had n = 0 or wrote another slot");
  }
  for (std::int32_t l = 0; l < setup_.cfg.num_layers; ++l)
    for (auto s : live_)
      if (!in_flight_.count(s)) c.states.push_back(StateExpectation{l, s, inner_->committed_state(l, s)});
}

std::vector<TraceCommand> RecordingTarget::finish() {
  settle();
  return cmds_;
}

}  // namespace replayssm::ref
