// replayssm/cuda/kernels.hpp — CUDA kernels for GDN / KDA speculative-decode verify, state commit and
// standard decode on the decode ring (ring_decode), driven by the same descriptors as the CPU reference
// (replayssm/step.hpp).
//
// This header needs no CUDA header: device memory is passed as plain pointers, streams as `Stream`
// (the same type as cudaStream_t; nullptr is the legacy default stream).
//
// ------------------------------------------------------------------------------------------------------
// Math (one request, one value head hv, key head h = hv / (HV / H)); the per-token operation order is the
// one of reference/gdn.hpp and of the public implementations it cites (GDN arXiv 2412.06464; Kimi Delta
// Attention arXiv 2510.26692; HF transformers torch_recurrent_gated_delta_rule; FLA fused_recurrent):
//   l2norm(k), l2norm(q) * scale -> gate g, alpha = exp(g), beta = sigmoid(b) -> decay S <- alpha S ->
//   read kv = S k -> delta d = beta (v - kv) -> write S <- S + d k^T -> output o = S q (updated state).
// Everything runs in fp32 registers; inputs are widened from the activation dtype, states from the state
// dtype; outputs are rounded (RNE) to the activation dtype when stored, states to the state dtype.
//
// Two ways to verify T draft tokens (raw-payload ReplaySSM: TokenSpeed PR #1096, SGLang
// gdn_replayssm_spec_fold, FlashInfer PR #5314 — see the project notes):
//   full-state  verify_full_state() writes all T intermediate states to a scratch buffer; after sampling,
//               commit_copy() copies S_n (n = accepted tokens) into the pool.
//   ReplaySSM   verify_replay() leaves the checkpoint untouched and captures the raw per-token inputs
//               (k, v, a, b) into a paged payload buffer; after sampling, commit_replay() replays the first
//               n tokens of every layer from the payload into the pool, in one launch.
// Both paths run the same device step code with the same thread-to-element mapping and the same fixed
// reduction order, so their outputs and committed states are BIT-IDENTICAL (docs/cuda.md, "Numerics").
// Committed states are rounded to the state dtype once, from the fp32 running state ("round at commit").
//
// One reference per kernel: the CPU function of reference/recurrence/include/replayssm/recurrence/batch.hpp that each
// entry point is checked against, and how the GPU tests compare them:
//   kernel             reference                        comparison
//   verify_full_state  ref::batch::verify_full_state    GPU vs CPU float: gpu_vs_cpu_tolerance(dtype)
//                                                       (optimized/tests/gpu_support.cpp; derivation in
//                                                       docs/cuda.md, "Numerics")
//   verify_replay      ref::batch::verify_replay        outputs bit-identical to verify_full_state; payload
//                                                       bit-identical to the raw inputs
//   commit_copy        ref::batch::commit_copy          bit-exact copy of scratch state n-1
//   commit_replay      ref::batch::commit_replay        bit-identical to commit_copy after verify_full_state;
//                                                       vs CPU: gpu_vs_cpu_tolerance
//   ring_decode        ref::batch::ring_decode (closed  ring_tolerance in the GPU ring test
//                      form with suffix sums of         (optimized/tests/gpu_ring_test.cpp)
//                      log-decays, the kernel's
//                      summation order:
//                      ref::Reconstruction::SuffixSum)
//
// ------------------------------------------------------------------------------------------------------
// Shapes, layouts and units (elements, row-major, innermost last):
//   pool (per layer)    num_slots * slot_stride elements of cfg.state_dtype; slot s at s * slot_stride;
//                       value head hv at + hv*K*V; the head is [V,K] (cfg.layout VK) or [K,V] (KV).
//                       Elements between HV*K*V and slot_stride (the gap) are never read or written.
//   q, k (per layer)    [total_tokens, H, K]   cfg.act_dtype
//   v                   [total_tokens, HV, V]  cfg.act_dtype
//   a                   [total_tokens, HV, a_width] (a_width 1 for GDN, K for KDA) cfg.act_dtype
//   b                   [total_tokens, HV]     cfg.act_dtype
//   A_log               [HV] fp32;  dt_bias [HV * a_width] fp32
//   o                   [total_tokens, HV, V]  cfg.act_dtype; rows of PAD windows are written with zeros,
//                       rows outside every window are not touched
//   scratch (per layer) [max_rows, max_T, HV, K*V] cfg.state_dtype, the state after token t of batch row r
//                       at ((r * max_T + t) * HV + hv) * K*V, in cfg.layout
//   payload (per layer) [num_pages * page_tokens, PayloadGeometry::row_width(cfg)] cfg.act_dtype; token t of
//                       batch row r in physical row page_table[r * pages_per_row + t / page_tokens] *
//                       page_tokens + t % page_tokens; inside a row (PayloadGeometry::row_layout): k [H,K]
//                       at 0, v [HV,V] at H*K, a [HV,a_width] at H*K + HV*V, b [HV] at H*K + HV*V + HV*a_width
//                       (raw input bits)
//   decode ring         (per layer, DecodeRingRecords) u [num_slots, HV, ring_len, V] act dtype,
//                       k [num_slots, H, ring_len, K] act dtype (normalised keys), g [num_slots, HV, ring_len]
//                       fp32 log-decay ([num_slots, HV, ring_len, K] for KDA); record j of slot s at index j
//
// Supported: op GDN and KDA (both gate forms); K in {64, 128, 256}; V in [1, 1024]; layouts VK (tuned) and
// KV (same arithmetic, strided loads); state dtype F32/BF16; act dtype F32/BF16; l2norm rsqrt_mul, div_sqrt or
// none; any H, HV with HV % H == 0; slot_stride a multiple of 4. Device pointers must come from cudaMalloc (or be 16-byte aligned).
//
// Errors: every entry point validates its descriptors on the host before anything is launched and throws
// replayssm::Error naming the offending field ("rows[3].accepted", "page_table[5]", "cfg.K",
// "layers[2].pool", ...). Every CUDA call and every launch is checked; a failure throws Error whose field
// names the call ("cuda.cudaMalloc", "cuda.launch.commit_replay", ...) and whose message holds the CUDA
// error name and string.
// Launches are asynchronous: an error inside a kernel surfaces at the next checked call or synchronize().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/step.hpp"

