// GDN / KDA kernels: full-state verify, ReplaySSM verify with payload capture, all-layer ReplaySSM commit,
// full-state commit copy, standard ring decode. See include/replayssm/cuda/kernels.hpp and docs/cuda.md.
//
// Thread-to-element mapping (shared by every kernel, which is what makes them agree bit for bit):
//   LK = K / 16 lanes share one state row (a value index v); lane kl = lane % LK holds the 16 elements
//   k = c*4*LK + kl*4 + e (c, e in 0..3) of each of its kNR = 8 rows, rows r0 + i*RW (RW = 32 / LK rows per
//   warp pass, r0 = tile base + warp * 8 * RW + lane / LK). In the [V,K] layout each chunk c is 4
//   consecutive k, so a warp instruction reads RW rows of 16*LK contiguous bytes (fp32) per row.
// Fixed reduction order: a lane sums its 16 products in the order (c, e) with fused multiply-adds, then
// an xor butterfly over the LK lanes of the row (offsets LK/2, ..., 1); every lane ends with the same bits.
// Every floating-point operation is written as an explicit round-to-nearest intrinsic (__fmul_rn,
// __fmaf_rn, ...), so the compiler can neither contract nor reorder them differently in different kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "launch.hpp"

namespace replayssm::cuda::detail {
namespace {

constexpr int kEK = 16;  // state elements per lane and row
constexpr int kNR = 8;   // rows per lane
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float bf16_bits_to_f(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }
__device__ __forceinline__ unsigned short f_to_bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// One activation element (f32 or bf16) widened to float.
__device__ __forceinline__ float ld_act(const void* p, long long i, bool bf16) {
  return bf16 ? bf16_bits_to_f(__ldg(static_cast<const unsigned short*>(p) + i))
              : __ldg(static_cast<const float*>(p) + i);
}
// One activation element stored with rounding.
__device__ __forceinline__ void st_act(void* p, long long i, float x, bool bf16) {
  if (bf16)
    static_cast<unsigned short*>(p)[i] = f_to_bf16_bits(x);
  else
    static_cast<float*>(p)[i] = x;
}
// Raw copy of one activation element (bits unchanged).
__device__ __forceinline__ void copy_act(void* dst, long long di, const void* src, long long si, bool bf16) {
  if (bf16)
    static_cast<unsigned short*>(dst)[di] = __ldg(static_cast<const unsigned short*>(src) + si);
  else
    static_cast<unsigned*>(dst)[di] = __ldg(static_cast<const unsigned*>(src) + si);
}

// Index of the j-th element (j = c*4 + e) of lane kl inside a row of K.
template <int LK>
__device__ __forceinline__ int kidx(int kl, int j) {
  return (j >> 2) * 4 * LK + kl * 4 + (j & 3);
}

template <int LK>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int off = LK / 2; off >= 1; off >>= 1) x = __fadd_rn(x, __shfl_xor_sync(kFull, x, off));
  return x;
}

// ---------------------------------------------------------------------------------------------------------
// State tile load / store. `head` points at the head's first element; rows >= V read as zero, never stored.
template <int LK, bool BF16, bool VK>
__device__ __forceinline__ void load_tile_t(const DevCfg& c, const void* head, int r0, int kl,
                                            float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    const int row = r0 + i * RW;
    const bool ok = row < c.V;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      float x[4] = {0.f, 0.f, 0.f, 0.f};
      if (ok) {
        if (VK) {
          const long long off = static_cast<long long>(row) * c.K + k0;
          if (BF16) {
            const uint2 u = __ldcs(reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(head) + off));
            x[0] = __uint_as_float(u.x << 16);
            x[1] = __uint_as_float(u.x & 0xffff0000u);
            x[2] = __uint_as_float(u.y << 16);
            x[3] = __uint_as_float(u.y & 0xffff0000u);
          } else {
            const float4 f = __ldcs(reinterpret_cast<const float4*>(static_cast<const float*>(head) + off));
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const long long off = static_cast<long long>(k0 + e) * c.V + row;
            x[e] = BF16 ? bf16_bits_to_f(__ldcs(static_cast<const unsigned short*>(head) + off))
                        : __ldcs(static_cast<const float*>(head) + off);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][ch * 4 + e] = x[e];
    }
  }
}

