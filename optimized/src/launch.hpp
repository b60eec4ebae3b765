// Internal interface between the host launchers (host.cpp, g++) and the kernels (kernels.cu, nvcc).
// Plain-old-data only: no CUDA, Eigen or JSON headers, so both compilers see the same layout.
#pragma once

#include <cstdint>

namespace replayssm::cuda::detail {

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

// The model configuration as the kernels read it, plus the launch shape.
struct DevCfg {
  int H, HV, K, V, G, a_width;
  int l2norm;          // 0 = x * (1/sqrt(s+eps)), 1 = x / sqrt(s+eps), 2 = none
  float l2_eps, q_scale;
  int round_beta_act;  // round beta through bf16 (only set when act dtype is BF16)
  int kda, kda_lower_bound;
  float lower_bound;
  int act_bf16, state_bf16, layout_vk;
  long long slot_stride;  // elements
  int LK, warps, tiles;   // lanes per state row, warps per CTA, V tiles per head
};

struct StepArgs {
  DevCfg c;
  const DevRow* rows = nullptr;
  int num_rows = 0, max_T = 1;
  // one layer (verify, ring decode)
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
  // ring decode
  void* ring_u = nullptr;
  void* ring_k = nullptr;
  float* ring_g = nullptr;
  const std::int32_t* write_pos = nullptr;
  int ring_L = 0;
  // Schedule of verify and commit_replay: 0 = one CTA per value-head tile, 1 = persistent grid with
  // cp.async prefetch of the next tile ([V,K] layout only). Same arithmetic either way.
  int persistent = 0;
};

// Each returns the cudaError_t of the launch (0 = success) as an int.
int launch_verify(const StepArgs& a, void* stream);
int launch_commit_replay(const StepArgs& a, void* stream);
int launch_commit_copy(const StepArgs& a, void* stream);
int launch_ring_decode(const StepArgs& a, void* stream);
int launch_fill_random(void* dst, std::int64_t n, int bf16, std::uint64_t seed, float scale, void* stream);

}  // namespace replayssm::cuda::detail
