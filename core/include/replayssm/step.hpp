// replayssm/step.hpp — the description of one batched step, shared by the CPU reference and the CUDA
// launchers, so one description of a batch drives both.
//
// Vocabulary:
//   slot        — index of a request's checkpoint in a per-layer state pool; kPadSlot (-1) marks a padding
//                 row (CUDA-graph padding): it reads nothing, writes nothing and yields zero outputs.
//   T           — tokens in the row's window this step (1 = plain decode; 1 + num_draft for MTP verify;
//                 a prefill chunk is a row whose whole window is committed).
//   accepted n  — how many window tokens are committed, counting the target/bonus token: n in [0, T].
//                 n = 0 happens (discarded async steps, grammar-rejected drafts) and commits nothing.
//   token_offset— first row of this request's tokens in the packed per-token arrays [total_tokens, ...].
//
// Pools: per layer, `num_slots` slots; slot s of layer l starts at element s * slot_stride of that layer's
// pool; inside a slot, value head hv starts at hv * K * V, and the head is [K,V] or [V,K] (cfg.layout).
// slot_stride >= HV*K*V (a larger stride leaves a gap that must never be written).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/payload_row.hpp"

namespace replayssm {

inline constexpr std::int32_t kPadSlot = -1;

struct BatchRow {
  std::int32_t slot = kPadSlot;        // checkpoint slot read by verify / written by commit (in place)
  std::int32_t write_slot = kPadSlot;  // commit destination; == slot for in-place commit; kPadSlot = no write
  std::int32_t T = 0;                  // window length, 1..max_T (padding rows may carry any T in 0..max_T)
  std::int32_t token_offset = 0;       // first packed token row
  std::int32_t accepted = 0;           // n in [0, T], read by commit
};

struct PoolGeometry {
  std::int32_t num_layers = 1;
  std::int32_t num_slots = 1;
  std::int64_t slot_stride = 0;  // elements; 0 means HV*K*V
  std::int64_t stride(const ModelConfig& cfg) const { return slot_stride ? slot_stride : cfg.state_elems(); }
};

// Validates a batch on the host before anything is computed or launched. Checks: T in [1, max_T] for real
// rows (0..max_T for padding rows), accepted in [0, T] (when check_accepted), slot and write_slot in
// [-1, num_slots), no two real rows sharing a slot or a write_slot, every token window with T > 0 (PAD rows'
// too: their outputs are written with zeros) inside [0, total_tokens) and no two windows overlapping, and no
// row writing (write_slot != slot) a slot another row reads (one commit reads and writes every row at once).
// Throws Error("rows[i].<field>") naming the first offending row and field (for overlapping windows, the
// later-starting one).
void validate_batch(const std::vector<BatchRow>& rows, const PoolGeometry& pool, const ModelConfig& cfg,
                    std::int32_t max_T, std::int64_t total_tokens, bool check_accepted);

// Raw replay payload (ReplaySSM design 1): verify captures, per token, the raw inputs a commit needs to
// replay the token exactly: k [H,K], v [HV,V], a [HV, a_width], b [HV], in the activation dtype (q is never
// needed to advance the state). One payload row per token, laid out as [k | v | a | b] (PayloadRowLayout);
// rows are stored in pages of `page_tokens` rows. Window token t of batch row r lives at physical row
// page_table[r * pages_per_row + t / page_tokens] * page_tokens + t % page_tokens of the layer's payload
// buffer ([num_pages * page_tokens, row_width] elements). This is the one definition of the layout: the
// reference targets and the tests read it here; its formula, payload_row_layout (replayssm/payload_row.hpp),
// is also what the CUDA kernels evaluate on the device.

struct PayloadGeometry {
  std::int32_t page_tokens = 4;
  std::int32_t num_pages = 1;
  std::int32_t pages_per_row = 1;  // >= ceil(max_T / page_tokens)

  static PayloadRowLayout row_layout(const ModelConfig& cfg);
  static std::int64_t row_width(const ModelConfig& cfg) { return row_layout(cfg).width; }
  // A geometry for batches of up to `rows` rows of windows up to max_T tokens, with `copies` times the pages
  // one step maps (room for a fresh, permuted page table every step): pages_per_row = ceil(max_T /
  // page_tokens), num_pages = copies * rows * pages_per_row. Error("payload.page_tokens" / "max_T" / "rows")
  // for a value < 1.
  static PayloadGeometry sized(std::int32_t page_tokens, std::int32_t max_T, std::int32_t rows,
                               std::int32_t copies = 1);
  // Physical payload row of window token t of batch row r (no range checks: validate_page_table first).
  std::int64_t physical_row(const std::vector<std::int32_t>& page_table, std::int32_t r, std::int32_t t) const {
    return static_cast<std::int64_t>(page_table[static_cast<std::size_t>(r) * pages_per_row + t / page_tokens]) *
               page_tokens +
           t % page_tokens;
  }
  // Elements of one layer's payload buffer: num_pages * page_tokens * row_width(cfg).
  std::int64_t elems(const ModelConfig& cfg) const {
    return static_cast<std::int64_t>(num_pages) * page_tokens * row_width(cfg);
  }
  // Throws Error("page_table[i]") for an entry outside [0, num_pages) or a page used twice.
  void validate_page_table(const std::vector<std::int32_t>& page_table, std::int32_t rows) const;
};

// Corrected-update records (ReplaySSM design 2, vLLM/SGLang): per request a checkpoint plus records
// (u [HV,V], k [H,K] normalised, g [HV, a_width] log-decay), one per token, kept in a ring. Two rings use
// them, and the project names them apart:
//   spec ring   — speculative decode (SpecRingGeometry, SpecRingCursors below): a history block B >= T of
//                 committed records plus the current verify window of T records; logical length L = B + T,
//                 physical length P = next power of two >= L, physical index = (base + logical) & (P - 1).
//   decode ring — standard decode (T = 1): ring_len records; the step with write_pos == ring_len - 1 folds
//                 them into the checkpoint (the flush). See reference/mtp.hpp (DecodeRing) and the CUDA
//                 ring_decode kernel.
struct SpecRingGeometry {
  std::int32_t B = 0;  // history block
  std::int32_t T = 1;  // window
  std::int32_t logical() const { return B + T; }
  std::int32_t physical() const;
  void validate() const;  // B >= T >= 1; throws Error("ring.B") / Error("ring.T")
};

struct SpecRingCursors {
  std::int32_t base = 0;       // physical origin of the live history
  std::int32_t write_pos = 0;  // committed history length (live records base .. base+write_pos-1)
  bool is_flush = false;       // the next verify folds the history into the checkpoint first
};

// Cursors of a freshly (re)allocated slot: empty ring, is_flush = (2T > L).
SpecRingCursors spec_ring_reset(const SpecRingGeometry& g);
// Commit after a verify step with `accepted` tokens (n in [0, T]; Error("accepted") otherwise):
//   flushed, n > 0 : base <- (base + write_pos) mod P, write_pos <- n
//   flushed, n = 0 : write_pos <- 0
//   otherwise      : write_pos <- write_pos + n
//   next is_flush  <- write_pos + 2T > L
SpecRingCursors spec_ring_commit(const SpecRingCursors& c, const SpecRingGeometry& g, std::int32_t accepted);

}  // namespace replayssm
