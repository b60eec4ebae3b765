// The per-token pieces every kernel shares: the scalar gate / beta formulas, the staging of a token window
// into shared memory (raw loads, L2 norms, gates, payload capture), payload row lookup, THE token update on
// the register tile, block coordinates, and the zero outputs of PAD rows.
//
// Staging (stage_tokens): a warp stages whole tokens and issues all of a token's loads (k, q, a, b,
// dt_bias, the V tile's values) before it uses any of them, so a token costs one memory latency; which
// thread loads an element changes no arithmetic.
//
// Device code only, all __forceinline__ (see tile.cuh).
#pragma once

#include "launch.hpp"
#include "replayssm/payload_row.hpp"
#include "tile.cuh"

namespace replayssm::cuda::detail {

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

// Shared-memory staging of up to `cap` tokens (all float; size: stage_floats in launch.hpp): per token the
// normalised key kn[K] and scaled query qs[K], the decay alpha and log-decay g ([a_width] each), beta, and
// the V-tile's values v[VT]. The per-tile kernels stage chunks of kTC tokens; the persistent kernels stage a
// row's whole window at once (cap = max_T).
struct Stage {
  float *kn, *qs, *alpha, *g, *beta, *v;
  int K, AW, VT;
  __device__ Stage(float* sm, const DevCfg& c, int VT_, int cap) : K(c.K), AW(c.a_width()), VT(VT_) {
    kn = sm;
    qs = kn + cap * K;
    alpha = qs + cap * K;  // 16-byte aligned: K is a multiple of 16
    g = alpha + cap * AW;
    beta = g + cap * AW;
    v = beta + cap;
  }
};

// The same stage seen from token slot `off` on: slot tt of the result is slot off + tt of st (the fused
// verify stages the previous step's records at slots [0, n) and this step's window at [n, n + T)).
__device__ __forceinline__ Stage stage_from(Stage st, int off) {
  st.kn += off * st.K;
  st.qs += off * st.K;
  st.alpha += off * st.AW;
  st.g += off * st.AW;
  st.beta += off;
  st.v += off * st.VT;
  return st;
}

// L2 normalisation of a K-vector spread over one warp (lane holds x[e] = element lane + 32 e), times mul.
template <int E>
__device__ __forceinline__ void l2norm_warp(const DevCfg& c, const float (&x)[E], float mul, float (&y)[E]) {
  if (c.l2norm == L2Mode::None) {
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
  if (c.l2norm == L2Mode::RsqrtMul) {
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

// The payload row layout of this configuration: the one formula (replayssm/payload_row.hpp) that
// PayloadGeometry::row_layout evaluates on the host, evaluated here from the dimensions the kernel holds.
__device__ __forceinline__ PayloadRowLayout payload_layout(const DevCfg& c) {
  return payload_row_layout(c);
}

// ReplaySSM capture: the raw bits of one token into its payload row pb (element offset): the V tile's values
// of value head hv, the key head's k row when cap_k, a and b of hv when cap_ab.
template <int LK, bool KDA>
__device__ __forceinline__ void capture_token(const DevCfg& c, const TokRaw<LK, KDA>& r, void* payload, long long pb,
                                              int h, int hv, int tile_base, int VT, bool cap_k, bool cap_ab) {
  using R = TokRaw<LK, KDA>;
  const int lane = threadIdx.x & 31;
  const bool bf = c.act_bf16;
  const PayloadRowLayout pay = payload_layout(c);
#pragma unroll
  for (int j = 0; j < R::NV; ++j) {
    const int i = lane + 32 * j, row = tile_base + i;
    if (i < VT && row < c.V) st_raw(payload, pb + pay.v + static_cast<long long>(hv) * c.V + row, r.v[j], bf);
  }
  if (cap_k) {
#pragma unroll
    for (int e = 0; e < R::E; ++e)
      st_raw(payload, pb + pay.k + static_cast<long long>(h) * c.K + lane + 32 * e, r.k[e], bf);
  }
  if (cap_ab) {
#pragma unroll
    for (int e = 0; e < R::AW; ++e)
      if (KDA || lane == 0)
        st_raw(payload, pb + pay.a + static_cast<long long>(hv) * c.a_width() + (KDA ? lane + 32 * e : 0), r.a[e], bf);
    if (lane == 0) st_raw(payload, pb + pay.b + hv, r.b, bf);
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
// Physical row as PayloadGeometry::physical_row, times the row width (the host's PayloadGeometry::row_width).
__device__ __forceinline__ long long payload_row(const LaunchArgs& args, int r, int t) {
  return (static_cast<long long>(args.pages[static_cast<long long>(r) * args.pages_per_row + t / args.page_tokens]) *
              args.page_tokens + t % args.page_tokens) * args.row_width;
}
__device__ __forceinline__ long long chunk_rows(const LaunchArgs& args, int r, int t0, int nt) {
  const int lane = threadIdx.x & 31;
  return lane < nt ? payload_row(args, r, t0 + lane) : 0;
}
// Token tt's payload row (tt uniform across the warp).
__device__ __forceinline__ long long chunk_row(const LaunchArgs& args, long long rows, int r, int t0, int tt) {
  return tt < 32 ? __shfl_sync(kFull, rows, tt) : payload_row(args, r, t0 + tt);
}

// ---------------------------------------------------------------------------------------------------------
// The token step on the register tile (the one piece of state math every kernel shares):
//   decay s <- alpha s; kv = row_sum(s . kn); d = beta (v - kv); s <- s + kn d; o = row_sum(s . qs).
// Per row and lane the 16 products are summed as four FMA chains of 4 (one per chunk), combined as
// (c0 + c1) + (c2 + c3) (update_rows), then across the row's LK lanes by the xor butterfly (row_sum).

// Rows [I0, I1) of the lane's tile: every element s[i][j] <- upd(i, j, s[i][j]), and with DOT the lane's part
// of the new row times w, out[i] = (c0 + c1) + (c2 + c3) where chunk c sums its 4 products in one FMA chain
// (without DOT, out[i] = 0).
template <bool DOT, int I0, int I1, class U>
__device__ __forceinline__ void update_rows(float (&s)[kNR][kEK], U&& upd, const float (&w)[kEK], float (&out)[kNR]) {
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    float acc[4];
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      acc[ch] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = ch * 4 + e;
        s[i][j] = upd(i, j, s[i][j]);
        if (DOT) acc[ch] = __fmaf_rn(s[i][j], w[j], acc[ch]);
      }
    }
    out[i] = DOT ? __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])) : 0.f;
  }
}
// Completes rows [I0, I1) of the lanes' partial sums x over the row's LK lanes (xor butterfly, offsets
// LK/2, ..., 1); every lane of a row ends with the same bits.
template <int LK, int I0, int I1>
__device__ __forceinline__ void row_sum(float (&x)[kNR]) {
#pragma unroll
  for (int off = LK / 2; off >= 1; off >>= 1)
#pragma unroll
    for (int i = I0; i < I1; ++i) x[i] = __fadd_rn(x[i], __shfl_xor_sync(kFull, x[i], off));
}