struct CUstream_st;

namespace replayssm::cuda {

using Stream = CUstream_st*;

// Number of CUDA devices; 0 when cudaGetDeviceCount fails (no driver, no GPU). Never throws.
int device_count() noexcept;
// Name of device 0 ("NVIDIA H200"), or "" without a device.
std::string device_name();

// Throws Error("cfg.<field>") unless the kernels support cfg (list above).
void check_supported(const ModelConfig& cfg);

// Waits for all work on `s`; throws Error("cuda.cudaStreamSynchronize") on a (possibly earlier) fault.
void synchronize(Stream s = nullptr);

// The launch instance the last tiled launch of this host thread used (verify_full_state, verify_replay,
// commit_replay, verify_fused, ring_decode; not commit_copy): "per_tile" (one CTA per work item, the default
// schedule), "dense" (the persistent schedule compiled for 3 CTAs per SM, chosen when 3 fit: docs/cuda.md
// "Toward the bandwidth floor"), "persistent" (2 CTAs per SM), with its grid (CTAs), threads per CTA and
// dynamic shared memory in bytes, and the kernel's registers per thread, local memory (spill) bytes per
// thread and resident CTAs per SM at that shared memory, as the device reports them (queried by this call;
// throws Error("cuda.<call>") if the query fails); an empty instance before any launch. For tests and
// profiling: which instance runs is a performance decision, never an arithmetic one (the instances compute
// bitwise the same results).
struct LaunchInfo {
  std::string instance;
  unsigned grid = 0;
  int threads = 0;
  std::size_t smem = 0;
  int registers = 0;
  std::size_t local_bytes = 0;
  int ctas_per_sm = 0;
};
LaunchInfo last_launch();

// ------------------------------------------------------------------------------------------------------
// Device memory owned by the caller but allocated through these helpers (checked, freed on destruction).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);    // synchronous
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;  // synchronous
  void fill_bytes(int value);                                                  // synchronous memset

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Fills n elements of dtype (F32 or BF16) with values uniform in [-scale, scale), each derived from a hash
// of (seed, index): deterministic, fast, for benchmarks (tests draw inputs with ref::random_*).
void fill_random(void* dst, std::int64_t n, DType dtype, std::uint64_t seed, float scale, Stream s = nullptr);

// The benchmarks' fp32 rate probe: grid CTAs of 256 threads, each thread running 8 independent FFMA chains of
// 16 x iters steps (grid x 256 x 128 x iters FFMA lane instructions), storing one float per thread to
// out[grid x 256]. Throws Error("out") for a null out, Error("grid") / Error("iters") unless >= 1.
void fma_chains(float* out, unsigned grid, int iters, Stream s = nullptr);

// ------------------------------------------------------------------------------------------------------
// Per-layer device pointers. Which fields an entry point needs is said at the entry point.
struct LayerPointers {
  void* pool = nullptr;           // state pool of the layer (see shapes)
  void* payload = nullptr;        // ReplaySSM payload buffer of the layer
  void* scratch = nullptr;        // full-state scratch of the layer
  const float* A_log = nullptr;   // [HV]
  const float* dt_bias = nullptr; // [HV * a_width]
};

// One layer's packed token inputs (device, act dtype; shapes above).
struct TokenInputs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
};

