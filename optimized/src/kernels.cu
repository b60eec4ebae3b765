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
// Staging (stage_tokens): a warp stages whole tokens and issues all of a token's loads (k, q, a, b,
// dt_bias, the V tile's values) before it uses any of them, so a token costs one memory latency; which
// thread loads an element changes no arithmetic.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

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
  constexpr int RW = 32 / LK, K = 16 * LK;  // K == c.K by construction
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    const bool ok = i * RW < rows_left;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      float x[4] = {0.f, 0.f, 0.f, 0.f};
      if (ok) {
        if (VK) {
          if (BF16) {
            const unsigned short* p = static_cast<const unsigned short*>(head) + static_cast<long long>(r0) * K + kl * 4;
            const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p + i * RW * K + ch * 4 * LK));
            x[0] = __uint_as_float(u.x << 16);
            x[1] = __uint_as_float(u.x & 0xffff0000u);
            x[2] = __uint_as_float(u.y << 16);
            x[3] = __uint_as_float(u.y & 0xffff0000u);
          } else {
            const float* p = static_cast<const float*>(head) + static_cast<long long>(r0) * K + kl * 4;
            const float4 f = __ldcs(reinterpret_cast<const float4*>(p + i * RW * K + ch * 4 * LK));
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const long long off = static_cast<long long>(k0 + e) * c.V + r0 + i * RW;
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

template <int LK, bool BF16, bool VK, int I0, int I1, bool CONST_K = false>
__device__ __forceinline__ void store_tile_t(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
  // CONST_K: row stride as a compile-time constant (K == 16 * LK == c.K); the generic kernels keep the
  // run-time stride, which lets the compiler keep their register use lower in the token loop.
  const int K = CONST_K ? 16 * LK : c.K;
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    const int row = r0 + i * RW;
    if (row >= c.V) continue;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      const float* x = &s[i][ch * 4];
      if (VK) {
        const long long off = static_cast<long long>(row) * K + k0;
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
template <int LK, int I0 = 0, int I1 = kNR>
__device__ __forceinline__ void store_tile(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  if (c.layout_vk) {
    if (c.state_bf16)
      store_tile_t<LK, true, true, I0, I1>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, true, I0, I1>(c, head, r0, kl, s);
  } else {
    if (c.state_bf16)
      store_tile_t<LK, true, false, I0, I1>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, false, I0, I1>(c, head, r0, kl, s);
  }
}

// [V,K]-only store for the persistent kernels: base pointer plus compile-time offsets (K == 16 * LK).
template <int LK, bool BF16>
__device__ __forceinline__ void store_tile_vk_t(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK, K = 16 * LK;
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    if (i * RW >= rows_left) continue;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const float* x = &s[i][ch * 4];
      if (BF16) {
        unsigned short* p = static_cast<unsigned short*>(head) + static_cast<long long>(r0) * K + kl * 4;
        uint2 u;
        u.x = unsigned(f_to_bf16_bits(x[0])) | (unsigned(f_to_bf16_bits(x[1])) << 16);
        u.y = unsigned(f_to_bf16_bits(x[2])) | (unsigned(f_to_bf16_bits(x[3])) << 16);
        __stcs(reinterpret_cast<uint2*>(p + i * RW * K + ch * 4 * LK), u);
      } else {
        float* p = static_cast<float*>(head) + static_cast<long long>(r0) * K + kl * 4;
        __stcs(reinterpret_cast<float4*>(p + i * RW * K + ch * 4 * LK), make_float4(x[0], x[1], x[2], x[3]));
      }
    }
  }
}
template <int LK>
__device__ __forceinline__ void store_tile_vk(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  if (c.state_bf16)
    store_tile_vk_t<LK, true>(c, head, r0, kl, s);
  else
    store_tile_vk_t<LK, false>(c, head, r0, kl, s);
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

// Per-token inputs of one (token, value head), as element offsets into their sources.
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

// Shared-memory staging of up to `cap` tokens (all float): per token the normalised key kn[K] and scaled
// query qs[K], the decay alpha and log-decay g ([a_width] each), beta, and the V-tile's values v[VT]. The
// per-tile kernels stage chunks of kTC tokens; the persistent kernels stage a row's whole window at once
// (cap = max_T).
constexpr int kTC = 8;
struct Stage {
  float *kn, *qs, *alpha, *g, *beta, *v;
  int K, AW, VT;
  __device__ Stage(float* sm, const DevCfg& c, int VT_, int cap) : K(c.K), AW(c.a_width), VT(VT_) {
    kn = sm;
    qs = kn + cap * K;
    alpha = qs + cap * K;  // 16-byte aligned: K is a multiple of 16
    g = alpha + cap * AW;
    beta = g + cap * AW;
    v = beta + cap;
  }
};

// L2 normalisation of a K-vector spread over one warp (lane holds x[e] = element lane + 32 e), times mul.
template <int E>
__device__ __forceinline__ void l2norm_warp(const DevCfg& c, const float (&x)[E], float mul, float (&y)[E]) {
  if (c.l2norm == 2) {
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(x[e], mul);
    return;
  }
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) ss = __fmaf_rn(x[e], x[e], ss);
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(kFull, ss, off));
  const float den = __fsqrt_rn(__fadd_rn(ss, c.l2_eps));
  if (c.l2norm == 0) {
    const float inv = __fdiv_rn(1.f, den);
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(__fmul_rn(x[e], inv), mul);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(__fdiv_rn(x[e], den), mul);
  }
}