template <int LK, bool BF16, bool VK>
__device__ __forceinline__ void store_tile_t(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    const int row = r0 + i * RW;
    if (row >= c.V) continue;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      const float* x = &s[i][ch * 4];
      if (VK) {
        const long long off = static_cast<long long>(row) * c.K + k0;
        if (BF16) {
          uint2 u;
          u.x = unsigned(f_to_bf16_bits(x[0])) | (unsigned(f_to_bf16_bits(x[1])) << 16);
          u.y = unsigned(f_to_bf16_bits(x[2])) | (unsigned(f_to_bf16_bits(x[3])) << 16);
          __stcs(reinterpret_cast<uint2*>(static_cast<unsigned short*>(head) + off), u);
        } else {
          __stcs(reinterpret_cast<float4*>(static_cast<float*>(head) + off), make_float4(x[0], x[1], x[2], x[3]));
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long off = static_cast<long long>(k0 + e) * c.V + row;
          if (BF16)
            static_cast<unsigned short*>(head)[off] = f_to_bf16_bits(x[e]);
          else
            static_cast<float*>(head)[off] = x[e];
        }
      }
    }
  }
}

template <int LK>
__device__ __forceinline__ void load_tile(const DevCfg& c, const void* head, int r0, int kl, float (&s)[kNR][kEK]) {
  if (c.layout_vk) {
    if (c.state_bf16)
      load_tile_t<LK, true, true>(c, head, r0, kl, s);
    else
      load_tile_t<LK, false, true>(c, head, r0, kl, s);
  } else {
    if (c.state_bf16)
      load_tile_t<LK, true, false>(c, head, r0, kl, s);
    else
      load_tile_t<LK, false, false>(c, head, r0, kl, s);
  }
}
template <int LK>
__device__ __forceinline__ void store_tile(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  if (c.layout_vk) {
    if (c.state_bf16)
      store_tile_t<LK, true, true>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, true>(c, head, r0, kl, s);
  } else {
    if (c.state_bf16)
      store_tile_t<LK, true, false>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, false>(c, head, r0, kl, s);
  }
}

__device__ __forceinline__ char* state_head(const DevCfg& c, void* pool, int slot, int hv) {
  const long long es = c.state_bf16 ? 2 : 4;
  return static_cast<char*>(pool) +
         (static_cast<long long>(slot) * c.slot_stride + static_cast<long long>(hv) * c.K * c.V) * es;
}

// ---------------------------------------------------------------------------------------------------------
// Per-token scalar pieces (same formulas as reference/gdn.cpp; one rounding per operation).
__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x))); }

// L2-normalises the lane's 16 elements of a K-vector (act dtype at x + off) and multiplies by mul.
template <int LK>
__device__ __forceinline__ void l2norm_lane(const DevCfg& c, const void* x, long long off, int kl, float mul,
                                            float (&out)[kEK]) {
  const bool bf = c.act_bf16;
  float raw[kEK];
#pragma unroll
  for (int j = 0; j < kEK; ++j) raw[j] = ld_act(x, off + kidx<LK>(kl, j), bf);
  if (c.l2norm == 2) {
#pragma unroll
    for (int j = 0; j < kEK; ++j) out[j] = __fmul_rn(raw[j], mul);
    return;
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kEK; ++j) ss = __fmaf_rn(raw[j], raw[j], ss);
  ss = row_sum<LK>(ss);
  const float den = __fsqrt_rn(__fadd_rn(ss, c.l2_eps));
  if (c.l2norm == 0) {
    const float inv = __fdiv_rn(1.f, den);
#pragma unroll
    for (int j = 0; j < kEK; ++j) out[j] = __fmul_rn(__fmul_rn(raw[j], inv), mul);
  } else {
#pragma unroll
    for (int j = 0; j < kEK; ++j) out[j] = __fmul_rn(__fdiv_rn(raw[j], den), mul);
  }
}

// Log-decay of the lane's channels (KDA: 16 values; GDN: g[0]) from the gate input a (act dtype at a + off).
template <int LK, bool KDA>
__device__ __forceinline__ void log_decay_lane(const DevCfg& c, const void* a, long long off, float A_log,
                                               const float* dt_bias_head, int kl, float (&g)[KDA ? kEK : 1]) {
  const float eA = expf(A_log);
  if (!KDA) {
    const float x = __fadd_rn(ld_act(a, off, c.act_bf16), __ldg(dt_bias_head));
    g[0] = __fmul_rn(-eA, softplus_f(x));
  } else {
#pragma unroll
    for (int j = 0; j < (KDA ? kEK : 1); ++j) {
      const int k = kidx<LK>(kl, j);
      const float x = __fadd_rn(ld_act(a, off + k, c.act_bf16), __ldg(dt_bias_head + k));
      g[j] = c.kda_lower_bound ? __fmul_rn(c.lower_bound, sigmoid_f(__fmul_rn(eA, x)))
                               : __fmul_rn(-eA, softplus_f(x));
    }
  }
}

