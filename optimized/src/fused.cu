// (1d) Fused ReplaySSM step of one layer: the previous step's pending commit of this layer, then this step's
// verify, on one load of the state tile.
//   fused_kernel       per-tile: grid (row, value head, V tile); the previous records and then the window
//                      are staged in chunks of kTC tokens while the state tile is live in registers
//   fused_pipe_kernel  persistent ([V,K]): resident CTAs walk the items; the previous records (slots
//                      [0, n)) and the window (slots [n, n + T)) are staged at once, then the state tile
//                      prefetched by cp.async is taken into registers
// Per (row, value head, V tile): load the checkpoint (the previous step's read slot while its commit is
// pending, else the row's slot), replay the n = accepted records of the previous step from its payload
// (commit_replay's arithmetic: same staging, same token step, same order), store the state once, rounded
// to the state dtype, into the previous write slot (this step's read slot), round the registers the same
// way, then run this step's window from the registers (verify_replay's arithmetic: outputs and payload
// capture). The committed state and the outputs are therefore bit-identical to commit_replay followed by
// verify_replay (docs/cuda.md, "Fused step").
//
// Payload buffers: the previous records are read from args.prev_payload while this step's rows are captured
// into args.payload, a different buffer (the host refuses the same pointer): the two alternate per step, so
// no CTA overwrites a record another CTA of the launch still replays.
#include "dispatch.cuh"
#include "launch.hpp"
#include "schedule.cuh"
#include "tile.cuh"
#include "token.cuh"

// Teeth check of GpuFused (docs/cuda.md, "Fused step"): 0 leaves out the rounding of the registers to the
// state dtype after the commit; the bf16-state cases must then fail the bitwise comparison.
#ifndef REPLAYSSM_FUSED_ROUND
#define REPLAYSSM_FUSED_ROUND 1
#endif

namespace replayssm::cuda::detail {
namespace {

// round_tile_to_state, unless the teeth check above leaves it out.
__device__ __forceinline__ void fused_round(const DevCfg& c, float (&s)[kNR][kEK]) {
  if (REPLAYSSM_FUSED_ROUND) round_tile_to_state(c, s);
}

// Records of the previous step this row commits here: its accepted count when that commit is pending
// (a real row with a write slot and n > 0), else 0.
__device__ __forceinline__ int pending_count(const DevRow& prev) {
  return prev.slot >= 0 && prev.write_slot >= 0 && prev.accepted > 0 ? prev.accepted : 0;
}

// The launch arguments with the previous step's page table: the commit staging reads its records through it.
__device__ __forceinline__ LaunchArgs prev_page_args(const LaunchArgs& args) {
  LaunchArgs pa = args;
  pa.pages = args.prev_pages;
  return pa;
}

template <int LK, bool KDA>
__global__ void __launch_bounds__(kBlockMax, tile_ctas(false) * kCtaScale)
    fused_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const TileItem<LK> it(args);
  if (it.row.slot < 0) return it.pad_outputs(args);  // PAD: zero outputs (the host refuses a pending commit)
  const DevRow prev = args.prev_rows[it.at.r];
  const int n = pending_count(prev);
  const Stage st = it.stage(c);
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, args.pool, n > 0 ? prev.slot : it.row.slot, it.hv), it.r0, it.kl, s);
  const float A_log = __ldg(args.A_log + it.hv);
  const float* dtb = args.dt_bias + static_cast<long long>(it.hv) * c.a_width();
  if (n > 0) {
    const LaunchArgs pa = prev_page_args(args);
    for (int t0 = 0; t0 < n; t0 += kTC) {
      const int nt = min(kTC, n - t0);
      if (t0 > 0) __syncthreads();
      stage_commit_chunk<LK, KDA, kTilePair>(pa, st, args.prev_payload, it.at.r, t0, nt, it.h, it.hv, it.lg.tile_base,
                                         A_log, dtb);
      __syncthreads();
      for (int tt = 0; tt < nt; ++tt) {
        float d[kNR], o[kNR];
        run_staged<LK, KDA, false>(st, tt, it.kl, it.lg.lrow0, s, d, o);
      }
    }
    store_tile<LK>(c, state_head(c, args.pool, prev.write_slot, it.hv), it.r0, it.kl, s);
    fused_round(c, s);
    __syncthreads();  // the commit's readers are done with the stage
  }
  for (int t0 = 0; t0 < it.row.T; t0 += kTC) {
    const int nt = min(kTC, it.row.T - t0);
    if (t0 > 0) __syncthreads();
    stage_verify_chunk<LK, KDA, kTilePair>(args, st, it.at.r, it.row.token_offset + t0, t0, nt, it.h, it.hv, it.at.tile,
                                       it.lg.tile_base, A_log, dtb);
    __syncthreads();
    for (int tt = 0; tt < nt; ++tt) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, true>(st, tt, it.kl, it.lg.lrow0, s, d, o);
      const long long ob = ((it.row.token_offset + t0 + tt) * static_cast<long long>(c.HV) + it.hv) * c.V;
      for_my_rows<LK>(c, it.r0, it.kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), it.bf); });
    }
  }
}

