// (1a)/(1b) verify of one layer, full-state (outputs + the state after every token into scratch) and
// ReplaySSM (outputs + raw payload capture): one kernel body for both, in two schedules, plus launch_verify.
//   verify_kernel       per-tile: grid (row, value head, V tile); block 32 * warps; the window is staged
//                       in chunks of kTC tokens while the state tile is live in registers
//   verify_pipe_kernel  persistent ([V,K]): resident CTAs walk the items; a row's whole window is staged,
//                       then the state tile prefetched by cp.async is taken into registers; instantiated for
//                       2 CTAs per SM and (dense, 128 x 128 GDN) for 3 when the shared memory allows
// Dynamic shared memory = the stage (launch.hpp, stage_floats), plus the prefetch buffer when persistent.
#include "dispatch.cuh"
#include "launch.hpp"
#include "schedule.cuh"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

template <int LK, bool KDA>
__global__ void __launch_bounds__(kBlockMax, tile_ctas(KDA) * kCtaScale)
    verify_kernel(const LaunchArgs args) {
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
    stage_verify_chunk<LK, KDA, kTilePair>(args, st, it.at.r, it.row.token_offset + t0, t0, nt, it.h, it.hv,
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

// Persistent, prefetching schedule ([V,K] layout; PipeLoop, schedule.cuh). The per-element arithmetic is the
// one of verify_kernel.
// CTAS: resident CTAs per SM the registers are budgeted for (kPipeCtas, or kDenseCtas for the dense kernel).
template <int LK, bool KDA, int CTAS>
__global__ void __launch_bounds__(kBlockMax, CTAS * kCtaScale) verify_pipe_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const PipeLoop<LK, false> p(args);
  const bool bf = c.act_bf16;
  p.run(
      args, [](DevRow row) { return row.slot >= 0; },
      [&](const Coords& at, const DevRow& row) {  // PAD: zero outputs
        zero_pad_outputs<LK>(args, row, at.hv, at.tile * p.lg.VT + p.lg.lrow0, p.kl, bf);
      },
      // The whole window is staged before the state tile is taken into registers: room to load two tokens
      // per warp at once.
      [&](const PipeItem& it) {
        stage_verify_chunk<LK, KDA, true>(args, p.st, it.at.r, it.row.token_offset, 0, it.row.T, it.h, it.hv,
                                          it.at.tile, it.tile_base, it.A_log, it.dtb);
      },
      [&](const PipeItem& it, float (&s)[kNR][kEK]) {
        for (int t = 0; t < it.row.T; ++t) {
          float d[kNR], o[kNR];
          run_staged<LK, KDA, true>(p.st, t, p.kl, p.lg.lrow0, s, d, o);
          const long long ob = ((it.row.token_offset + t) * static_cast<long long>(c.HV) + it.hv) * c.V;
          for_my_rows<LK>(c, it.r0, p.kl, [&](int i, int rr) { st_act(args.o, ob + rr, pick(o, i), bf); });
          if (args.scratch) {
            const long long es = c.state_bf16 ? 2 : 4;
            char* dst = static_cast<char*>(args.scratch) +
                        ((static_cast<long long>(it.at.r) * args.max_T + t) * c.HV + it.hv) *
                            static_cast<long long>(c.K) * c.V * es;
            store_tile_vk<LK>(c, dst, it.r0, p.kl, s);
          }
        }
      },
      [&](const Coords& at, const DevRow& row) {
        if (kVerifyInputHint) prefetch_inputs_l2(args, row, at.hv / c.G, at.hv, at.tile * p.lg.VT, p.lg.VT);
      });
}

// The dense kernel: 128 x 128 GDN (measured), and KDA with REPLAYSSM_DENSE_KDA.
template <int LK, bool KDA>
constexpr bool kVerifyDense = LK == 8 && (!KDA || kDenseKDA);
template <int LK, bool KDA, bool DENSE>
struct VerifyFamily {
  using type = TileKernels<verify_kernel<LK, KDA>, verify_pipe_kernel<LK, KDA, kPipeCtas>>;
};
template <int LK, bool KDA>
struct VerifyFamily<LK, KDA, true> {
  using type = TileKernels<verify_kernel<LK, KDA>, verify_pipe_kernel<LK, KDA, kPipeCtas>,
                           verify_pipe_kernel<LK, KDA, kDenseCtas>>;
};
template <int LK, bool KDA>
using VerifyKernels = typename VerifyFamily<LK, KDA, kVerifyDense<LK, KDA>>::type;

}  // namespace

int launch_verify(const LaunchArgs& args, void* stream) {
  return launch_tiles<VerifyKernels>(args, tile_items(args, false), stream);
}

}  // namespace replayssm::cuda::detail