__device__ __forceinline__ float beta_of(const DevCfg& c, const void* b, long long off) {
  float beta = sigmoid_f(ld_act(b, off, c.act_bf16));
  if (c.round_beta_act) beta = bf16_bits_to_f(f_to_bf16_bits(beta));
  return beta;
}

// ---------------------------------------------------------------------------------------------------------
// The token step on the register tile (the one piece of math every kernel shares):
//   decay s <- alpha s; kv = row_sum(s . kn); d = beta (v - kv); s <- s + kn d; o = row_sum(s . qs).
template <int LK, bool KDA, bool OUT>
__device__ __forceinline__ void token_update(float (&s)[kNR][kEK], const float (&kn)[kEK], const float (&qs)[kEK],
                                             const float (&alpha)[KDA ? kEK : 1], float beta,
                                             const float (&v)[kNR], float (&d)[kNR], float (&o)[kNR]) {
  float p[kNR];
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kEK; ++j) {
      s[i][j] = __fmul_rn(alpha[KDA ? j : 0], s[i][j]);
      acc = __fmaf_rn(s[i][j], kn[j], acc);
    }
    p[i] = acc;
  }
#pragma unroll
  for (int off = LK / 2; off >= 1; off >>= 1)
#pragma unroll
    for (int i = 0; i < kNR; ++i) p[i] = __fadd_rn(p[i], __shfl_xor_sync(kFull, p[i], off));
#pragma unroll
  for (int i = 0; i < kNR; ++i) d[i] = __fmul_rn(beta, __fsub_rn(v[i], p[i]));
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kEK; ++j) {
      s[i][j] = __fmaf_rn(kn[j], d[i], s[i][j]);
      if (OUT) acc = __fmaf_rn(s[i][j], qs[j], acc);
    }
    o[i] = acc;
  }
  if (OUT) {
#pragma unroll
    for (int off = LK / 2; off >= 1; off >>= 1)
#pragma unroll
      for (int i = 0; i < kNR; ++i) o[i] = __fadd_rn(o[i], __shfl_xor_sync(kFull, o[i], off));
  }
}

// Per-token inputs of one (token, value head) read from a source with the given element offsets.
struct TokenSrc {
  const void* k;
  long long k_off;  // first element of key head h
  const void* q;
  long long q_off;
  const void* v;
  long long v_off;  // first element of value head hv
  const void* a;
  long long a_off;
  const void* b;
  long long b_off;
};

template <int LK, bool KDA, bool OUT>
__device__ __forceinline__ void run_token(const DevCfg& c, const TokenSrc& src, float A_log, const float* dt_bias_head,
                                          int kl, int r0, float (&s)[kNR][kEK], float (&kn)[kEK], float (&v)[kNR],
                                          float (&d)[kNR], float (&o)[kNR], float (&g)[KDA ? kEK : 1]) {
  constexpr int RW = 32 / LK;
  float qs[kEK];
  l2norm_lane<LK>(c, src.k, src.k_off, kl, 1.f, kn);
  if (OUT) l2norm_lane<LK>(c, src.q, src.q_off, kl, c.q_scale, qs);
  log_decay_lane<LK, KDA>(c, src.a, src.a_off, A_log, dt_bias_head, kl, g);
  float alpha[KDA ? kEK : 1];
#pragma unroll
  for (int j = 0; j < (KDA ? kEK : 1); ++j) alpha[j] = expf(g[j]);
  const float beta = beta_of(c, src.b, src.b_off);
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    const int row = r0 + i * RW;
    v[i] = row < c.V ? ld_act(src.v, src.v_off + row, c.act_bf16) : 0.f;
  }
  token_update<LK, KDA, OUT>(s, kn, qs, alpha, beta, v, d, o);
  (void)qs;
}