// Per-layer record buffers of the decode ring (standard decode, T = 1; shapes above). The decode ring is not
// the spec ring of speculative decode (SpecRingGeometry in replayssm/step.hpp), which has no CUDA kernel.
struct DecodeRingRecords {
  void* u = nullptr;
  void* k = nullptr;
  float* g = nullptr;
};

// ------------------------------------------------------------------------------------------------------
// Host-side validation, usable without a GPU. Each throws Error naming the first offending field.
//
// validate_rows: check_supported(cfg) ("cfg.<field>"), then validate_batch(rows, pool, cfg, max_T, total_tokens,
// check_accepted) (replayssm/step.hpp: every window with T > 0, PAD rows' included, inside [0, total_tokens)
// and no two overlapping, "rows[i].token_offset"; no row's write_slot another row's read slot, since one commit
// launch reads and writes all rows at once, "rows[i].write_slot"; ...), plus what only the kernels require:
// pool.slot_stride a multiple of 4 ("pool.slot_stride").
void validate_rows(const ModelConfig& cfg, const PoolGeometry& pool, std::int32_t max_T,
                   std::int64_t total_tokens, const std::vector<BatchRow>& rows, bool check_accepted);
// validate_layers: size == pool.num_layers ("layers"); every named field non-null ("layers[i].pool", ...).
struct LayerNeeds {
  bool pool = true, payload = false, scratch = false, params = false;
};
void validate_layers(const std::vector<LayerPointers>& layers, const PoolGeometry& pool, LayerNeeds needs);

// ------------------------------------------------------------------------------------------------------
// How verify_full_state, verify_replay and commit_replay are scheduled. The per-element arithmetic is the
// same in both schedules, so results are bit-identical whichever is used (the tests mix them).
enum class Schedule : std::uint8_t {
  Auto,        // PerTile, for both layouts (measured faster than Persistent on the H200 for every 128 x 128
               // preset, batch and T: docs/cuda.md "Per-tile at three CTAs per SM")
  PerTile,     // one CTA per (row, value head, V tile) (per layer for the commit): load, compute, store;
               // compiled for 3 resident CTAs per SM (the KDA verify for 2)
  Persistent,  // about two resident CTAs per SM loop over the tiles; while one tile is computed from
               // registers, the next tile's state is prefetched into shared memory with cp.async ([V,K] only).
               // A row's whole token window is staged at once; when that stage (max_T tokens) would leave
               // fewer than two CTAs per SM, the launch uses PerTile instead
};
std::string to_string(Schedule s);

