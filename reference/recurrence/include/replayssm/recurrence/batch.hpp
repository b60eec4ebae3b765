// replayssm/recurrence/batch.hpp — the batch-level reference: one function per CUDA kernel of
// optimized/include/replayssm/cuda/kernels.hpp, named like it and taking the same descriptors (BatchRow,
// PoolGeometry, PayloadGeometry and its page table), so a kernel and its reference read side by side. The
// arithmetic is the float kernel-faithful path of gdn.hpp / mtp.hpp; which comparison applies to which
// kernel (bit-exact or a tolerance, and why) is tabled in kernels.hpp and derived in docs/cuda.md.
//
// Host images of the kernels' buffers (float values, each representable in its storage dtype):
//   pool      one layer: num_slots * slot_stride values of cfg.state_dtype; slot s at s * slot_stride, value
//             head hv at + hv*K*V, the head in cfg.layout; the gap after HV*K*V is never read or written.
//   tokens    SequenceInputs over the batch's total_tokens packed rows (the kernels' q, k, v, a, b).
//   o         [total_tokens, HV, V] act-dtype values: real windows written, PAD windows written with zeros,
//             rows outside every window untouched.
//   scratch   full-state verify: [rows.size() * max_T, HV*K*V] state-dtype values; the state after window
//             token t of batch row r at (r * max_T + t) * HV*K*V (entries of PAD rows and of t >= T untouched).
//   payload   ReplaySSM verify: [num_pages * page_tokens, row_width] act-dtype values, one PayloadRowLayout
//             row [k | v | a | b] per window token at PayloadGeometry::physical_row (core/step.hpp).
//   records   decode ring (DecodeRingRecords below).
//
// Every function processes rows in batch order. The batch must have passed Batch::validate() (as the CUDA
// launchers' DeviceBatch::set_rows does); buffer sizes are checked on every call (Error naming the field).
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/mtp.hpp"
#include "replayssm/step.hpp"

namespace replayssm::ref::batch {

// One step's descriptors (mirrors cuda::DeviceBatch).
struct Batch {
  ModelConfig cfg;
  PoolGeometry pool;
  PayloadGeometry payload;                // ReplaySSM paths only
  std::int32_t max_T = 1;
  std::vector<BatchRow> rows;
  std::vector<std::int32_t> page_table;   // ReplaySSM paths only: rows.size() * payload.pages_per_row pages
  std::int64_t total_tokens = 0;

  // validate_batch(rows, pool, cfg, max_T, total_tokens, check_accepted = true) and, when page_table is not
  // empty, PayloadGeometry::validate_page_table plus pages_per_row * page_tokens >= max_T.
  void validate() const;
};

// What the verify functions store. Rounded mirrors the kernels: outputs rounded to the act dtype and states
// to the state dtype, each once from the F32 running values. Unrounded stores those F32 values themselves:
// the reference side of a GPU-vs-CPU comparison whose tolerance already includes the kernel's one rounding
// (docs/cuda.md, "Numerics"). The lifecycle targets always use Rounded.
enum class Store : std::uint8_t { Rounded, Unrounded };

// One layer's host buffers (mirrors cuda::LayerPointers). Which fields a function needs, it says.
struct Layer {
  const LayerParams* params = nullptr;
  std::vector<float>* pool = nullptr;
  std::vector<float>* payload = nullptr;
  std::vector<float>* scratch = nullptr;
};

// (1a) Full-state verify of one layer: o, and every window token's state into layer.scratch (each rounded
// once to the state dtype from the F32 running state: StateRounding::AtCommit; see Store). Reads layer.pool,
// params.
void verify_full_state(const Batch& b, const Layer& layer, const SequenceInputs& tokens, std::vector<float>& o,
                       Store store = Store::Rounded);

// (1a) Full-state commit of all layers: for every real row with n = accepted > 0 and write_slot != PAD,
// scratch state n-1 into pool slot write_slot. n = 0 writes nothing (in place or not). Needs pool, scratch.
void commit_copy(const Batch& b, const std::vector<Layer>& layers);

// (1b) ReplaySSM verify of one layer: the outputs of verify_full_state, and the raw k, v, a, b of every real
// row's window tokens into layer.payload at their paged rows. The pool is only read. Needs pool, payload,
// params and the batch's page table.
// hook: test-only (TokenHook: a fault, or a precision emulation), applied to every token step.
void verify_replay(const Batch& b, const Layer& layer, const SequenceInputs& tokens, std::vector<float>& o,
                   Store store = Store::Rounded, const TokenHook* hook = nullptr);

// (1c) ReplaySSM commit of all layers: every real row with n = accepted > 0 and write_slot != PAD replays its
// first n payload tokens from pool slot `slot` and stores the state, rounded once, into `write_slot`
// (replay_commit). n = 0 writes nothing. Needs pool, payload, params. hook: test-only (TokenHook).
void commit_replay(const Batch& b, const std::vector<Layer>& layers, const TokenHook* hook = nullptr);

// Decode-ring record buffers of one layer, in the CUDA kernel's layout:
//   u [num_slots, HV, ring_len, V] and k [num_slots, H, ring_len, K] act-dtype values (k normalised),
//   g [num_slots, HV, ring_len, a_width] F32 log-decays. Record j of slot s at index j.
struct DecodeRingRecords {
  std::int32_t num_slots = 0, ring_len = 1;
  std::vector<float> u, k, g;
  static DecodeRingRecords zeros(const ModelConfig& cfg, std::int32_t num_slots, std::int32_t ring_len);
  Record get(const ModelConfig& cfg, std::int32_t slot, std::int32_t j) const;
  void put(const ModelConfig& cfg, std::int32_t slot, std::int32_t j, const Record& r);
};

// (4) Decode-ring step of one layer (every real row T = 1): with m = write_pos[i] of row i, rebuilds S_m from
// the checkpoint (pool slot `slot`) and records 0..m-1 in the kernel's summation order
// (Reconstruction::SuffixSum), runs the token step, writes o (rounded to the act dtype). If m == ring_len-1
// (flush) the state, rounded to the state dtype, replaces the checkpoint in place and no record is appended;
// otherwise the token's record (u and k rounded to the act dtype, g F32) is stored at index m. The caller
// advances write_pos (m == ring_len-1 ? 0 : m+1). Error("write_pos[i]") outside [0, ring_len-1],
// Error("rows[i].T") for a real row with T != 1.
void ring_decode(const Batch& b, const Layer& layer, const std::vector<std::int32_t>& write_pos,
                 DecodeRingRecords& records, const SequenceInputs& tokens, std::vector<float>& o);

}  // namespace replayssm::ref::batch