// Raw bits of one activation element (bf16 zero-extended, or the f32 bits), its widening to float (exact:
// the same value ld_act would give) and its raw store (bits unchanged).
__device__ __forceinline__ unsigned ld_raw(const void* p, long long i, bool bf16) {
  return bf16 ? unsigned(__ldg(static_cast<const unsigned short*>(p) + i)) : __ldg(static_cast<const unsigned*>(p) + i);
}
__device__ __forceinline__ float widen(unsigned r, bool bf16) { return __uint_as_float(bf16 ? r << 16 : r); }
__device__ __forceinline__ void st_raw(void* p, long long i, unsigned r, bool bf16) {
  if (bf16)
    static_cast<unsigned short*>(p)[i] = static_cast<unsigned short>(r);
  else
    static_cast<unsigned*>(p)[i] = r;
}

// One warp's share of one token: the raw bits of k, q (lane + 32 e), a (KDA: lane + 32 e; GDN: the one
// element), dt_bias, b and the V tile's values (row tile_base + lane + 32 j). All of them are loaded before
// any is used, so a token costs one memory latency instead of one per input.
template <int LK, bool KDA>
struct TokRaw {
  static constexpr int E = LK / 2;   // K / 32
  static constexpr int AW = KDA ? E : 1;
  static constexpr int NV = 32 / LK;  // >= V tile / 32: VT = W * 8 * (32 / LK) with W <= 4 warps
  unsigned k[E], q[E], a[AW], b, v[NV];
  float dtb[AW];
};

template <int LK, bool KDA>
__device__ __forceinline__ void load_token(const DevCfg& c, const TokenSrc& src, bool want_q, const float* dt_bias_head,
                                           int tile_base, int VT, TokRaw<LK, KDA>& r) {
  using R = TokRaw<LK, KDA>;
  const int lane = threadIdx.x & 31;
  const bool bf = c.act_bf16;
#pragma unroll
  for (int e = 0; e < R::E; ++e) r.k[e] = ld_raw(src.k, src.k_off + lane + 32 * e, bf);
  if (want_q) {
#pragma unroll
    for (int e = 0; e < R::E; ++e) r.q[e] = ld_raw(src.q, src.q_off + lane + 32 * e, bf);
  }
#pragma unroll
  for (int e = 0; e < R::AW; ++e) {
    const int k = KDA ? lane + 32 * e : 0;
    r.a[e] = ld_raw(src.a, src.a_off + k, bf);
    r.dtb[e] = __ldg(dt_bias_head + k);
  }
  r.b = ld_raw(src.b, src.b_off, bf);
#pragma unroll
  for (int j = 0; j < R::NV; ++j) {
    const int i = lane + 32 * j, row = tile_base + i;
    r.v[j] = i < VT && row < c.V ? ld_raw(src.v, src.v_off + row, bf) : 0u;
  }
}

// The stage's token slot tt from the loaded bits: kn, qs (when want_q), alpha, g, beta and the V tile's
// values (rows >= V as 0). Every kernel calls this same function, so the per-token quantities are
// identical bits in verify, commit and ring decode.
template <int LK, bool KDA>
__device__ __forceinline__ void finish_token(const DevCfg& c, const TokRaw<LK, KDA>& r, bool want_q, float A_log,
                                             const Stage& st, int tt) {
  using R = TokRaw<LK, KDA>;
  constexpr int K = 16 * LK, E = R::E;
  const int lane = threadIdx.x & 31;
  const bool bf = c.act_bf16;
  float x[E], y[E];
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = widen(r.k[e], bf);
  l2norm_warp<E>(c, x, 1.f, y);
#pragma unroll
  for (int e = 0; e < E; ++e) st.kn[tt * K + lane + 32 * e] = y[e];
  if (want_q) {
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = widen(r.q[e], bf);
    l2norm_warp<E>(c, x, c.q_scale, y);
#pragma unroll
    for (int e = 0; e < E; ++e) st.qs[tt * K + lane + 32 * e] = y[e];
  }
  const float eA = expf(A_log);
  if (KDA) {
#pragma unroll
    for (int e = 0; e < R::AW; ++e) {
      const int k = lane + 32 * e;
      const float xa = __fadd_rn(widen(r.a[e], bf), r.dtb[e]);
      const float g = c.kda_lower_bound ? __fmul_rn(c.lower_bound, sigmoid_f(__fmul_rn(eA, xa)))
                                        : __fmul_rn(-eA, softplus_f(xa));
      st.g[tt * K + k] = g;
      st.alpha[tt * K + k] = expf(g);
    }
  } else if (lane == 0) {
    const float xa = __fadd_rn(widen(r.a[0], bf), r.dtb[0]);
    const float g = __fmul_rn(-eA, softplus_f(xa));
    st.g[tt] = g;
    st.alpha[tt] = expf(g);
  }
  if (lane == 0) {
    float beta = sigmoid_f(widen(r.b, bf));
    if (c.round_beta_act) beta = bf16_bits_to_f(f_to_bf16_bits(beta));
    st.beta[tt] = beta;
  }
#pragma unroll
  for (int j = 0; j < R::NV; ++j) {
    const int i = lane + 32 * j;
    if (i < st.VT) st.v[tt * st.VT + i] = widen(r.v[j], bf);
  }
}

// ReplaySSM capture: the raw bits of one token into its payload row pb (element offset): the V tile's values
// of value head hv, the key head's k row when cap_k, a and b of hv when cap_ab.
template <int LK, bool KDA>
__device__ __forceinline__ void capture_token(const DevCfg& c, const TokRaw<LK, KDA>& r, void* payload, long long pb,
                                              int h, int hv, int tile_base, int VT, bool cap_k, bool cap_ab) {
  using R = TokRaw<LK, KDA>;
  const int lane = threadIdx.x & 31;
  const bool bf = c.act_bf16;
  const long long v_at = static_cast<long long>(c.H) * c.K, a_at = v_at + static_cast<long long>(c.HV) * c.V;
  const long long b_at = a_at + static_cast<long long>(c.HV) * c.a_width;
#pragma unroll
  for (int j = 0; j < R::NV; ++j) {
    const int i = lane + 32 * j, row = tile_base + i;
    if (i < VT && row < c.V) st_raw(payload, pb + v_at + static_cast<long long>(hv) * c.V + row, r.v[j], bf);
  }
  if (cap_k) {
#pragma unroll
    for (int e = 0; e < R::E; ++e) st_raw(payload, pb + static_cast<long long>(h) * c.K + lane + 32 * e, r.k[e], bf);
  }
  if (cap_ab) {
#pragma unroll
    for (int e = 0; e < R::AW; ++e)
      if (KDA || lane == 0)
        st_raw(payload, pb + a_at + static_cast<long long>(hv) * c.a_width + (KDA ? lane + 32 * e : 0), r.a[e], bf);
    if (lane == 0) st_raw(payload, pb + b_at + hv, r.b, bf);
  }
}