// ------------------------------------------------------------------------------------------------------
// A validated batch of one step resident on the device. Its device addresses never change after
// construction, so a CUDA graph captured with it can be replayed after set_rows()/set_accepted() with new
// contents (uploads happen outside capture).
class DeviceBatch {
 public:
  // max_rows bounds rows.size(); payload geometry is used by the ReplaySSM paths only.
  DeviceBatch(const ModelConfig& cfg, const PoolGeometry& pool, const PayloadGeometry& payload,
              std::int32_t max_T, std::int32_t max_rows);
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  // Validates (validate_rows with check_accepted; payload page table when non-empty:
  // PayloadGeometry::validate_page_table, pages_per_row * page_tokens >= max_T) and uploads on stream s.
  void set_rows(const std::vector<BatchRow>& rows, const std::vector<std::int32_t>& page_table,
                std::int64_t total_tokens, Stream s = nullptr);
  // Replaces every row's `accepted` (n in [0, T], "accepted[i]") and uploads.
  void set_accepted(const std::vector<std::int32_t>& accepted, Stream s = nullptr);
  // Decode ring cursors of standard decode: ring_len >= 1 records per slot ("ring_len"), write_pos[i] in
  // [0, ring_len - 1] for every row ("write_pos", "write_pos[i]"); uploads write_pos.
  void set_decode_ring(const std::vector<std::int32_t>& write_pos, std::int32_t ring_len, Stream s = nullptr);
  // Uploads the per-layer pointer table used by the all-layer commits (validate_layers first).
  void set_layers(const std::vector<LayerPointers>& layers, Stream s = nullptr);
  // Schedule of the verify and replay-commit launches (default Auto). Persistent with the [K,V] layout
  // throws Error("schedule").
  void set_schedule(Schedule sched);
  Schedule schedule() const { return sched_; }
  // Whether the persistent schedule is used (Auto resolved: it is not).
  bool persistent() const;

  const ModelConfig& cfg() const { return cfg_; }
  const PoolGeometry& pool() const { return pool_; }
  const PayloadGeometry& payload() const { return payload_; }
  std::int32_t max_T() const { return max_T_; }
  std::int32_t max_rows() const { return max_rows_; }
  const std::vector<BatchRow>& rows() const { return rows_; }
  std::int64_t total_tokens() const { return total_tokens_; }
  bool has_pages() const { return has_pages_; }
  std::int32_t decode_ring_len() const { return ring_len_; }
  const std::vector<std::int32_t>& write_pos() const { return write_pos_; }
  const std::vector<LayerPointers>& layers() const { return layers_; }

  // Device copies (internal use by the launchers).
  const BatchRow* d_rows() const { return d_rows_.as<const BatchRow>(); }
  const std::int32_t* d_page_table() const { return d_pages_.as<const std::int32_t>(); }
  const std::int32_t* d_write_pos() const { return d_write_pos_.as<const std::int32_t>(); }
  const LayerPointers* d_layers() const { return d_layers_.as<const LayerPointers>(); }

 private:
  ModelConfig cfg_;
  PoolGeometry pool_;
  PayloadGeometry payload_;
  std::int32_t max_T_, max_rows_;
  std::vector<BatchRow> rows_;
  std::vector<std::int32_t> pages_, write_pos_;
  std::vector<LayerPointers> layers_;
  std::int64_t total_tokens_ = 0;
  bool has_pages_ = false;
  std::int32_t ring_len_ = 0;
  Schedule sched_ = Schedule::Auto;
  DeviceBuffer d_rows_, d_pages_, d_write_pos_, d_layers_;
};

// ------------------------------------------------------------------------------------------------------
// Kernels. Each validates, launches asynchronously on `s` and checks the launch.

// (1a) Full-state verify of one layer: outputs o and the state after every window token into
// layer.scratch (each rounded to the state dtype from the fp32 running state). Reads layer.pool (slot of
// each row), layer.A_log / dt_bias. The pool is not written. Needs set_rows().
void verify_full_state(const DeviceBatch& b, const LayerPointers& layer, const TokenInputs& in, void* o,
                       Stream s = nullptr);

// (1a) Full-state commit of all layers in one launch: for every layer, real row with n = accepted > 0 and
// write_slot != PAD, copies scratch state n-1 into pool slot write_slot. n = 0 writes nothing. Needs
// set_rows() (with accepted) and set_layers() (pool, scratch).
void commit_copy(const DeviceBatch& b, Stream s = nullptr);

// (1b) ReplaySSM verify of one layer: same outputs as verify_full_state, bit for bit; captures the raw
// k, v, a, b rows of every window token into layer.payload through the page table; the pool is only read.
// Needs set_rows() with a page table.
void verify_replay(const DeviceBatch& b, const LayerPointers& layer, const TokenInputs& in, void* o,
                   Stream s = nullptr);

// (1c) ReplaySSM commit of all layers in one launch over (layer, row, value head [, V tile]): replays the
// first n = accepted tokens of each real row from the payload, starting at pool slot `slot`, and stores
// the state, rounded once, into slot `write_slot` (== slot: in place). n = 0 or write_slot == PAD: no
// write. Bit-identical to commit_copy after verify_full_state on the same inputs. Needs set_rows() with a
// page table and accepted, and set_layers() (pool, payload, A_log, dt_bias).
void commit_replay(const DeviceBatch& b, Stream s = nullptr);