// Picks x[i] with a run-time i without dynamic register indexing.
__device__ __forceinline__ float pick(const float (&x)[kNR], int i) {
  float r = 0.f;
#pragma unroll
  for (int ii = 0; ii < kNR; ++ii)
    if (ii == i) r = x[ii];
  return r;
}

// Lane kl of a row group stores rows i = kl, kl + LK, ...: one coalesced store instruction per LK rows.
template <int LK, class F>
__device__ __forceinline__ void for_my_rows(const DevCfg& c, int r0, int kl, F&& f) {
  constexpr int RW = 32 / LK;
#pragma unroll
  for (int i0 = 0; i0 < kNR; i0 += (LK < kNR ? LK : kNR)) {
    const int i = i0 + kl;
    if (i < kNR) {
      const int row = r0 + i * RW;
      if (row < c.V) f(i, row);
    }
  }
}

struct Coords {
  int tile, hv, r, layer;
};
__device__ __forceinline__ Coords coords(const DevCfg& c, int num_rows) {
  long long x = blockIdx.x;
  Coords k;
  k.tile = static_cast<int>(x % c.tiles);
  x /= c.tiles;
  k.hv = static_cast<int>(x % c.HV);
  x /= c.HV;
  k.r = static_cast<int>(x % num_rows);
  k.layer = static_cast<int>(x / num_rows);
  return k;
}

template <int LK>
__device__ __forceinline__ int first_row(const DevCfg& c, int tile, int& kl) {
  constexpr int RW = 32 / LK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  kl = lane % LK;
  return tile * c.warps * kNR * RW + warp * kNR * RW + lane / LK;
}

// ---------------------------------------------------------------------------------------------------------
// (1a)/(1b) verify: grid (row, value head, V tile); block 32 * warps.
template <int LK, bool KDA>
__global__ void __launch_bounds__(128) verify_kernel(const StepArgs a) {
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  int kl;
  const int r0 = first_row<LK>(c, at.tile, kl);
  const DevRow row = a.rows[at.r];
  const int hv = at.hv, h = hv / c.G;
  const bool bf = c.act_bf16;
  if (row.slot < 0) {  // padding: zero outputs of the window, nothing else
    for (int t = 0; t < row.T; ++t) {
      const long long ob = (static_cast<long long>(row.token_offset + t) * c.HV + hv) * c.V;
      for_my_rows<LK>(c, r0, kl, [&](int, int rr) { st_act(a.o, ob + rr, 0.f, bf); });
    }
    return;
  }
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, a.pool, row.slot, hv), r0, kl, s);
  const float A_log = __ldg(a.A_log + hv);
  const float* dtb = a.dt_bias + static_cast<long long>(hv) * c.a_width;
  const bool lead_k = (hv % c.G == 0) && at.tile == 0;  // this CTA captures the key head's k row
  for (int t = 0; t < row.T; ++t) {
    const long long tok = row.token_offset + t;
    TokenSrc src;
    src.k = a.k, src.k_off = (tok * c.H + h) * c.K;
    src.q = a.q, src.q_off = src.k_off;
    src.v = a.v, src.v_off = (tok * c.HV + hv) * c.V;
    src.a = a.a, src.a_off = (tok * c.HV + hv) * c.a_width;
    src.b = a.b, src.b_off = tok * c.HV + hv;
    float kn[kEK], v[kNR], d[kNR], o[kNR], g[KDA ? kEK : 1];
    run_token<LK, KDA, true>(c, src, A_log, dtb, kl, r0, s, kn, v, d, o, g);
    const long long ob = (tok * c.HV + hv) * c.V;
    for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.o, ob + rr, pick(o, i), bf); });
    if (a.scratch) {
      const long long es = c.state_bf16 ? 2 : 4;
      char* dst = static_cast<char*>(a.scratch) +
                  ((static_cast<long long>(at.r) * a.max_T + t) * c.HV + hv) * static_cast<long long>(c.K) * c.V * es;
      store_tile<LK>(c, dst, r0, kl, s);
    }
    if (a.payload) {
      const long long prow =
          static_cast<long long>(a.pages[static_cast<long long>(at.r) * a.pages_per_row + t / a.page_tokens]) *
              a.page_tokens + t % a.page_tokens;
      const long long pb = prow * a.row_width;
      const long long v_at = static_cast<long long>(c.H) * c.K, a_at = v_at + static_cast<long long>(c.HV) * c.V;
      const long long b_at = a_at + static_cast<long long>(c.HV) * c.a_width;
      for_my_rows<LK>(c, r0, kl, [&](int, int rr) {
        copy_act(a.payload, pb + v_at + static_cast<long long>(hv) * c.V + rr, a.v, src.v_off + rr, bf);
      });
      if (lead_k)
        for (int i = threadIdx.x; i < c.K; i += blockDim.x)
          copy_act(a.payload, pb + static_cast<long long>(h) * c.K + i, a.k, src.k_off + i, bf);
      if (at.tile == 0) {
        for (int i = threadIdx.x; i < c.a_width; i += blockDim.x)
          copy_act(a.payload, pb + a_at + static_cast<long long>(hv) * c.a_width + i, a.a, src.a_off + i, bf);
        if (threadIdx.x == 0) copy_act(a.payload, pb + b_at + hv, a.b, src.b_off, bf);
      }
    }
  }
}