// Stages the tokens [0, nt) of a window (chunk), warp w taking tokens w, w + W, ... (W = warps of the
// block). src(tt) gives a token's sources; after(raw, tt) runs on the loaded bits before they are consumed
// (the verify's payload capture). With PAIR a warp loads two of its tokens before finishing either (one
// memory latency for both); the per-tile kernels, whose state tile is live in registers while they stage,
// load one token at a time.
template <int LK, bool KDA, bool PAIR, class SrcF, class AfterF>
__device__ __forceinline__ void stage_tokens(const DevCfg& c, int nt, bool want_q, float A_log, const float* dtb,
                                             const Stage& st, int tile_base, SrcF&& src, AfterF&& after) {
  const int warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  for (int tt = warp; tt < nt; tt += (PAIR ? 2 : 1) * W) {
    TokRaw<LK, KDA> r0;
    load_token<LK, KDA>(c, src(tt), want_q, dtb, tile_base, st.VT, r0);
    if (PAIR && tt + W < nt) {
      TokRaw<LK, KDA> r1;
      load_token<LK, KDA>(c, src(tt + W), want_q, dtb, tile_base, st.VT, r1);
      after(r0, tt);
      after(r1, tt + W);
      finish_token<LK, KDA>(c, r0, want_q, A_log, st, tt);
      finish_token<LK, KDA>(c, r1, want_q, A_log, st, tt + W);
    } else {
      after(r0, tt);
      finish_token<LK, KDA>(c, r0, want_q, A_log, st, tt);
    }
  }
}

// Payload row (element offset) of token t0 + lane of batch row r for lanes < nt, 0 elsewhere: one load per
// lane for up to 32 tokens; a warp then takes token tt's row with chunk_row (tokens past 32 look it up).
__device__ __forceinline__ long long payload_row(const StepArgs& a, int r, int t) {
  return (static_cast<long long>(a.pages[static_cast<long long>(r) * a.pages_per_row + t / a.page_tokens]) *
              a.page_tokens + t % a.page_tokens) * a.row_width;
}
__device__ __forceinline__ long long chunk_rows(const StepArgs& a, int r, int t0, int nt) {
  const int lane = threadIdx.x & 31;
  return lane < nt ? payload_row(a, r, t0 + lane) : 0;
}
// Token tt's payload row (tt uniform across the warp).
__device__ __forceinline__ long long chunk_row(const StepArgs& a, long long rows, int r, int t0, int tt) {
  return tt < 32 ? __shfl_sync(kFull, rows, tt) : payload_row(a, r, t0 + tt);
}

// Loads 16 lane elements of a staged K-vector (chunks of 4 at kidx).
template <int LK>
__device__ __forceinline__ void lane_vec(const float* base, int kl, float (&x)[kEK]) {
#pragma unroll
  for (int ch = 0; ch < 4; ++ch) {
    const float4 f = *reinterpret_cast<const float4*>(base + ch * 4 * LK + kl * 4);
    x[ch * 4 + 0] = f.x, x[ch * 4 + 1] = f.y, x[ch * 4 + 2] = f.z, x[ch * 4 + 3] = f.w;
  }
}

// ---------------------------------------------------------------------------------------------------------
// The token step on the register tile (the one piece of state math every kernel shares):
//   decay s <- alpha s; kv = row_sum(s . kn); d = beta (v - kv); s <- s + kn d; o = row_sum(s . qs).
// Per row and lane the 16 products are summed as four FMA chains of 4 (one per chunk), combined as
// (c0 + c1) + (c2 + c3), then across the row's LK lanes by the xor butterfly.
template <int LK, bool KDA, bool OUT, int I0, int I1>
__device__ __forceinline__ void token_update(float (&s)[kNR][kEK], const float (&kn)[kEK], const float (&qs)[kEK],
                                             const float (&alpha)[KDA ? kEK : 1], float beta,
                                             const float (&v)[kNR], float (&d)[kNR], float (&o)[kNR]) {
  float p[kNR];
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    float acc[4];
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      acc[ch] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = ch * 4 + e;
        s[i][j] = __fmul_rn(alpha[KDA ? j : 0], s[i][j]);
        acc[ch] = __fmaf_rn(s[i][j], kn[j], acc[ch]);
      }
    }
    p[i] = __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3]));
  }
#pragma unroll
  for (int off = LK / 2; off >= 1; off >>= 1)
#pragma unroll
    for (int i = I0; i < I1; ++i) p[i] = __fadd_rn(p[i], __shfl_xor_sync(kFull, p[i], off));
#pragma unroll
  for (int i = I0; i < I1; ++i) d[i] = __fmul_rn(beta, __fsub_rn(v[i], p[i]));
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    float acc[4];
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      acc[ch] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = ch * 4 + e;
        s[i][j] = __fmaf_rn(kn[j], d[i], s[i][j]);
        if (OUT) acc[ch] = __fmaf_rn(s[i][j], qs[j], acc[ch]);
      }
    }
    o[i] = OUT ? __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])) : 0.f;
  }
  if (OUT) {
#pragma unroll
    for (int off = LK / 2; off >= 1; off >>= 1)
#pragma unroll
      for (int i = I0; i < I1; ++i) o[i] = __fadd_rn(o[i], __shfl_xor_sync(kFull, o[i], off));
  }
}

