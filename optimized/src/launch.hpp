// Internal interface between the host launchers (host.cpp, g++) and the kernels (*.cu, nvcc).
// Plain-old-data only: no CUDA, Eigen or JSON headers, so both compilers see the same layout. The few sizes
// that both sides compute (V tile, token stage, work items) are constexpr functions here
// (REPLAYSSM_HOST_DEVICE), written once for both.
#pragma once

#include <cstdint>

#include "replayssm/host_device.hpp"

namespace replayssm::cuda::detail {

// State rows held by each lane (the register tile is kNR rows x 16 elements; tile.cuh).
// REPLAYSSM_NR is an experiment switch (docs/cuda.md): the per-element arithmetic does not depend on it.
#ifndef REPLAYSSM_NR
#define REPLAYSSM_NR 8
#endif
constexpr int kNR = REPLAYSSM_NR;
// Warps per CTA at most (launch_shape, host.cpp): 4 by default. REPLAYSSM_MAX_WARPS = 1 or 2 is the
// independent-warps experiment (docs/cuda.md): smaller CTAs, each staging its own tokens, more of them per SM.
// The launch bounds keep each kernel's register budget per thread: kBlockMax threads, kCtaScale x the CTAs.
#ifndef REPLAYSSM_MAX_WARPS
#define REPLAYSSM_MAX_WARPS 4
#endif
constexpr int kMaxWarps = REPLAYSSM_MAX_WARPS;
static_assert(kMaxWarps == 1 || kMaxWarps == 2 || kMaxWarps == 4, "REPLAYSSM_MAX_WARPS must be 1, 2 or 4");
constexpr int kBlockMax = 32 * kMaxWarps, kCtaScale = 4 / kMaxWarps;
// Resident CTAs per SM the per-tile kernels (the default schedule) are compiled for: 3 (at most 168
// registers; a few spills, measured faster: docs/cuda.md "Per-tile at three CTAs per SM"), except the KDA
// verify, compiled for 2 (242 registers, no spill; at 3 it needed a 48-byte stack frame and measured 1-8 %
// slower). The ring decode keeps the compiler's choice (not benchmarked). REPLAYSSM_TILE_CTAS = N > 0 compiles
// every per-tile kernel but the ring decode for N (an experiment switch).
#ifndef REPLAYSSM_TILE_CTAS
#define REPLAYSSM_TILE_CTAS 0
#endif
// REPLAYSSM_TILE_PAIR = 1: the per-tile kernels stage two tokens per warp at once, as the persistent ones do,
// with the state tile live in registers (an experiment switch).
#ifndef REPLAYSSM_TILE_PAIR
#define REPLAYSSM_TILE_PAIR 0
#endif
constexpr bool kTilePair = REPLAYSSM_TILE_PAIR != 0;
constexpr int tile_ctas(bool kda_verify) {
  return REPLAYSSM_TILE_CTAS > 0 ? REPLAYSSM_TILE_CTAS : (kda_verify ? 2 : 3);
}
// Resident CTAs per SM of the persistent kernels: the standard ones are compiled for 2 (their register
// budget), the dense ones (launch bounds for 3 CTAs: at most 168 registers, a few spills) are launched
// instead when 3 CTAs fit (dispatch.cuh). Which families have a dense kernel (the measured gains,
// docs/cuda.md): verify for 128 x 128 GDN, commit_replay for 128 x 128 GDN and KDA. The switches are
// experiments (same arithmetic either way): the dense KDA verify measured slower.
constexpr int kPipeCtas = 2, kDenseCtas = 3;
#ifndef REPLAYSSM_DENSE_KDA
#define REPLAYSSM_DENSE_KDA 0  // 1: dense verify for KDA too
#endif
#ifndef REPLAYSSM_DENSE_COMMIT
#define REPLAYSSM_DENSE_COMMIT 1  // 0: no dense commit_replay
#endif
#ifndef REPLAYSSM_VERIFY_HINT
#define REPLAYSSM_VERIFY_HINT 0  // 1: L2 prefetch of the next item's token inputs (a measured negative result)
#endif
constexpr bool kDenseKDA = REPLAYSSM_DENSE_KDA != 0, kDenseCommit = REPLAYSSM_DENSE_COMMIT != 0;
constexpr bool kVerifyInputHint = REPLAYSSM_VERIFY_HINT != 0;
// Tokens per stage chunk of the per-tile kernels (the persistent kernels stage max_T tokens at once).
constexpr int kTC = 8;

// Rows of one V tile: warps x kNR rows per lane x (32 / LK) rows per warp pass (LK lanes share a row).
REPLAYSSM_HOST_DEVICE constexpr int v_tile_rows(int warps, int LK) { return warps * kNR * (32 / LK); }

// Floats of the shared-memory token stage (token.cuh, Stage) for `cap` tokens: per token the normalised key
// kn [K], the scaled query qs [K], alpha and g [a_width] each, beta, and the V tile's values v [VT]. I is the
// caller's integer type (int on the device, std::size_t on the host), so each side keeps its arithmetic.
template <class I>
REPLAYSSM_HOST_DEVICE constexpr I stage_floats(I cap, int K, int a_width, int VT) {
  return cap * (2 * K + 2 * a_width + 1 + VT);
}
// Bytes of that stage rounded up to 16: the persistent kernels' state buffer starts there.
template <class I>
REPLAYSSM_HOST_DEVICE constexpr I stage_bytes_16(I cap, int K, int a_width, int VT) {
  return ((stage_floats<I>(cap, K, a_width, VT) * I(4) + I(15)) / I(16)) * I(16);
}

// Mirrors replayssm::BatchRow and replayssm::cuda::LayerPointers field for field (static_asserts in
// host.cpp keep them in step).
struct DevRow {
  std::int32_t slot, write_slot, T, token_offset, accepted;
};
struct DevLayer {
  void* pool;
  void* payload;
  void* scratch;
  const float* A_log;
  const float* dt_bias;
};

// How keys and queries are L2-normalised (replayssm::L2Norm); int-valued so DevCfg keeps its layout.
enum class L2Mode : int {
  RsqrtMul = 0,  // x * (1 / sqrt(s + eps))
  DivSqrt = 1,   // x / sqrt(s + eps)
  None = 2,      // not normalised
};

// The model configuration as the kernels read it, plus the launch shape.
struct DevCfg {
  int H, HV, K, V, G;
  int aw;  // gate width a_width: 1 for GDN, K for KDA (read through a_width(), as on ModelConfig)
  L2Mode l2norm;
  float l2_eps, q_scale;
  int round_beta_act;  // round beta through bf16 (only set when act dtype is BF16)
  int kda, kda_lower_bound;
  float lower_bound;
  int act_bf16, state_bf16, layout_vk;
  long long slot_stride;  // elements
  int LK, warps, tiles;   // lanes per state row, warps per CTA, V tiles per head
  REPLAYSSM_HOST_DEVICE constexpr int a_width() const { return aw; }
};

// The one kernel parameter of every tile and commit kernel (passed by value: it lives in the constant bank).
struct LaunchArgs {
  DevCfg c;
  const DevRow* rows = nullptr;
  int num_rows = 0, max_T = 1;
  // one layer (verify, ring decode): packed token inputs q, k, v, a (gate), b (beta) (TokenInputs)
  const void *q = nullptr, *k = nullptr, *v = nullptr, *a = nullptr, *b = nullptr;
  const float *A_log = nullptr, *dt_bias = nullptr;
  void* pool = nullptr;     // layer pool (verify: read only; ring decode: flush writes in place)
  void* o = nullptr;
  void* scratch = nullptr;  // verify: full-state intermediate states (nullptr: not stored)
  void* payload = nullptr;  // verify: ReplaySSM capture target (nullptr: no capture)
  // paged payload
  const std::int32_t* pages = nullptr;
  int page_tokens = 1, pages_per_row = 1;
  long long row_width = 0;
  // all-layer commits
  const DevLayer* layers = nullptr;
  int num_layers = 0;
  // decode ring (standard decode, T = 1): records and cursors
  void* ring_u = nullptr;
  void* ring_k = nullptr;
  float* ring_g = nullptr;
  const std::int32_t* write_pos = nullptr;
  int ring_len = 0;
  // Schedule of verify and commit_replay: 0 = one CTA per value-head tile, 1 = persistent grid with
  // cp.async prefetch of the next tile ([V,K] layout only). Same arithmetic either way.
  int persistent = 0;
  // fused verify (fused.cu): the previous step's batch rows (same row count as `rows`: row r's pending
  // commit is prev_rows[r]), its page table (same geometry) and this layer's payload of the previous step
  // (the other buffer of the pair: `payload` receives this step's capture). max_T is then the stage
  // capacity: the previous step's max_T plus this step's.
  const DevRow* prev_rows = nullptr;
  const std::int32_t* prev_pages = nullptr;
  const void* prev_payload = nullptr;
};

// Work items of a tile-kernel launch, one per (layer, batch row, value head, V tile): every layer of
// args.layers (all_layers: the commit) or the launch's own one (verify, ring decode).
REPLAYSSM_HOST_DEVICE constexpr long long tile_items(const LaunchArgs& a, bool all_layers) {
  return static_cast<long long>(all_layers ? a.num_layers : 1) * a.num_rows * a.c.HV * a.c.tiles;
}

// Each returns the cudaError_t of the launch (0 = success) as an int.
int launch_verify(const LaunchArgs& args, void* stream);         // verify.cu
int launch_commit_replay(const LaunchArgs& args, void* stream);  // commit.cu
int launch_commit_copy(const LaunchArgs& args, void* stream);    // commit.cu
int launch_ring_decode(const LaunchArgs& args, void* stream);    // ring_decode.cu
int launch_verify_fused(const LaunchArgs& args, void* stream);   // fused.cu
// fill_random.cu
int launch_fill_random(void* dst, std::int64_t n, int bf16, std::uint64_t seed, float scale, void* stream);
// fma_chains.cu: grid x 256 threads, each 8 independent FFMA chains of 16 x iters steps
int launch_fma_chains(float* out, unsigned grid, int iters, void* stream);

}  // namespace replayssm::cuda::detail