template <int LK, bool KDA, bool OUT, int I0, int I1>
__device__ __forceinline__ void token_update(float (&s)[kNR][kEK], const float (&kn)[kEK], const float (&qs)[kEK],
                                             const float (&alpha)[KDA ? kEK : 1], float beta,
                                             const float (&v)[kNR], float (&d)[kNR], float (&o)[kNR]) {
  float p[kNR];
  update_rows<true, I0, I1>(
      s, [&](int, int j, float x) { return __fmul_rn(alpha[KDA ? j : 0], x); }, kn, p);
  row_sum<LK, I0, I1>(p);
#pragma unroll
  for (int i = I0; i < I1; ++i) d[i] = __fmul_rn(beta, __fsub_rn(v[i], p[i]));
  update_rows<OUT, I0, I1>(
      s, [&](int i, int j, float x) { return __fmaf_rn(kn[j], d[i], x); }, qs, o);
  if (OUT) row_sum<LK, I0, I1>(o);
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

// ---------------------------------------------------------------------------------------------------------
// Block coordinates. Work item w (a block index, or a persistent CTA's item) is (layer, row, value head,
// V tile), tile fastest.
struct Coords {
  int tile, hv, r, layer;
};
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
// The per-tile kernels' item: their block.
__device__ __forceinline__ Coords coords(const DevCfg& c, int num_rows) { return item_coords(c, num_rows, blockIdx.x); }

// Lane geometry inside the block: kl, the lane's first row inside the tile (lrow0), the tile's first row.
template <int LK>
struct LaneGeo {
  int kl, lrow0, tile_base, warp, VT;
  __device__ LaneGeo(const DevCfg& c, int tile) {
    constexpr int RW = 32 / LK;
    const int lane = threadIdx.x & 31;
    warp = threadIdx.x >> 5;
    kl = lane % LK;
    VT = v_tile_rows(c.warps, LK);
    lrow0 = warp * kNR * RW + lane / LK;
    tile_base = tile * VT;
  }
};

// ---------------------------------------------------------------------------------------------------------
// Token sources and staging of one window chunk.

// Sources of token tok (verify: the packed inputs) and of a payload row pb (commit: the captured bits).
__device__ __forceinline__ TokenSrc input_src(const LaunchArgs& args, long long tok, int h, int hv) {
  const DevCfg& c = args.c;
  TokenSrc src;
  src.k = args.k, src.k_off = (tok * c.H + h) * c.K;
  src.q = args.q, src.q_off = src.k_off;
  src.v = args.v, src.v_off = (tok * c.HV + hv) * c.V;
  src.a = args.a, src.a_off = (tok * c.HV + hv) * c.a_width();
  src.b = args.b, src.b_off = tok * c.HV + hv;
  return src;
}
__device__ __forceinline__ TokenSrc payload_src(const DevCfg& c, const void* payload, long long pb, int h, int hv) {
  const PayloadRowLayout pay = payload_layout(c);
  TokenSrc src;
  src.k = payload, src.k_off = pb + pay.k + static_cast<long long>(h) * c.K;
  src.q = nullptr, src.q_off = 0;
  src.v = payload, src.v_off = pb + pay.v + static_cast<long long>(hv) * c.V;
  src.a = payload, src.a_off = pb + pay.a + static_cast<long long>(hv) * c.a_width();
  src.b = payload, src.b_off = pb + pay.b + hv;
  return src;
}

// L2 prefetch hint (prefetch.global.L2) of the token inputs one verify item reads when it stages its window:
// per token of `row`, the k and q rows of key head h, the V tile's values (rows tile_base .. + VT) and a, b
// of value head hv, as 128-byte lines spread over the block's threads. A hint only: nothing reaches
// registers or shared memory, so no arithmetic changes; issued one item ahead with the state tile prefetch,
// it turns the stage's DRAM latency into an L2 hit.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ void prefetch_inputs_l2(const LaunchArgs& args, const DevRow& row, int h, int hv,
                                                   int tile_base, int VT) {
  const DevCfg& c = args.c;
  const long long es = c.act_bf16 ? 2 : 4;
  const long long nv = min(VT, c.V - tile_base);
  // 128-byte lines a range of `bytes` touches: at most bytes / 128 + 2 (slots past its last line do nothing).
  const int lk = static_cast<int>(c.K * es / 128) + 2, lv = static_cast<int>(nv * es / 128) + 2,
            la = static_cast<int>(c.a_width() * es / 128) + 2;
  const int per_tok = 2 * lk + lv + la + 1;
  for (int i = threadIdx.x; i < row.T * per_tok; i += blockDim.x) {
    const long long tok = row.token_offset + i / per_tok;
    int j = i % per_tok;
    const char* base;
    long long off, bytes;
    if (j < 2 * lk) {
      base = static_cast<const char*>(j < lk ? args.k : args.q);
      off = (tok * c.H + h) * c.K * es, bytes = c.K * es, j %= lk;
    } else if ((j -= 2 * lk) < lv) {
      base = static_cast<const char*>(args.v), off = ((tok * c.HV + hv) * c.V + tile_base) * es, bytes = nv * es;
    } else if ((j -= lv) < la) {
      base = static_cast<const char*>(args.a), off = (tok * c.HV + hv) * c.a_width() * es, bytes = c.a_width() * es;
    } else {
      base = static_cast<const char*>(args.b), off = (tok * c.HV + hv) * es, bytes = es, j = 0;
    }
    const unsigned long long a0 = reinterpret_cast<unsigned long long>(base + off);
    const unsigned long long first = a0 & ~127ULL, last = (a0 + bytes - 1) & ~127ULL;
    if (first + 128ULL * j <= last) prefetch_l2(reinterpret_cast<const void*>(first + 128ULL * j));
  }
}