// Runs staged token slot tt on rows [I0, I1) of the lane's tile. lrow0 = the lane's first row inside the V tile.
template <int LK, bool KDA, bool OUT, int I0 = 0, int I1 = kNR>
__device__ __forceinline__ void run_staged(const Stage& st, int tt, int kl, int lrow0, float (&s)[kNR][kEK],
                                           float (&d)[kNR], float (&o)[kNR]) {
  constexpr int RW = 32 / LK;
  float kn[kEK], qs[kEK], alpha[KDA ? kEK : 1], v[kNR];
  lane_vec<LK>(st.kn + tt * st.K, kl, kn);
  if (OUT) lane_vec<LK>(st.qs + tt * st.K, kl, qs);
  if (KDA) {
    float al[kEK];
    lane_vec<LK>(st.alpha + tt * st.K, kl, al);
#pragma unroll
    for (int j = 0; j < (KDA ? kEK : 1); ++j) alpha[j] = al[j];
  } else {
    alpha[0] = st.alpha[tt];
  }
  const float beta = st.beta[tt];
#pragma unroll
  for (int i = I0; i < I1; ++i) v[i] = st.v[tt * st.VT + lrow0 + i * RW];
  token_update<LK, KDA, OUT, I0, I1>(s, kn, qs, alpha, beta, v, d, o);
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
template <int LK, int I0 = 0, int I1 = kNR, class F>
__device__ __forceinline__ void for_my_rows(const DevCfg& c, int r0, int kl, F&& f) {
  constexpr int RW = 32 / LK;
#pragma unroll
  for (int i0 = 0; i0 < kNR; i0 += (LK < kNR ? LK : kNR)) {
    const int i = i0 + kl;
    if (i >= I0 && i < I1) {
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

// Lane geometry inside the block: kl, the lane's first row inside the tile (lrow0), the tile's first row.
template <int LK>
struct LaneGeo {
  int kl, lrow0, tile_base, warp, VT;
  __device__ LaneGeo(const DevCfg& c, int tile) {
    constexpr int RW = 32 / LK;
    const int lane = threadIdx.x & 31;
    warp = threadIdx.x >> 5;
    kl = lane % LK;
    VT = c.warps * kNR * RW;
    lrow0 = warp * kNR * RW + lane / LK;
    tile_base = tile * VT;
  }
};


// Scheduling only (no effect on any element's arithmetic): with REPLAYSSM_ROW_GROUPS == 2 a lane runs all
// tokens of its rows 0..3 (and stores them) before rows 4..7, so the first group's compute and stores
// overlap the second group's loads.
#ifndef REPLAYSSM_ROW_GROUPS
#define REPLAYSSM_ROW_GROUPS 1
#endif
template <class F>
__device__ __forceinline__ void for_row_groups(F&& f) {
  using Z = std::integral_constant<int, 0>;
  using N = std::integral_constant<int, kNR>;
  using H = std::integral_constant<int, kNR / 2>;
  if (REPLAYSSM_ROW_GROUPS == 2) {
    f(Z{}, H{});
    f(H{}, N{});
  } else {
    f(Z{}, N{});
  }
}

// Sources of token tok (verify: the packed inputs) and of a payload row pb (commit: the captured bits).
__device__ __forceinline__ TokenSrc input_src(const StepArgs& a, long long tok, int h, int hv) {
  const DevCfg& c = a.c;
  TokenSrc src;
  src.k = a.k, src.k_off = (tok * c.H + h) * c.K;
  src.q = a.q, src.q_off = src.k_off;
  src.v = a.v, src.v_off = (tok * c.HV + hv) * c.V;
  src.a = a.a, src.a_off = (tok * c.HV + hv) * c.a_width;
  src.b = a.b, src.b_off = tok * c.HV + hv;
  return src;
}
__device__ __forceinline__ TokenSrc payload_src(const DevCfg& c, const void* payload, long long pb, int h, int hv) {
  const long long v_at = static_cast<long long>(c.H) * c.K, a_at = v_at + static_cast<long long>(c.HV) * c.V;
  const long long b_at = a_at + static_cast<long long>(c.HV) * c.a_width;
  TokenSrc src;
  src.k = payload, src.k_off = pb + static_cast<long long>(h) * c.K;
  src.q = nullptr, src.q_off = 0;
  src.v = payload, src.v_off = pb + v_at + static_cast<long long>(hv) * c.V;
  src.a = payload, src.a_off = pb + a_at + static_cast<long long>(hv) * c.a_width;
  src.b = payload, src.b_off = pb + b_at + hv;
  return src;
}

// Verify staging of tokens [t0, t0 + nt) of batch row r: the stage, plus (ReplaySSM) the raw bits into the
// payload. The CTA of tile 0 captures a and b, and for the first value head of a key head also the k row.
template <int LK, bool KDA, bool PAIR>
__device__ __forceinline__ void stage_verify_chunk(const StepArgs& a, const Stage& st, int r, long long tok0, int t0,
                                                   int nt, int h, int hv, int tile, int tile_base, float A_log,
                                                   const float* dtb) {
  const DevCfg& c = a.c;
  const long long pbl = a.payload ? chunk_rows(a, r, t0, nt) : 0;
  const bool cap_k = hv % c.G == 0 && tile == 0, cap_ab = tile == 0;
  stage_tokens<LK, KDA, PAIR>(
      c, nt, true, A_log, dtb, st, tile_base, [&](int tt) { return input_src(a, tok0 + tt, h, hv); },
      [&](const TokRaw<LK, KDA>& raw, int tt) {
        if (a.payload)
          capture_token<LK, KDA>(c, raw, a.payload, chunk_row(a, pbl, r, t0, tt), h, hv, tile_base, st.VT, cap_k,
                                 cap_ab);
      });
}

// Commit staging of payload tokens [t0, t0 + nt) of batch row r.
template <int LK, bool KDA, bool PAIR>
__device__ __forceinline__ void stage_commit_chunk(const StepArgs& a, const Stage& st, const void* payload, int r,
                                                   int t0, int nt, int h, int hv, int tile_base, float A_log,
                                                   const float* dtb) {
  const DevCfg& c = a.c;
  const long long pbl = chunk_rows(a, r, t0, nt);
  stage_tokens<LK, KDA, PAIR>(
      c, nt, false, A_log, dtb, st, tile_base,
      [&](int tt) { return payload_src(c, payload, chunk_row(a, pbl, r, t0, tt), h, hv); },
      [](const TokRaw<LK, KDA>&, int) {});
}

// ---------------------------------------------------------------------------------------------------------
// (1a)/(1b) verify: grid (row, value head, V tile); block 32 * warps; dynamic shared memory = the stage.
template <int LK, bool KDA>
__global__ void __launch_bounds__(128) verify_kernel(const StepArgs a) {
  extern __shared__ float4 smem4[];
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  const LaneGeo<LK> lg(c, at.tile);
  const int r0 = lg.tile_base + lg.lrow0, kl = lg.kl;
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
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, kTC);
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, a.pool, row.slot, hv), r0, kl, s);  // in flight during the prologue
  const float A_log = __ldg(a.A_log + hv);
  const float* dtb = a.dt_bias + static_cast<long long>(hv) * c.a_width;
  for (int t0 = 0; t0 < row.T; t0 += kTC) {
    const int nt = min(kTC, row.T - t0);
    if (t0 > 0) __syncthreads();  // the previous chunk's readers are done with the stage
    stage_verify_chunk<LK, KDA, false>(a, st, at.r, row.token_offset + t0, t0, nt, h, hv, at.tile, lg.tile_base, A_log,
                                       dtb);
    __syncthreads();
    auto rows_run = [&](auto i0c, auto i1c) {
      constexpr int I0 = decltype(i0c)::value, I1 = decltype(i1c)::value;
      for (int tt = 0; tt < nt; ++tt) {
        const int t = t0 + tt;
        float d[kNR], o[kNR];
        run_staged<LK, KDA, true, I0, I1>(st, tt, kl, lg.lrow0, s, d, o);
        const long long ob = ((row.token_offset + t) * static_cast<long long>(c.HV) + hv) * c.V;
        for_my_rows<LK, I0, I1>(c, r0, kl, [&](int i, int rr) { st_act(a.o, ob + rr, pick(o, i), bf); });
        if (a.scratch) {
          const long long es = c.state_bf16 ? 2 : 4;
          char* dst = static_cast<char*>(a.scratch) +
                      ((static_cast<long long>(at.r) * a.max_T + t) * c.HV + hv) * static_cast<long long>(c.K) * c.V * es;
          store_tile<LK, I0, I1>(c, dst, r0, kl, s);
        }
      }
    };
    for_row_groups(rows_run);
  }
}

// (1c) all-layer ReplaySSM commit: grid (layer, row, value head, V tile).
template <int LK, bool KDA>
__global__ void __launch_bounds__(128) commit_replay_kernel(const StepArgs a) {
  extern __shared__ float4 smem4[];
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  const DevRow row = a.rows[at.r];
  const int n = row.accepted;
  if (row.slot < 0 || row.write_slot < 0 || n <= 0) return;
  const LaneGeo<LK> lg(c, at.tile);
  const int r0 = lg.tile_base + lg.lrow0, kl = lg.kl;
  const DevLayer L = a.layers[at.layer];
  const int hv = at.hv, h = hv / c.G;
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, kTC);
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, L.pool, row.slot, hv), r0, kl, s);
  const float A_log = __ldg(L.A_log + hv);
  const float* dtb = L.dt_bias + static_cast<long long>(hv) * c.a_width;
  auto stage_chunk = [&](int t0, int nt) {
    stage_commit_chunk<LK, KDA, false>(a, st, L.payload, at.r, t0, nt, h, hv, lg.tile_base, A_log, dtb);
    __syncthreads();
  };
  // Whole chunks of kTC tokens first (only when n > kTC), then the last chunk row group by row group, each
  // group stored as soon as its last token is done.
  int t0 = 0;
  for (; t0 + kTC < n; t0 += kTC) {
    stage_chunk(t0, kTC);
    for (int tt = 0; tt < kTC; ++tt) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, false>(st, tt, kl, lg.lrow0, s, d, o);
    }
    __syncthreads();
  }
  const int nt = n - t0;
  stage_chunk(t0, nt);
  void* dst = state_head(c, L.pool, row.write_slot, hv);
  auto rows_run = [&](auto i0c, auto i1c) {
    constexpr int I0 = decltype(i0c)::value, I1 = decltype(i1c)::value;
    for (int tt = 0; tt < nt; ++tt) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, false, I0, I1>(st, tt, kl, lg.lrow0, s, d, o);
    }
    store_tile<LK, I0, I1>(c, dst, r0, kl, s);
  };
  for_row_groups(rows_run);
}