// Persistent schedule (PipeLoop::run_from, schedule.cuh); the per-element arithmetic is the one of
// fused_kernel. The stage holds args.max_T = previous max_T + this max_T tokens.
template <int LK, bool KDA, int CTAS>
__global__ void __launch_bounds__(kBlockMax, CTAS * kCtaScale) fused_pipe_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const PipeLoop<LK, false> p(args);
  const bool bf = c.act_bf16;
  p.run_from(
      args,
      [&](int r) {
        const DevRow prev = args.prev_rows[r];
        return pending_count(prev) > 0 ? prev.slot : args.rows[r].slot;
      },
      [](DevRow row) { return row.slot >= 0; },
      [&](const Coords& at, const DevRow& row) {  // PAD: zero outputs
        zero_pad_outputs<LK>(args, row, at.hv, at.tile * p.lg.VT + p.lg.lrow0, p.kl, bf);
      },
      [&](const PipeItem& it) {
        const int n = pending_count(args.prev_rows[it.at.r]);
        if (n > 0)
          stage_commit_chunk<LK, KDA, true>(prev_page_args(args), p.st, args.prev_payload, it.at.r, 0, n, it.h, it.hv,
                                            it.tile_base, it.A_log, it.dtb);
        stage_verify_chunk<LK, KDA, true>(args, stage_from(p.st, n), it.at.r, it.row.token_offset, 0, it.row.T, it.h,
                                          it.hv, it.at.tile, it.tile_base, it.A_log, it.dtb);
      },
      [&](const PipeItem& it, float (&s)[kNR][kEK]) {
        const DevRow prev = args.prev_rows[it.at.r];
        const int n = pending_count(prev);
        if (n > 0) {
          for (int t = 0; t < n; ++t) {
            float d[kNR], o[kNR];
            run_staged<LK, KDA, false>(p.st, t, p.kl, p.lg.lrow0, s, d, o);
          }
          store_tile_vk<LK>(c, state_head(c, it.layer.pool, prev.write_slot, it.hv), it.r0, p.kl, s);
          fused_round(c, s);
        }
        for (int t = 0; t < it.row.T; ++t) {
          float d[kNR], o[kNR];
          run_staged<LK, KDA, true>(p.st, n + t, p.kl, p.lg.lrow0, s, d, o);
          const long long ob = ((it.row.token_offset + t) * static_cast<long long>(c.HV) + it.hv) * c.V;
          for_my_rows<LK>(c, it.r0, p.kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), bf); });
        }
      },
      [](const Coords&, const DevRow&) {});
}

// No dense instance (3 CTAs per SM, 168 registers): compiled for 128 x 128 GDN it spilled 1724 bytes (ptxas,
// sm_90) and measured 46% slower than the standard instance at T = 2 (docs/cuda.md, "Fused step").
template <int LK, bool KDA>
using FusedKernels = TileKernels<fused_kernel<LK, KDA>, fused_pipe_kernel<LK, KDA, kPipeCtas>>;

}  // namespace

int launch_verify_fused(const LaunchArgs& args, void* stream) {
  return launch_tiles<FusedKernels>(args, tile_items(args, false), stream);
}

}  // namespace replayssm::cuda::detail
