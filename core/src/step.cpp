#include "replayssm/step.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "replayssm/error.hpp"

namespace replayssm {

void validate_batch(const std::vector<BatchRow>& rows, const PoolGeometry& pool, const ModelConfig& cfg,
                    std::int32_t max_T, std::int64_t total_tokens, bool check_accepted) {
  cfg.validate();
  require(pool.num_slots >= 1, "pool.num_slots", "must be >= 1, got ", pool.num_slots);
  require(pool.num_layers >= 1, "pool.num_layers", "must be >= 1, got ", pool.num_layers);
  require(pool.stride(cfg) >= cfg.state_elems(), "pool.slot_stride", "must be >= HV*K*V = ", cfg.state_elems(),
          ", got ", pool.slot_stride);
  require(max_T >= 1, "max_T", "must be >= 1, got ", max_T);
  std::set<std::int32_t> read_slots, write_slots;
  std::vector<std::pair<std::int64_t, std::int64_t>> windows;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& r = rows[i];
    const std::string f = "rows[" + std::to_string(i) + "].";
    require(r.slot >= kPadSlot && r.slot < pool.num_slots, f + "slot", "is ", r.slot, ", outside [-1, ",
            pool.num_slots, ")");
    require(r.write_slot >= kPadSlot && r.write_slot < pool.num_slots, f + "write_slot", "is ", r.write_slot,
            ", outside [-1, ", pool.num_slots, ")");
    const bool pad = r.slot == kPadSlot;
    require(r.T >= (pad ? 0 : 1) && r.T <= max_T, f + "T", "is ", r.T, ", outside [", pad ? 0 : 1, ", ", max_T,
            "]");
    if (check_accepted)
      require(r.accepted >= 0 && r.accepted <= r.T, f + "accepted", "is ", r.accepted, ", outside [0, T=", r.T,
              "]");
    if (pad) continue;
    require(read_slots.insert(r.slot).second, f + "slot", "slot ", r.slot, " is used by two rows");
    if (r.write_slot != kPadSlot)
      require(write_slots.insert(r.write_slot).second, f + "write_slot", "slot ", r.write_slot,
              " is written by two rows");
    require(r.token_offset >= 0 && r.token_offset + static_cast<std::int64_t>(r.T) <= total_tokens,
            f + "token_offset", "window [", r.token_offset, ", ", r.token_offset + r.T, ") outside [0, ",
            total_tokens, ")");
    windows.emplace_back(r.token_offset, r.token_offset + r.T);
  }
  // One commit reads and writes all rows at once: no row may write a slot another row reads.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& r = rows[i];
    if (r.slot == kPadSlot || r.write_slot == kPadSlot || r.write_slot == r.slot) continue;
    require(!read_slots.count(r.write_slot), "rows[" + std::to_string(i) + "].write_slot", "slot ", r.write_slot,
            " is read by another row of the same step");
  }
  std::sort(windows.begin(), windows.end());
  for (std::size_t i = 1; i < windows.size(); ++i)
    require(windows[i].first >= windows[i - 1].second, "rows.token_offset", "token windows [",
            windows[i - 1].first, ", ", windows[i - 1].second, ") and [", windows[i].first, ", ",
            windows[i].second, ") overlap");
}

void PayloadGeometry::validate_page_table(const std::vector<std::int32_t>& page_table, std::int32_t rows) const {
  require(page_tokens >= 1, "payload.page_tokens", "must be >= 1, got ", page_tokens);
  require(pages_per_row >= 1, "payload.pages_per_row", "must be >= 1, got ", pages_per_row);
  require(static_cast<std::int64_t>(page_table.size()) == static_cast<std::int64_t>(rows) * pages_per_row,
          "page_table", "has ", page_table.size(), " entries, expected rows * pages_per_row = ",
          static_cast<std::int64_t>(rows) * pages_per_row);
  std::set<std::int32_t> used;
  for (std::size_t i = 0; i < page_table.size(); ++i) {
    const std::string f = "page_table[" + std::to_string(i) + "]";
    require(page_table[i] >= 0 && page_table[i] < num_pages, f, "page ", page_table[i], " outside [0, ", num_pages,
            ")");
    require(used.insert(page_table[i]).second, f, "page ", page_table[i], " is mapped twice");
  }
}

std::int32_t RingGeometry::physical() const {
  std::int32_t p = 1;
  while (p < logical()) p <<= 1;
  return p;
}

void RingGeometry::validate() const {
  require(T >= 1, "ring.T", "must be >= 1, got ", T);
  require(B >= T, "ring.B", "history block must be >= T (so that L >= 2T), got B=", B, " T=", T);
}

RingCursors ring_reset(const RingGeometry& g) {
  g.validate();
  return RingCursors{0, 0, 2 * g.T > g.logical()};
}

RingCursors ring_commit(const RingCursors& c, const RingGeometry& g, std::int32_t accepted) {
  g.validate();
  require(accepted >= 0 && accepted <= g.T, "accepted", "is ", accepted, ", outside [0, T=", g.T, "]");
  RingCursors n = c;
  if (c.is_flush && accepted > 0) {
    n.base = (c.base + c.write_pos) & (g.physical() - 1);
    n.write_pos = accepted;
  } else if (c.is_flush) {
    n.write_pos = 0;
  } else {
    n.write_pos = c.write_pos + accepted;
  }
  n.is_flush = n.write_pos + 2 * g.T > g.logical();
  return n;
}

}  // namespace replayssm