// ---------------------------------------------------------------------------------------------------------
// Persistent, prefetching schedule ([V,K] layout): a grid of about two CTAs per SM walks the work items
// (value-head tiles) with stride gridDim.x. While a CTA computes item i from registers, item i+1's state
// tile streams into shared memory with cp.async (each thread copies exactly the 16- or 8-byte chunks it
// will later read, so no other thread's copy is waited for). This keeps device memory busy through the
// compute phases, which the one-CTA-per-tile schedule leaves idle because all CTAs move through load,
// compute and store in lock step. The per-element arithmetic is the one of the kernels above.
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int bytes) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Chunk (i, ch) of thread tid lives at buf + ((i*4 + ch) * blockDim + tid) * chunk_bytes: consecutive
// threads hit consecutive addresses (no bank conflicts). Addresses are a base plus compile-time offsets.
template <int LK, int CB>
__device__ __forceinline__ void prefetch_tile_t(const DevCfg& c, const void* head, int r0, int kl, char* buf) {
  constexpr int RW = 32 / LK, K = 16 * LK, ES = CB / 4;
  const char* g = static_cast<const char*>(head) + (static_cast<long long>(r0) * K + kl * 4) * ES;
  char* sp = buf + threadIdx.x * CB;
  const int stride = static_cast<int>(blockDim.x) * CB;
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    if (i * RW >= rows_left) break;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) cp_async(sp + (i * 4 + ch) * stride, g + (i * RW * K + ch * 4 * LK) * ES, CB);
  }
  cp_async_commit();
}
template <int LK>
__device__ __forceinline__ void prefetch_tile(const DevCfg& c, const void* head, int r0, int kl, char* buf) {
  if (c.state_bf16)
    prefetch_tile_t<LK, 8>(c, head, r0, kl, buf);
  else
    prefetch_tile_t<LK, 16>(c, head, r0, kl, buf);
}