// (1c) all-layer ReplaySSM commit: grid (layer, row, value head, V tile).
template <int LK, bool KDA>
__global__ void __launch_bounds__(128) commit_replay_kernel(const StepArgs a) {
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  const DevRow row = a.rows[at.r];
  const int n = row.accepted;
  if (row.slot < 0 || row.write_slot < 0 || n <= 0) return;
  int kl;
  const int r0 = first_row<LK>(c, at.tile, kl);
  const DevLayer L = a.layers[at.layer];
  const int hv = at.hv, h = hv / c.G;
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, L.pool, row.slot, hv), r0, kl, s);
  const float A_log = __ldg(L.A_log + hv);
  const float* dtb = L.dt_bias + static_cast<long long>(hv) * c.a_width;
  const long long v_at = static_cast<long long>(c.H) * c.K, a_at = v_at + static_cast<long long>(c.HV) * c.V;
  const long long b_at = a_at + static_cast<long long>(c.HV) * c.a_width;
  for (int t = 0; t < n; ++t) {
    const long long prow =
        static_cast<long long>(a.pages[static_cast<long long>(at.r) * a.pages_per_row + t / a.page_tokens]) *
            a.page_tokens + t % a.page_tokens;
    const long long pb = prow * a.row_width;
    TokenSrc src;
    src.k = L.payload, src.k_off = pb + static_cast<long long>(h) * c.K;
    src.q = nullptr, src.q_off = 0;
    src.v = L.payload, src.v_off = pb + v_at + static_cast<long long>(hv) * c.V;
    src.a = L.payload, src.a_off = pb + a_at + static_cast<long long>(hv) * c.a_width;
    src.b = L.payload, src.b_off = pb + b_at + hv;
    float kn[kEK], v[kNR], d[kNR], o[kNR], g[KDA ? kEK : 1];
    run_token<LK, KDA, false>(c, src, A_log, dtb, kl, r0, s, kn, v, d, o, g);
  }
  store_tile<LK>(c, state_head(c, L.pool, row.write_slot, hv), r0, kl, s);
}

// Copies `bytes` from src to dst with the block's threads, U independent loads in flight per thread.
template <class W>
__device__ __forceinline__ void block_copy(const void* src_v, void* dst_v, long long bytes) {
  const W* src = static_cast<const W*>(src_v);
  W* dst = static_cast<W*>(dst_v);
  const int count = static_cast<int>(bytes / static_cast<long long>(sizeof(W)));
  constexpr int U = 8;
  const int step = static_cast<int>(blockDim.x);
  int i = threadIdx.x;
  for (; i + (U - 1) * step < count; i += U * step) {
    W tmp[U];
#pragma unroll
    for (int u = 0; u < U; ++u) tmp[u] = __ldcs(src + i + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) __stcs(dst + i + u * step, tmp[u]);
  }
  for (; i < count; i += step) __stcs(dst + i, __ldcs(src + i));
}

