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
  std::vector<std::pair<std::int64_t, std::size_t>> starts;  // (token_offset, row) of every window with T > 0
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
    if (r.T > 0) {
      require(r.token_offset >= 0 && r.token_offset + static_cast<std::int64_t>(r.T) <= total_tokens,
              f + "token_offset", "window [", r.token_offset, ", ", r.token_offset + static_cast<std::int64_t>(r.T),
              ") outside [0, ", total_tokens, ")");
      starts.emplace_back(r.token_offset, i);
    }
    if (pad) continue;
    require(read_slots.insert(r.slot).second, f + "slot", "slot ", r.slot, " is used by two rows");
    if (r.write_slot != kPadSlot)
      require(write_slots.insert(r.write_slot).second, f + "write_slot", "slot ", r.write_slot,
              " is written by two rows");
  }
  // One commit reads and writes all rows at once: no row may write a slot another row reads.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& r = rows[i];
    if (r.slot == kPadSlot || r.write_slot == kPadSlot || r.write_slot == r.slot) continue;
    require(!read_slots.count(r.write_slot), "rows[" + std::to_string(i) + "].write_slot", "slot ", r.write_slot,
            " is read by another row of the same step");
  }
  std::sort(starts.begin(), starts.end());
  for (std::size_t j = 1; j < starts.size(); ++j) {
    const BatchRow& prev = rows[starts[j - 1].second];
    require(starts[j].first >= prev.token_offset + static_cast<std::int64_t>(prev.T),
            "rows[" + std::to_string(starts[j].second) + "].token_offset", "window starting at ", starts[j].first,
            " overlaps the window of rows[", starts[j - 1].second, "] [", prev.token_offset, ", ",
            prev.token_offset + static_cast<std::int64_t>(prev.T), ")");
  }
}

PayloadRowLayout PayloadGeometry::row_layout(const ModelConfig& cfg) {
  return payload_row_layout(cfg);
}

PayloadGeometry PayloadGeometry::sized(std::int32_t page_tokens, std::int32_t max_T, std::int32_t rows,
                                       std::int32_t copies) {
  require(page_tokens >= 1, "payload.page_tokens", "must be >= 1, got ", page_tokens);
  require(max_T >= 1, "max_T", "must be >= 1, got ", max_T);
  require(rows >= 1, "rows", "must be >= 1, got ", rows);
  require(copies >= 1, "copies", "must be >= 1, got ", copies);
  PayloadGeometry g;
  g.page_tokens = page_tokens;
  g.pages_per_row = (max_T + page_tokens - 1) / page_tokens;
  g.num_pages = copies * rows * g.pages_per_row;
  return g;
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

std::int32_t SpecRingGeometry::physical() const {
  std::int32_t p = 1;
  while (p < logical()) p <<= 1;
  return p;
}

void SpecRingGeometry::validate() const {
  require(T >= 1, "ring.T", "must be >= 1, got ", T);
  require(B >= T, "ring.B", "history block must be >= T (so that L >= 2T), got B=", B, " T=", T);
}

SpecRingCursors spec_ring_reset(const SpecRingGeometry& g) {
  g.validate();
  return SpecRingCursors{0, 0, 2 * g.T > g.logical()};
}

SpecRingCursors spec_ring_commit(const SpecRingCursors& c, const SpecRingGeometry& g, std::int32_t accepted) {
  g.validate();
  require(accepted >= 0 && accepted <= g.T, "accepted", "is ", accepted, ", outside [0, T=", g.T, "]");
  SpecRingCursors n = c;
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