template <int LK>
__device__ __forceinline__ void tile_from_smem(const DevCfg& c, const char* buf, int r0, float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
  const int rows_left = c.V - r0;
  if (c.state_bf16) {
    const uint2* sp = reinterpret_cast<const uint2*>(buf) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        uint2 u = make_uint2(0u, 0u);
        if (i * RW < rows_left) u = sp[(i * 4 + ch) * static_cast<int>(blockDim.x)];
        s[i][ch * 4 + 0] = __uint_as_float(u.x << 16);
        s[i][ch * 4 + 1] = __uint_as_float(u.x & 0xffff0000u);
        s[i][ch * 4 + 2] = __uint_as_float(u.y << 16);
        s[i][ch * 4 + 3] = __uint_as_float(u.y & 0xffff0000u);
      }
  } else {
    const float4* sp = reinterpret_cast<const float4*>(buf) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i * RW < rows_left) f = sp[(i * 4 + ch) * static_cast<int>(blockDim.x)];
        s[i][ch * 4 + 0] = f.x, s[i][ch * 4 + 1] = f.y, s[i][ch * 4 + 2] = f.z, s[i][ch * 4 + 3] = f.w;
      }
  }
}

__device__ __forceinline__ Coords item_coords(const DevCfg& c, int num_rows, long long w) {
  Coords k;
  k.tile = static_cast<int>(w % c.tiles);
  w /= c.tiles;
  k.hv = static_cast<int>(w % c.HV);
  w /= c.HV;
  k.r = static_cast<int>(w % num_rows);
  k.layer = static_cast<int>(w / num_rows);
  return k;
}

__device__ __forceinline__ int stage_floats(const DevCfg& c, int VT, int cap) {
  return cap * (2 * c.K + 2 * c.a_width + 1 + VT);
}

template <int LK, bool KDA>
__global__ void __launch_bounds__(128, 1) verify_pipe_kernel(const StepArgs a) {
  extern __shared__ float4 smem4[];
  const DevCfg& c = a.c;
  const long long total = static_cast<long long>(a.num_rows) * c.HV * c.tiles;
  const LaneGeo<LK> lg(c, 0);
  const int kl = lg.kl;
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, a.max_T);
  char* buf = reinterpret_cast<char*>(smem4) + ((stage_floats(c, lg.VT, a.max_T) * 4 + 15) / 16) * 16;
  const bool bf = c.act_bf16;
  // Next item with a real row at or after w (stride gridDim.x); PAD items on the way get zero outputs.
  auto next_real = [&](long long w) {
    for (; w < total; w += gridDim.x) {
      const Coords at = item_coords(c, a.num_rows, w);
      const DevRow row = a.rows[at.r];
      if (row.slot >= 0) return w;
      const int r0 = at.tile * lg.VT + lg.lrow0;
      for (int t = 0; t < row.T; ++t) {
        const long long ob = (static_cast<long long>(row.token_offset + t) * c.HV + at.hv) * c.V;
        for_my_rows<LK>(c, r0, kl, [&](int, int rr) { st_act(a.o, ob + rr, 0.f, bf); });
      }
    }
    return total;
  };
  auto prefetch = [&](long long w) {
    const Coords at = item_coords(c, a.num_rows, w);
    prefetch_tile<LK>(c, state_head(c, a.pool, a.rows[at.r].slot, at.hv), at.tile * lg.VT + lg.lrow0, kl, buf);
  };
  long long cur = next_real(blockIdx.x);
  if (cur < total) prefetch(cur);
  while (cur < total) {
    const Coords at = item_coords(c, a.num_rows, cur);
    const DevRow row = a.rows[at.r];
    const int hv = at.hv, h = hv / c.G;
    const int tile_base = at.tile * lg.VT, r0 = tile_base + lg.lrow0;
    const float A_log = __ldg(a.A_log + hv);
    const float* dtb = a.dt_bias + static_cast<long long>(hv) * c.a_width;
    const long long nxt = next_real(cur + gridDim.x);
    float s[kNR][kEK];
    __syncthreads();  // the stage is free (previous item)
    // The whole window is staged before the state tile is taken into registers: room to load two tokens
    // per warp at once.
    stage_verify_chunk<LK, KDA, true>(a, st, at.r, row.token_offset, 0, row.T, h, hv, at.tile, tile_base, A_log, dtb);
    cp_async_wait_all();
    tile_from_smem<LK>(c, buf, r0, s);
    __syncthreads();  // stage written; state buffer consumed by every thread
    if (nxt < total) prefetch(nxt);
    for (int t = 0; t < row.T; ++t) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, true>(st, t, kl, lg.lrow0, s, d, o);
      const long long ob = ((row.token_offset + t) * static_cast<long long>(c.HV) + hv) * c.V;
      for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.o, ob + rr, pick(o, i), bf); });
      if (a.scratch) {
        const long long es = c.state_bf16 ? 2 : 4;
        char* dst = static_cast<char*>(a.scratch) +
                    ((static_cast<long long>(at.r) * a.max_T + t) * c.HV + hv) * static_cast<long long>(c.K) * c.V * es;
        store_tile_vk<LK>(c, dst, r0, kl, s);
      }
    }
    cur = nxt;
  }
}