// (1a) all-layer full-state commit copy: grid (layer, row, value head).
__global__ void __launch_bounds__(256) commit_copy_kernel(const StepArgs a) {
  const DevCfg& c = a.c;
  const long long x = blockIdx.x;
  const int hv = static_cast<int>(x % c.HV);
  const int r = static_cast<int>((x / c.HV) % a.num_rows);
  const int layer = static_cast<int>(x / (static_cast<long long>(c.HV) * a.num_rows));
  const DevRow row = a.rows[r];
  const int n = row.accepted;
  if (row.slot < 0 || row.write_slot < 0 || n <= 0) return;
  const DevLayer L = a.layers[layer];
  const long long es = c.state_bf16 ? 2 : 4;
  const long long head_bytes = static_cast<long long>(c.K) * c.V * es;
  const char* src = static_cast<const char*>(L.scratch) + ((static_cast<long long>(r) * a.max_T + n - 1) * c.HV + hv) * head_bytes;
  char* dst = state_head(c, L.pool, row.write_slot, hv);
  // Heads are 16-byte aligned when slot_stride * element size is; otherwise (bf16 with slot_stride % 8 == 4)
  // only 8-byte aligned.
  if ((c.slot_stride * es) % 16 == 0)
    block_copy<uint4>(src, dst, head_bytes);
  else
    block_copy<uint2>(src, dst, head_bytes);
}

// (4) standard ring decode (T = 1): grid (row, value head, V tile).
template <int LK, bool KDA>
__global__ void __launch_bounds__(128) ring_decode_kernel(const StepArgs a) {
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  int kl;
  const int r0 = first_row<LK>(c, at.tile, kl);
  constexpr int RW = 32 / LK;
  const DevRow row = a.rows[at.r];
  const int hv = at.hv, h = hv / c.G;
  const bool bf = c.act_bf16;
  if (row.slot < 0) {
    for (int t = 0; t < row.T; ++t) {
      const long long ob = (static_cast<long long>(row.token_offset + t) * c.HV + hv) * c.V;
      for_my_rows<LK>(c, r0, kl, [&](int, int rr) { st_act(a.o, ob + rr, 0.f, bf); });
    }
    return;
  }
  const int L = a.ring_L, m = a.write_pos[at.r];
  constexpr int NG = KDA ? kEK : 1;
  float s[kNR][kEK];
  void* head = state_head(c, a.pool, row.slot, hv);
  load_tile<LK>(c, head, r0, kl, s);
  const long long rec0 = (static_cast<long long>(row.slot) * c.HV + hv) * L;  // u / g record base (no width)
  const long long krec0 = (static_cast<long long>(row.slot) * c.H + h) * L;
  if (m > 0) {
    // Total log-decay per channel, then S_m = exp(G_m) S_0 + sum_j u_j (exp(G_m - G_j) k_j)^T.
    float Gt[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) Gt[j] = 0.f;
    for (int r = 0; r < m; ++r)
#pragma unroll
      for (int j = 0; j < NG; ++j)
        Gt[j] = __fadd_rn(Gt[j], KDA ? a.ring_g[(rec0 + r) * c.K + kidx<LK>(kl, j)] : a.ring_g[rec0 + r]);
    float e0[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) e0[j] = expf(Gt[j]);
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int j = 0; j < kEK; ++j) s[i][j] = __fmul_rn(e0[KDA ? j : 0], s[i][j]);
    float G[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) G[j] = 0.f;
    for (int r = 0; r < m; ++r) {
      float w[NG];
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        G[j] = __fadd_rn(G[j], KDA ? a.ring_g[(rec0 + r) * c.K + kidx<LK>(kl, j)] : a.ring_g[rec0 + r]);
        w[j] = expf(__fsub_rn(Gt[j], G[j]));
      }
      float kw[kEK];
#pragma unroll
      for (int j = 0; j < kEK; ++j)
        kw[j] = __fmul_rn(w[KDA ? j : 0], ld_act(a.ring_k, (krec0 + r) * c.K + kidx<LK>(kl, j), bf));
#pragma unroll
      for (int i = 0; i < kNR; ++i) {
        const int rr = r0 + i * RW;
        const float u = rr < c.V ? ld_act(a.ring_u, (rec0 + r) * c.V + rr, bf) : 0.f;
#pragma unroll
        for (int j = 0; j < kEK; ++j) s[i][j] = __fmaf_rn(u, kw[j], s[i][j]);
      }
    }
  }
  const long long tok = row.token_offset;
  TokenSrc src;
  src.k = a.k, src.k_off = (tok * c.H + h) * c.K;
  src.q = a.q, src.q_off = src.k_off;
  src.v = a.v, src.v_off = (tok * c.HV + hv) * c.V;
  src.a = a.a, src.a_off = (tok * c.HV + hv) * c.a_width;
  src.b = a.b, src.b_off = tok * c.HV + hv;
  float kn[kEK], v[kNR], d[kNR], o[kNR], g[NG];
  run_token<LK, KDA, true>(c, src, __ldg(a.A_log + hv), a.dt_bias + static_cast<long long>(hv) * c.a_width, kl, r0, s,
                           kn, v, d, o, g);
  const long long ob = (tok * c.HV + hv) * c.V;
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.o, ob + rr, pick(o, i), bf); });
  if (m == L - 1) {  // flush: fold into the checkpoint in place, append nothing
    store_tile<LK>(c, head, r0, kl, s);
    return;
  }
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.ring_u, (rec0 + m) * c.V + rr, pick(d, i), bf); });
  if (at.tile == 0 && threadIdx.x < LK) {  // lanes 0..LK-1 of warp 0 hold every channel once
    if (hv % c.G == 0)
#pragma unroll
      for (int j = 0; j < kEK; ++j) st_act(a.ring_k, (krec0 + m) * c.K + kidx<LK>(kl, j), kn[j], bf);
    if (KDA) {
#pragma unroll
      for (int j = 0; j < NG; ++j) a.ring_g[(rec0 + m) * c.K + kidx<LK>(kl, j)] = g[j];
    } else if (threadIdx.x == 0) {
      a.ring_g[rec0 + m] = g[0];
    }
  }
}