// Verify staging of tokens [t0, t0 + nt) of batch row r: the stage, plus (ReplaySSM) the raw bits into the
// payload. The CTA of tile 0 captures a and b, and for the first value head of a key head also the k row.
template <int LK, bool KDA, bool PAIR>
__device__ __forceinline__ void stage_verify_chunk(const LaunchArgs& args, const Stage& st, int r, long long tok0,
                                                   int t0, int nt, int h, int hv, int tile, int tile_base, float A_log,
                                                   const float* dtb) {
  const DevCfg& c = args.c;
  const long long pbl = args.payload ? chunk_rows(args, r, t0, nt) : 0;
  const bool cap_k = hv % c.G == 0 && tile == 0, cap_ab = tile == 0;
  stage_tokens<LK, KDA, PAIR>(
      c, nt, true, A_log, dtb, st, tile_base, [&](int tt) { return input_src(args, tok0 + tt, h, hv); },
      [&](const TokRaw<LK, KDA>& raw, int tt) {
        if (args.payload)
          capture_token<LK, KDA>(c, raw, args.payload, chunk_row(args, pbl, r, t0, tt), h, hv, tile_base,
                                 st.VT, cap_k, cap_ab);
      });
}

// Commit staging of payload tokens [t0, t0 + nt) of batch row r.
template <int LK, bool KDA, bool PAIR>
__device__ __forceinline__ void stage_commit_chunk(const LaunchArgs& args, const Stage& st, const void* payload, int r,
                                                   int t0, int nt, int h, int hv, int tile_base, float A_log,
                                                   const float* dtb) {
  const DevCfg& c = args.c;
  const long long pbl = chunk_rows(args, r, t0, nt);
  stage_tokens<LK, KDA, PAIR>(
      c, nt, false, A_log, dtb, st, tile_base,
      [&](int tt) { return payload_src(c, payload, chunk_row(args, pbl, r, t0, tt), h, hv); },
      [](const TokRaw<LK, KDA>&, int) {});
}

// ---------------------------------------------------------------------------------------------------------
// A PAD row (slot < 0) reads nothing and writes nothing but zero outputs for its window: this lane's rows
// (tile rows from r0) of value head hv, every token of the window. bf = c.act_bf16, as the caller has it.
template <int LK>
__device__ __forceinline__ void zero_pad_outputs(const LaunchArgs& args, const DevRow& row, int hv, int r0, int kl,
                                                 bool bf) {
  const DevCfg& c = args.c;
  for (int t = 0; t < row.T; ++t) {
    const long long ob = (static_cast<long long>(row.token_offset + t) * c.HV + hv) * c.V;
    for_my_rows<LK>(c, r0, kl, [&](int, int rr) { st_act(args.o, ob + rr, 0.f, bf); });
  }
}

}  // namespace replayssm::cuda::detail