template <int LK, bool KDA>
__global__ void __launch_bounds__(128, 1) commit_pipe_kernel(const StepArgs a) {
  extern __shared__ float4 smem4[];
  const DevCfg& c = a.c;
  const long long total = static_cast<long long>(a.num_layers) * a.num_rows * c.HV * c.tiles;
  const LaneGeo<LK> lg(c, 0);
  const int kl = lg.kl;
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, a.max_T);
  char* buf = reinterpret_cast<char*>(smem4) + ((stage_floats(c, lg.VT, a.max_T) * 4 + 15) / 16) * 16;
  auto next_real = [&](long long w) {
    for (; w < total; w += gridDim.x) {
      const DevRow row = a.rows[item_coords(c, a.num_rows, w).r];
      if (row.slot >= 0 && row.write_slot >= 0 && row.accepted > 0) return w;
    }
    return total;
  };
  auto prefetch = [&](long long w) {
    const Coords at = item_coords(c, a.num_rows, w);
    prefetch_tile<LK>(c, state_head(c, a.layers[at.layer].pool, a.rows[at.r].slot, at.hv),
                      at.tile * lg.VT + lg.lrow0, kl, buf);
  };
  long long cur = next_real(blockIdx.x);
  if (cur < total) prefetch(cur);
  while (cur < total) {
    const Coords at = item_coords(c, a.num_rows, cur);
    const DevRow row = a.rows[at.r];
    const DevLayer L = a.layers[at.layer];
    const int n = row.accepted, hv = at.hv, h = hv / c.G;
    const int tile_base = at.tile * lg.VT, r0 = tile_base + lg.lrow0;
    const float A_log = __ldg(L.A_log + hv);
    const float* dtb = L.dt_bias + static_cast<long long>(hv) * c.a_width;
    const long long nxt = next_real(cur + gridDim.x);
    float s[kNR][kEK];
    __syncthreads();  // the stage is free (previous item)
    stage_commit_chunk<LK, KDA, true>(a, st, L.payload, at.r, 0, n, h, hv, tile_base, A_log, dtb);
    cp_async_wait_all();
    tile_from_smem<LK>(c, buf, r0, s);
    __syncthreads();  // stage written; state buffer consumed by every thread
    if (nxt < total) prefetch(nxt);
    for (int t = 0; t < n; ++t) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, false>(st, t, kl, lg.lrow0, s, d, o);
    }
    store_tile_vk<LK>(c, state_head(c, L.pool, row.write_slot, hv), r0, kl, s);
    cur = nxt;
  }
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
  extern __shared__ float4 smem4[];
  const DevCfg& c = a.c;
  const Coords at = coords(c, a.num_rows);
  const LaneGeo<LK> lg(c, at.tile);
  const int r0 = lg.tile_base + lg.lrow0, kl = lg.kl;
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
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, kTC);
  const int L = a.ring_L, m = a.write_pos[at.r];
  constexpr int NG = KDA ? kEK : 1;
  float s[kNR][kEK];
  void* head = state_head(c, a.pool, row.slot, hv);
  load_tile<LK>(c, head, r0, kl, s);
  const long long tok = row.token_offset;
  if (lg.warp == 0) {
    TokRaw<LK, KDA> raw;
    load_token<LK, KDA>(c, input_src(a, tok, h, hv), true, a.dt_bias + static_cast<long long>(hv) * c.a_width,
                        lg.tile_base, lg.VT, raw);
    finish_token<LK, KDA>(c, raw, true, __ldg(a.A_log + hv), st, 0);
  }
  const long long rec0 = (static_cast<long long>(row.slot) * c.HV + hv) * L;  // u / g record base (no width)
  const long long krec0 = (static_cast<long long>(row.slot) * c.H + h) * L;
  auto g_rec = [&](int r, int j) {
    return KDA ? a.ring_g[(rec0 + r) * c.K + kidx<LK>(kl, j)] : a.ring_g[rec0 + r];
  };
  if (m > 0) {
    // S_m = exp(G) S_0 + sum_j u_j (w_j k_j)^T with w_j = exp(g_{j+1} + ... + g_{m-1}): the suffix sums are
    // accumulated from the newest record down, so no large prefix sums cancel.
    float Gs[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) Gs[j] = 0.f;
    for (int r = m - 1; r >= 0; --r)
#pragma unroll
      for (int j = 0; j < NG; ++j) Gs[j] = __fadd_rn(Gs[j], g_rec(r, j));
    float e0[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) e0[j] = expf(Gs[j]);
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int j = 0; j < kEK; ++j) s[i][j] = __fmul_rn(e0[KDA ? j : 0], s[i][j]);
    float Su[NG];