// Deterministic fill for benchmarks: uniform in [-scale, scale) from a hash of (seed, index).
__global__ void fill_random_kernel(void* dst, long long n, int bf16, unsigned long long seed, float scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned long long z = seed + 0x9e3779b97f4a7c15ull * static_cast<unsigned long long>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;  // [0, 1)
    const float x = (2.f * u - 1.f) * scale;
    if (bf16)
      static_cast<unsigned short*>(dst)[i] = f_to_bf16_bits(x);
    else
      static_cast<float*>(dst)[i] = x;
  }
}

template <template <int, bool> class Sel>
int dispatch(const StepArgs& a, unsigned grid, void* stream) {
  const dim3 block(32 * a.c.warps);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (grid == 0) return 0;
  switch (a.c.LK * 2 + (a.c.kda ? 1 : 0)) {
    case 8: Sel<4, false>::kernel<<<grid, block, 0, st>>>(a); break;
    case 9: Sel<4, true>::kernel<<<grid, block, 0, st>>>(a); break;
    case 16: Sel<8, false>::kernel<<<grid, block, 0, st>>>(a); break;
    case 17: Sel<8, true>::kernel<<<grid, block, 0, st>>>(a); break;
    case 32: Sel<16, false>::kernel<<<grid, block, 0, st>>>(a); break;
    case 33: Sel<16, true>::kernel<<<grid, block, 0, st>>>(a); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

template <int LK, bool KDA>
struct VerifySel {
  static constexpr auto kernel = verify_kernel<LK, KDA>;
};
template <int LK, bool KDA>
struct CommitSel {
  static constexpr auto kernel = commit_replay_kernel<LK, KDA>;
};
template <int LK, bool KDA>
struct RingSel {
  static constexpr auto kernel = ring_decode_kernel<LK, KDA>;
};

}  // namespace

int launch_verify(const StepArgs& a, void* stream) {
  const unsigned grid = static_cast<unsigned>(static_cast<long long>(a.num_rows) * a.c.HV * a.c.tiles);
  return dispatch<VerifySel>(a, grid, stream);
}

int launch_commit_replay(const StepArgs& a, void* stream) {
  const unsigned grid =
      static_cast<unsigned>(static_cast<long long>(a.num_layers) * a.num_rows * a.c.HV * a.c.tiles);
  return dispatch<CommitSel>(a, grid, stream);
}

int launch_ring_decode(const StepArgs& a, void* stream) {
  const unsigned grid = static_cast<unsigned>(static_cast<long long>(a.num_rows) * a.c.HV * a.c.tiles);
  return dispatch<RingSel>(a, grid, stream);
}

int launch_commit_copy(const StepArgs& a, void* stream) {
  const unsigned grid = static_cast<unsigned>(static_cast<long long>(a.num_layers) * a.num_rows * a.c.HV);
  if (grid == 0) return 0;
  commit_copy_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_fill_random(void* dst, std::int64_t n, int bf16, std::uint64_t seed, float scale, void* stream) {
  if (n <= 0) return 0;
  const long long blocks = (n + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  fill_random_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, n, bf16, seed, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace replayssm::cuda::detail
