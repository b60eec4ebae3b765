#include "pooled.hpp"

#include <algorithm>

#include "replayssm/error.hpp"

namespace replayssm::ref {

void PooledTarget::setup(const EngineSetup& s) {
  s_ = s;
  replay_.reset();
  const std::int64_t stride = s.pool_geometry().stride(s.cfg);
  pools_.assign(static_cast<std::size_t>(s.cfg.num_layers),
                std::vector<float>(static_cast<std::size_t>(s.num_slots * stride), s.poison));
  conv_.setup(s, conv_full_state_, conv_fault_);
}

std::vector<float> PooledTarget::get(std::int32_t l, std::int32_t slot) const {
  require(slot >= 0 && slot < s_.num_slots, "slot", "is ", slot, ", outside [0, ", s_.num_slots, ")");
  const std::int64_t stride = s_.pool_geometry().stride(s_.cfg);
  const auto at = pools_[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride);
  return std::vector<float>(at, at + static_cast<std::ptrdiff_t>(s_.cfg.state_elems()));
}

void PooledTarget::put(std::int32_t l, std::int32_t slot, const std::vector<float>& S) {
  require(slot >= 0 && slot < s_.num_slots, "slot", "is ", slot, ", outside [0, ", s_.num_slots, ")");
  const std::int64_t stride = s_.pool_geometry().stride(s_.cfg);
  std::copy(S.begin(), S.end(), pools_[static_cast<std::size_t>(l)].begin() + static_cast<std::ptrdiff_t>(slot * stride));
}

void PooledTarget::copy_slot(std::int32_t src, std::int32_t dst) {
  for (std::int32_t l = 0; l < s_.cfg.num_layers; ++l) put(l, dst, get(l, src));
  conv_.copy(src, dst);
}

void PooledTarget::zero_fresh_slots(const std::vector<TargetRow>& rows) {
  const std::int64_t stride = s_.pool_geometry().stride(s_.cfg);
  for (const auto& r : rows)
    if (r.row.slot != kPadSlot && r.kind == RowKind::Prefill && r.fresh)
      for (auto& pool : pools_) {
        const auto at = pool.begin() + static_cast<std::ptrdiff_t>(r.row.slot * stride);
        std::fill(at, at + static_cast<std::ptrdiff_t>(s_.cfg.state_elems()), 0.0f);
      }
}

batch::Batch PooledTarget::step_batch(const std::vector<TargetRow>& rows, std::int64_t total_tokens) const {
  batch::Batch b;
  b.cfg = s_.cfg;
  b.pool = s_.pool_geometry();
  b.max_T = s_.max_T;
  b.total_tokens = total_tokens;
  for (const auto& r : rows) {
    BatchRow row = r.row;
    row.accepted = r.kind == RowKind::Prefill ? row.T : 0;
    b.rows.push_back(row);
  }
  b.validate();
  return b;
}

void PooledTarget::set_commit_counts(batch::Batch& b, const std::vector<TargetRow>& rows) {
  require(rows.size() == b.rows.size(), "commit", "commits ", rows.size(), " rows, the last step had ", b.rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i)
    b.rows[i].accepted = rows[i].kind == RowKind::Verify && rows[i].row.slot != kPadSlot ? rows[i].row.accepted : 0;
}

std::vector<std::vector<float>> PooledTarget::zero_outputs(const std::vector<SequenceInputs>& inputs) const {
  std::vector<std::vector<float>> out;
  for (const auto& in : inputs) out.emplace_back(static_cast<std::size_t>(in.T) * s_.cfg.HV * s_.cfg.V, 0.0f);
  return out;
}

std::vector<batch::Layer> PooledTarget::layers(std::vector<std::vector<float>>* scratch,
                                               std::vector<std::vector<float>>* payload) {
  std::vector<batch::Layer> v;
  for (std::size_t l = 0; l < pools_.size(); ++l) {
    batch::Layer layer;
    layer.params = &s_.params[l];
    layer.pool = &pools_[l];
    if (scratch) layer.scratch = &(*scratch)[l];
    if (payload) layer.payload = &(*payload)[l];
    v.push_back(layer);
  }
  return v;
}

}  // namespace replayssm::ref
