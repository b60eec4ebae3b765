// (1a)/(1b) verify of one layer, full-state (outputs + the state after every token into scratch) and
// ReplaySSM (outputs + raw payload capture): one kernel body for both, in two schedules, plus launch_verify.
//   verify_kernel       per-tile: grid (row, value head, V tile); block 32 * warps; the window is staged
//                       in chunks of kTC tokens while the state tile is live in registers
//   verify_pipe_kernel  persistent ([V,K]): resident CTAs walk the items; a row's whole window is staged,
//                       then the state tile prefetched by cp.async is taken into registers
// Dynamic shared memory = the stage (launch.hpp, stage_floats), plus the prefetch buffer when persistent.
#include "dispatch.cuh"
#include "launch.hpp"
#include "schedule.cuh"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

template <int LK, bool KDA>
__global__ void __launch_bounds__(128) verify_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const TileItem<LK> it(args);
  if (it.row.slot < 0) return it.pad_outputs(args);  // padding: zero outputs of the window, nothing else
  const Stage st = it.stage(c);
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, args.pool, it.row.slot, it.hv), it.r0, it.kl, s);  // in flight during the prologue
  const float A_log = __ldg(args.A_log + it.hv);
  const float* dtb = args.dt_bias + static_cast<long long>(it.hv) * c.a_width();
  for (int t0 = 0; t0 < it.row.T; t0 += kTC) {
    const int nt = min(kTC, it.row.T - t0);
    if (t0 > 0) __syncthreads();  // the previous chunk's readers are done with the stage
    stage_verify_chunk<LK, KDA, false>(args, st, it.at.r, it.row.token_offset + t0, t0, nt, it.h, it.hv,
                                       it.at.tile, it.lg.tile_base, A_log, dtb);
    __syncthreads();
    auto rows_run = [&](auto i0c, auto i1c) {
      constexpr int I0 = decltype(i0c)::value, I1 = decltype(i1c)::value;
      for (int tt = 0; tt < nt; ++tt) {
        const int t = t0 + tt;
        float d[kNR], o[kNR];
        run_staged<LK, KDA, true, I0, I1>(st, tt, it.kl, it.lg.lrow0, s, d, o);
        const long long ob = ((it.row.token_offset + t) * static_cast<long long>(c.HV) + it.hv) * c.V;
        for_my_rows<LK, I0, I1>(c, it.r0, it.kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), it.bf); });
        if (args.scratch) {
          const long long es = c.state_bf16 ? 2 : 4;
          char* dst = static_cast<char*>(args.scratch) +
                      ((static_cast<long long>(it.at.r) * args.max_T + t) * c.HV + it.hv) *
                          static_cast<long long>(c.K) * c.V * es;
          store_tile<LK, I0, I1>(c, dst, it.r0, it.kl, s);
        }
      }
    };
    for_row_groups(rows_run);
  }
}

// Persistent, prefetching schedule ([V,K] layout): a grid of about two CTAs per SM walks the work items
// (value-head tiles) with stride gridDim.x. While a CTA computes item i from registers, item i+1's state
// tile streams into shared memory with cp.async (tile.cuh). This keeps device memory busy through the
// compute phases, which the one-CTA-per-tile schedule leaves idle because all CTAs move through load,
// compute and store in lock step. The per-element arithmetic is the one of verify_kernel.
template <int LK, bool KDA>
__global__ void __launch_bounds__(128, 1) verify_pipe_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const long long total = static_cast<long long>(args.num_rows) * c.HV * c.tiles;
  const LaneGeo<LK> lg(c, 0);
  const int kl = lg.kl;
  const Stage st(reinterpret_cast<float*>(smem4), c, lg.VT, args.max_T);
  char* buf = reinterpret_cast<char*>(smem4) + stage_bytes_16<int>(args.max_T, c.K, c.a_width(), lg.VT);
  const bool bf = c.act_bf16;
  // Next item with a real row at or after w (stride gridDim.x); PAD items on the way get zero outputs.
  auto next_real = [&](long long w) {
    for (; w < total; w += gridDim.x) {
      const Coords at = item_coords(c, args.num_rows, w);
      const DevRow row = args.rows[at.r];
      if (row.slot >= 0) return w;
      zero_pad_outputs<LK>(args, row, at.hv, at.tile * lg.VT + lg.lrow0, kl, bf);
    }
    return total;
  };
  auto prefetch = [&](long long w) {
    const Coords at = item_coords(c, args.num_rows, w);
    prefetch_tile<LK>(c, state_head(c, args.pool, args.rows[at.r].slot, at.hv), at.tile * lg.VT + lg.lrow0, kl, buf);
  };
  long long cur = next_real(blockIdx.x);
  if (cur < total) prefetch(cur);
  while (cur < total) {
    const Coords at = item_coords(c, args.num_rows, cur);
    const DevRow row = args.rows[at.r];
    const int hv = at.hv, h = hv / c.G;
    const int tile_base = at.tile * lg.VT, r0 = tile_base + lg.lrow0;
    const float A_log = __ldg(args.A_log + hv);
    const float* dtb = args.dt_bias + static_cast<long long>(hv) * c.a_width();
    const long long nxt = next_real(cur + gridDim.x);
    float s[kNR][kEK];
    __syncthreads();  // the stage is free (previous item)
    // The whole window is staged before the state tile is taken into registers: room to load two tokens
    // per warp at once.
    stage_verify_chunk<LK, KDA, true>(args, st, at.r, row.token_offset, 0, row.T, h, hv, at.tile, tile_base, A_log,
                                      dtb);
    cp_async_wait_all();
    tile_from_smem<LK>(c, buf, r0, s);
    __syncthreads();  // stage written; state buffer consumed by every thread
    if (nxt < total) prefetch(nxt);
    for (int t = 0; t < row.T; ++t) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, true>(st, t, kl, lg.lrow0, s, d, o);
      const long long ob = ((row.token_offset + t) * static_cast<long long>(c.HV) + hv) * c.V;
      for_my_rows<LK>(c, r0, kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), bf); });
      if (args.scratch) {
        const long long es = c.state_bf16 ? 2 : 4;
        char* dst = static_cast<char*>(args.scratch) +
                    ((static_cast<long long>(at.r) * args.max_T + t) * c.HV + hv) * static_cast<long long>(c.K) * c.V *
                        es;
        store_tile_vk<LK>(c, dst, r0, kl, s);
      }
    }
    cur = nxt;
  }
}

template <int LK, bool KDA>
struct VerifyKernels {
  static constexpr auto per_tile = verify_kernel<LK, KDA>;
  static constexpr bool has_persistent = true;
  static constexpr auto persistent = verify_pipe_kernel<LK, KDA>;
};

}  // namespace

int launch_verify(const LaunchArgs& args, void* stream) {
  const long long items = static_cast<long long>(args.num_rows) * args.c.HV * args.c.tiles;
  return launch_tiles<VerifyKernels>(args, items, stream);
}

}  // namespace replayssm::cuda::detail