// (1d) Fused ReplaySSM step of one layer: commits this layer's pending commit of the previous step and
// verifies this step, on one load of the state (docs/cuda.md, "Fused step"). `prev` is the previous step's
// batch (its rows with accepted, its page table), `prev_payload` this layer's payload buffer of that step,
// layer.payload the OTHER buffer of the pair (this step's capture; the two alternate per step). For every
// row r with a pending commit (prev row r real, write_slot != PAD, n = accepted > 0) the kernel loads the
// checkpoint prev.rows[r].slot, replays the n records, stores the state (rounded once) into
// prev.rows[r].write_slot, which must be this step's rows[r].slot, and continues the verify of rows[r] from
// the registers; rows without one verify from rows[r].slot. Outputs, payload and the committed state are
// bit-identical to commit_replay(prev) (this layer) followed by verify_replay(b). A commit that cannot be
// folded into this step (the row leaves the batch or becomes PAD, its slot is copied, freed or read by
// someone else first) must be resolved before with commit_replay on exactly those rows.
// Errors (validate_fused, before anything is launched): besides verify_replay's, "prev.rows" (row count),
// "prev.cfg" / "prev.pool" / "prev.payload" (another model, pool or payload geometry), "prev.page_table",
// "rows[i].slot" (a pending commit lands elsewhere than the row's slot), "prev_payload" (null or the same
// buffer as layer.payload). No row reads a slot another row's pending commit writes in the launch: that slot
// is the committing row's own slot, and validate_batch lets no two real rows share one.
void verify_fused(const DeviceBatch& b, const DeviceBatch& prev, const void* prev_payload, const LayerPointers& layer,
                  const TokenInputs& in, void* o, Stream s = nullptr);
// The row rules of verify_fused on their own (no GPU): rows.size() == prev_rows.size() ("prev.rows"); a
// pending commit of prev_rows[i] lands in rows[i].slot ("rows[i].slot").
void validate_fused(const std::vector<BatchRow>& rows, const std::vector<BatchRow>& prev_rows);

// (4) Standard decode on the decode ring, one layer (GDN and KDA, every row T = 1): with m = write_pos of the
// row, the kernel rebuilds S_m = exp(G_m) S_0 + sum_{j<m} exp(G_m - G_j) u_j k_j^T from the checkpoint S_0
// (pool slot `slot`) and the ring records, runs the token step and writes o. If m == ring_len - 1 (flush) it
// stores S_new into the checkpoint in place and appends nothing; otherwise it appends the record (u = delta,
// k = normalised key, g = log-decay) at index m and leaves the checkpoint untouched. The caller advances
// write_pos (m == ring_len - 1 ? 0 : m + 1). KDA keeps g per channel: g is then [num_slots, HV, ring_len, K].
// Needs set_rows() (all real rows T == 1) and set_decode_ring().
void ring_decode(const DeviceBatch& b, const LayerPointers& layer, const DecodeRingRecords& ring,
                 const TokenInputs& in, void* o, Stream s = nullptr);

// ------------------------------------------------------------------------------------------------------
// Launch decomposition (documented in docs/cuda.md): lanes-per-row LK = K / 16, each lane holds 16 state
// elements of each of its 8 rows (4 chunks of 4 consecutive k), a warp covers 8 * (32 / LK) rows, a CTA
// has W = min(4, ceil(V / rows_per_warp)) warps, and V is split into ceil(V / (W * rows_per_warp)) tiles.
struct LaunchShape {
  int lanes_per_row, rows_per_warp, warps, tiles;
};
LaunchShape launch_shape(const ModelConfig& cfg);

// Bytes of scratch a step needs per layer (full-state: max_rows * max_T * HV * K*V * state size;
// ReplaySSM payload: pages * page_tokens * row_width * act size).
std::int64_t full_state_scratch_bytes(const ModelConfig& cfg, std::int32_t max_rows, std::int32_t max_T);
std::int64_t payload_bytes(const ModelConfig& cfg, const PayloadGeometry& g);

}  // namespace replayssm::cuda
