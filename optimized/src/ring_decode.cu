// (4) Standard decode on the decode ring (T = 1; ring_len records per slot, flush at write_pos ==
// ring_len - 1): ring_decode_kernel, grid (row, value head, V tile), the per-tile structure of the verify,
// plus launch_ring_decode (per-tile only).
#include "dispatch.cuh"
#include "launch.hpp"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

template <int LK, bool KDA>
__global__ void __launch_bounds__(128) ring_decode_kernel(const LaunchArgs args) {
  extern __shared__ float4 smem4[];
  const DevCfg& c = args.c;
  const Coords at = coords(c, args.num_rows);
  const LaneGeo<LK> lg(c, at.tile);
  const int r0 = lg.tile_base + lg.lrow0, kl = lg.kl;
  constexpr int RW = 32 / LK;
  const DevRow row = args.rows[at.r];
  const int hv = at.hv, h = hv / c.G;
  const bool bf = c.act_bf16;
  if (row.slot < 0) {
    zero_pad_outputs<LK>(args, row, hv, r0, kl, bf);
    return;
  }
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, kTC);
  const int ring_len = args.ring_len, m = args.write_pos[at.r];
  constexpr int NG = KDA ? kEK : 1;
  float s[kNR][kEK];
  void* head = state_head(c, args.pool, row.slot, hv);
  load_tile<LK>(c, head, r0, kl, s);
  const long long tok = row.token_offset;
  if (lg.warp == 0) {
    TokRaw<LK, KDA> raw;
    load_token<LK, KDA>(c, input_src(args, tok, h, hv), true, args.dt_bias + static_cast<long long>(hv) * c.a_width(),
                        lg.tile_base, lg.VT, raw);
    finish_token<LK, KDA>(c, raw, true, __ldg(args.A_log + hv), st, 0);
  }
  const long long rec0 = (static_cast<long long>(row.slot) * c.HV + hv) * ring_len;  // u / g record base (no width)
  const long long krec0 = (static_cast<long long>(row.slot) * c.H + h) * ring_len;
  auto g_rec = [&](int r, int j) {
    return KDA ? args.ring_g[(rec0 + r) * c.K + kidx<LK>(kl, j)] : args.ring_g[rec0 + r];
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
        kw[j] = __fmul_rn(expf(Su[KDA ? j : 0]), ld_act(args.ring_k, (krec0 + r) * c.K + kidx<LK>(kl, j), bf));
#pragma unroll
      for (int i = 0; i < kNR; ++i) {
        const int rr = r0 + i * RW;
        const float u = rr < c.V ? ld_act(args.ring_u, (rec0 + r) * c.V + rr, bf) : 0.f;
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
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), bf); });
  if (m == ring_len - 1) {  // flush: fold into the checkpoint in place, append nothing
    store_tile<LK>(c, head, r0, kl, s);
    return;
  }
  for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(args.ring_u, (rec0 + m) * c.V + rr, pick(d, i), bf); });
  if (at.tile == 0) {
    if (hv % c.G == 0)
      for (int i = threadIdx.x; i < c.K; i += blockDim.x) st_act(args.ring_k, (krec0 + m) * c.K + i, st.kn[i], bf);
    for (int i = threadIdx.x; i < c.a_width(); i += blockDim.x) args.ring_g[(rec0 + m) * c.a_width() + i] = st.g[i];
  }
}

template <int LK, bool KDA>
struct RingDecodeKernels {
  static constexpr auto per_tile = ring_decode_kernel<LK, KDA>;
  static constexpr bool has_persistent = false;  // per-tile only, whatever args.persistent says
};

}  // namespace

int launch_ring_decode(const LaunchArgs& args, void* stream) {
  const long long items = static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles;
  return launch_tiles<RingDecodeKernels>(args, items, stream);
}

}  // namespace replayssm::cuda::detail