#pragma unroll
    for (int j = 0; j < NG; ++j) Su[j] = 0.f;
    for (int r = m - 1; r >= 0; --r) {
      float kw[kEK];
#pragma unroll
      for (int j = 0; j < kEK; ++j)
        kw[j] = __fmul_rn(expf(Su[KDA ? j : 0]), ld_act(a.ring_k, (krec0 + r) * c.K + kidx<LK>(kl, j), bf));
#pragma unroll
      for (int i = 0; i < kNR; ++i) {
        const int rr = r0 + i * RW;
        const float u = rr < c.V ? ld_act(a.ring_u, (rec0 + r) * c.V + rr, bf) : 0.f;
#pragma unroll
        for (int j = 0; j < kEK; ++j) s[i][j] = __fmaf_rn(u, kw[j], s[i][j]);
      }
#pragma unroll
      for (int j = 0; j < NG; ++j) Su[j] = __fadd_rn(Su[j], g_rec(r, j));
    }
  }
  __syncthreads();
  float d[kNR], o[kNR];
  run_staged<LK, KDA, true>(st, 0, kl, lg.lrow0, s, d, o);
  const long long ob = (tok * c.HV + hv) * c.V;
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.o, ob + rr, pick(o, i), bf); });
  if (m == L - 1) {  // flush: fold into the checkpoint in place, append nothing
    store_tile<LK>(c, head, r0, kl, s);
    return;
  }
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(a.ring_u, (rec0 + m) * c.V + rr, pick(d, i), bf); });
  if (at.tile == 0) {
    if (hv % c.G == 0)
      for (int i = threadIdx.x; i < c.K; i += blockDim.x) st_act(a.ring_k, (krec0 + m) * c.K + i, st.kn[i], bf);
    for (int i = threadIdx.x; i < c.a_width; i += blockDim.x) a.ring_g[(rec0 + m) * c.a_width + i] = st.g[i];
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
  // The stage (see Stage): kTC tokens of kn, qs [K], alpha, g [a_width], beta, v [V tile], all float.
  const int VT = a.c.warps * kNR * (32 / a.c.LK);
  const std::size_t smem = sizeof(float) * kTC * (2 * a.c.K + 2 * a.c.a_width + 1 + VT);
  if (smem > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);
  switch (a.c.LK * 2 + (a.c.kda ? 1 : 0)) {
    case 8: Sel<4, false>::kernel<<<grid, block, smem, st>>>(a); break;
    case 9: Sel<4, true>::kernel<<<grid, block, smem, st>>>(a); break;
    case 16: Sel<8, false>::kernel<<<grid, block, smem, st>>>(a); break;
    case 17: Sel<8, true>::kernel<<<grid, block, smem, st>>>(a); break;
    case 32: Sel<16, false>::kernel<<<grid, block, smem, st>>>(a); break;
    case 33: Sel<16, true>::kernel<<<grid, block, smem, st>>>(a); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

// Persistent launch: stage of max_T tokens + one state tile (W*32 threads * 32 chunks of 16 or 8 bytes) of
// dynamic shared memory, grid = min(items, resident CTAs per SM * SMs). Returns kNoFit, launching nothing,
// when fewer than two CTAs would be resident per SM (a long token window): the caller then uses the
// per-tile kernels, which stage the window in chunks (same arithmetic).
constexpr int kNoFit = -1;
template <class KernelT>
int launch_persistent(KernelT kernel, const StepArgs& a, long long items, void* stream) {
  if (items == 0) return 0;
  const int threads = 32 * a.c.warps;
  const int VT = a.c.warps * kNR * (32 / a.c.LK);
  const std::size_t stage =
      ((sizeof(float) * static_cast<std::size_t>(a.max_T) * (2 * a.c.K + 2 * a.c.a_width + 1 + VT) + 15) / 16) * 16;
  const std::size_t smem = stage + static_cast<std::size_t>(threads) * kNR * 4 * (a.c.state_bf16 ? 8 : 16);
  int dev = 0, sms = 0, optin = 0, per_sm = 0;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return static_cast<int>(e);
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return static_cast<int>(e);
  if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
    return static_cast<int>(e);
  if (smem > static_cast<std::size_t>(optin)) return kNoFit;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) !=
      cudaSuccess)
    return static_cast<int>(e);
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem)) != cudaSuccess)
    return static_cast<int>(e);
  if (per_sm < 2) return kNoFit;
  const long long resident = static_cast<long long>(per_sm) * sms;
  const unsigned grid = static_cast<unsigned>(items < resident ? items : resident);
  kernel<<<grid, threads, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <template <int, bool> class K>
int dispatch_persistent(const StepArgs& a, long long items, void* stream) {
  switch (a.c.LK * 2 + (a.c.kda ? 1 : 0)) {
    case 8: return launch_persistent(K<4, false>::kernel, a, items, stream);
    case 9: return launch_persistent(K<4, true>::kernel, a, items, stream);
    case 16: return launch_persistent(K<8, false>::kernel, a, items, stream);
    case 17: return launch_persistent(K<8, true>::kernel, a, items, stream);
    case 32: return launch_persistent(K<16, false>::kernel, a, items, stream);
    case 33: return launch_persistent(K<16, true>::kernel, a, items, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
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
template <int LK, bool KDA>
struct VerifyPipeSel {
  static constexpr auto kernel = verify_pipe_kernel<LK, KDA>;
};
template <int LK, bool KDA>
struct CommitPipeSel {
  static constexpr auto kernel = commit_pipe_kernel<LK, KDA>;
};

}  // namespace

int launch_verify(const StepArgs& a, void* stream) {
  const long long items = static_cast<long long>(a.num_rows) * a.c.HV * a.c.tiles;
  if (a.persistent) {
    const int rc = dispatch_persistent<VerifyPipeSel>(a, items, stream);
    if (rc != kNoFit) return rc;
  }
  return dispatch<VerifySel>(a, static_cast<unsigned>(items), stream);
}

int launch_commit_replay(const StepArgs& a, void* stream) {
  const long long items = static_cast<long long>(a.num_layers) * a.num_rows * a.c.HV * a.c.tiles;
  if (a.persistent) {
    const int rc = dispatch_persistent<CommitPipeSel>(a, items, stream);
    if (rc != kNoFit) return rc;
  }
  return dispatch<CommitSel>(a, static_cast<unsigned>(items), stream);
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
