// (4) Standard decode on the decode ring (T = 1; ring_len records per slot, flush at write_pos ==
// ring_len - 1): ring_decode_kernel, grid (row, value head, V tile), the per-tile structure of the verify,
// plus launch_ring_decode (per-tile only).
#include "dispatch.cuh"
#include "launch.hpp"
#include "schedule.cuh"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

template <int LK, bool KDA>
__global__ void __launch_bounds__(kBlockMax) ring_decode_kernel(const LaunchArgs args) {
  const TileItem<LK> it(args);
  if (it.row.slot < 0) return it.pad_outputs(args);  // padding: zero outputs, no record
  const DevCfg& c = args.c;
  constexpr int RW = 32 / LK, NG = KDA ? kEK : 1;
  const Stage st = it.stage(c);
  const int ring_len = args.ring_len, m = args.write_pos[it.at.r];
  float s[kNR][kEK];
  void* head = state_head(c, args.pool, it.row.slot, it.hv);
  load_tile<LK>(c, head, it.r0, it.kl, s);
  const long long tok = it.row.token_offset;
  if (it.lg.warp == 0) {
    TokRaw<LK, KDA> raw;
    load_token<LK, KDA>(c, input_src(args, tok, it.h, it.hv), true,
                        args.dt_bias + static_cast<long long>(it.hv) * c.a_width(), it.lg.tile_base, it.lg.VT, raw);
    finish_token<LK, KDA>(c, raw, true, __ldg(args.A_log + it.hv), st, 0);
  }
  // u / g record base (no width)
  const long long rec0 = (static_cast<long long>(it.row.slot) * c.HV + it.hv) * ring_len;
  const long long krec0 = (static_cast<long long>(it.row.slot) * c.H + it.h) * ring_len;
  auto g_rec = [&](int r, int j) {
    return KDA ? args.ring_g[(rec0 + r) * c.K + kidx<LK>(it.kl, j)] : args.ring_g[rec0 + r];
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
        kw[j] = __fmul_rn(expf(Su[KDA ? j : 0]), ld_act(args.ring_k, (krec0 + r) * c.K + kidx<LK>(it.kl, j), it.bf));
#pragma unroll
      for (int i = 0; i < kNR; ++i) {
        const int rr = it.r0 + i * RW;
        const float u = rr < c.V ? ld_act(args.ring_u, (rec0 + r) * c.V + rr, it.bf) : 0.f;
#pragma unroll
        for (int j = 0; j < kEK; ++j) s[i][j] = __fmaf_rn(u, kw[j], s[i][j]);
      }
#pragma unroll
      for (int j = 0; j < NG; ++j) Su[j] = __fadd_rn(Su[j], g_rec(r, j));
    }
  }
  __syncthreads();
  float d[kNR], o[kNR];
  run_staged<LK, KDA, true>(st, 0, it.kl, it.lg.lrow0, s, d, o);
  const long long ob = (tok * c.HV + it.hv) * c.V;
  for_my_rows<LK>(c, it.r0, it.kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), it.bf); });
  if (m == ring_len - 1) {  // flush: fold into the checkpoint in place, append nothing
    store_tile<LK>(c, head, it.r0, it.kl, s);
    return;
  }
  for_my_rows<LK>(c, it.r0, it.kl,
                  [&](int i, int rr) { st_act(args.ring_u, (rec0 + m) * c.V + rr, pick(d, i), it.bf); });
  if (it.at.tile == 0) {
    if (it.hv % c.G == 0)
      for (int i = threadIdx.x; i < c.K; i += blockDim.x) st_act(args.ring_k, (krec0 + m) * c.K + i, st.kn[i], it.bf);
    for (int i = threadIdx.x; i < c.a_width(); i += blockDim.x) args.ring_g[(rec0 + m) * c.a_width() + i] = st.g[i];
  }
}

template <int LK, bool KDA>
using RingDecodeKernels = TileKernels<ring_decode_kernel<LK, KDA>>;  // per-tile only

}  // namespace

int launch_ring_decode(const LaunchArgs& args, void* stream) {
  return launch_tiles<RingDecodeKernels>(args, tile_items(args, false), stream);
}

}  // namespace replayssm::cuda::detail
