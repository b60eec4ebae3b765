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
// [-1, num_slots), no two real rows sharing a slot or a write_slot, token windows inside [0, total_tokens)
// and not overlapping, and no row writing (write_slot != slot) a slot another row reads (one commit reads and
// writes every row at once). Throws Error("rows[i].<field>") naming the first offending field.
void validate_batch(const std::vector<BatchRow>& rows, const PoolGeometry& pool, const ModelConfig& cfg,
                    std::int32_t max_T, std::int64_t total_tokens, bool check_accepted);

// Raw replay payload (ReplaySSM design 1): verify captures, per token, the raw inputs a commit needs to
// replay the token exactly: k [H,K], v [HV,V], a [HV, a_width], b [HV], in the activation dtype.
// One payload row per token, `row_width()` elements; rows are stored in pages of `page_tokens` rows.
// Row t of batch row r lives at physical row page_table[r * pages_per_row + t / page_tokens] * page_tokens
// + t % page_tokens of the layer's payload buffer.
struct PayloadGeometry {
  std::int32_t page_tokens = 4;
  std::int32_t num_pages = 1;
  std::int32_t pages_per_row = 1;  // = ceil(max_T / page_tokens)
  static std::int64_t row_width(const ModelConfig& cfg) {
    return static_cast<std::int64_t>(cfg.H) * cfg.K + static_cast<std::int64_t>(cfg.HV) * cfg.V +
           static_cast<std::int64_t>(cfg.HV) * cfg.a_width() + cfg.HV;
  }
  // Throws Error("page_table[i]") for an entry outside [0, num_pages) or a page used twice.
  void validate_page_table(const std::vector<std::int32_t>& page_table, std::int32_t rows) const;
};

// Corrected-update ring (ReplaySSM design 2, vLLM/SGLang): per request a checkpoint plus records
// (u [HV,V], k [H,K] normalised, g [HV, a_width] log-decay), one per token.
//
// Spec-decode ring geometry (history block B >= T): logical length L = B + T, physical length
// P = next power of two >= L, so physical index = (base + logical) & (P - 1).
// Standard decode: T = 1 and the flush rule is write_pos == L_std - 1 with L_std the ring length.
struct RingGeometry {
  std::int32_t B = 0;  // history block
  std::int32_t T = 1;  // window
  std::int32_t logical() const { return B + T; }
  std::int32_t physical() const;
  void validate() const;  // B >= T >= 1; throws Error("ring.B") / Error("ring.T")
};

struct RingCursors {
  std::int32_t base = 0;       // physical origin of the live history
  std::int32_t write_pos = 0;  // committed history length (live records base .. base+write_pos-1)
  bool is_flush = false;       // the next verify folds the history into the checkpoint first
};

// Cursors of a freshly (re)allocated slot: empty ring, is_flush = (2T > L).
RingCursors ring_reset(const RingGeometry& g);
// Commit after a verify step with `accepted` tokens (n in [0, T]; Error("accepted") otherwise):
//   flushed, n > 0 : base <- (base + write_pos) mod P, write_pos <- n
//   flushed, n = 0 : write_pos <- 0
//   otherwise      : write_pos <- write_pos + n
//   next is_flush  <- write_pos + 2T > L
RingCursors ring_commit(const RingCursors& c, const RingGeometry& g, std::int32_t accepted);

}  // namespace replayssm
