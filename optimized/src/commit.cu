// All-layer commits, one launch for every layer of a step:
//   (1c) ReplaySSM commit: replays the first n = accepted tokens of each real row from the payload
//        commit_replay_kernel  per-tile: grid (layer, row, value head, V tile)
//        commit_pipe_kernel    persistent ([V,K]): resident CTAs walk the items, state tile prefetched;
//                              for 128 x 128 also a dense instance (3 CTAs per SM) when the stage allows
//   (1a) full-state commit: commit_copy_kernel copies scratch state n-1 into the pool, grid (layer, row,
//        value head)
// plus launch_commit_replay and launch_commit_copy.
#include "dispatch.cuh"
#include "launch.hpp"
#include "schedule.cuh"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

template <int LK, bool KDA>
__global__ void __launch_bounds__(kBlockMax, tile_ctas(false) * kCtaScale)
    commit_replay_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const Coords at = coords(c, args.num_rows);
  const DevRow row = args.rows[at.r];
  const int n = row.accepted;
  if (row.slot < 0 || row.write_slot < 0 || n <= 0) return;
  const DevLayer layer = args.layers[at.layer];
  const TileItem<LK> it(args, at, row);
  const Stage st = it.stage(c);
  float s[kNR][kEK];
  load_tile<LK>(c, state_head(c, layer.pool, row.slot, it.hv), it.r0, it.kl, s);
  const float A_log = __ldg(layer.A_log + it.hv);
  const float* dtb = layer.dt_bias + static_cast<long long>(it.hv) * c.a_width();
  auto stage_chunk = [&](int t0, int nt) {
    stage_commit_chunk<LK, KDA, kTilePair>(args, st, layer.payload, at.r, t0, nt, it.h, it.hv, it.lg.tile_base, A_log,
                                       dtb);
    __syncthreads();
  };
  // Whole chunks of kTC tokens first (only when n > kTC), then the last chunk row group by row group, each
  // group stored as soon as its last token is done.
  int t0 = 0;
  for (; t0 + kTC < n; t0 += kTC) {
    stage_chunk(t0, kTC);
    for (int tt = 0; tt < kTC; ++tt) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, false>(st, tt, it.kl, it.lg.lrow0, s, d, o);
    }
    __syncthreads();
  }
  const int nt = n - t0;
  stage_chunk(t0, nt);
  void* dst = state_head(c, layer.pool, row.write_slot, it.hv);
  auto rows_run = [&](auto i0c, auto i1c) {
    constexpr int I0 = decltype(i0c)::value, I1 = decltype(i1c)::value;
    for (int tt = 0; tt < nt; ++tt) {
      float d[kNR], o[kNR];
      run_staged<LK, KDA, false, I0, I1>(st, tt, it.kl, it.lg.lrow0, s, d, o);
    }
    store_tile<LK, I0, I1>(c, dst, it.r0, it.kl, s);
  };
  for_row_groups(rows_run);
}

// Persistent schedule of the replay commit (PipeLoop, schedule.cuh); the per-element arithmetic
// is the one of commit_replay_kernel.
template <int LK, bool KDA, int CTAS>
__global__ void __launch_bounds__(kBlockMax, CTAS * kCtaScale) commit_pipe_kernel(const LaunchArgs args) {
  const PipeLoop<LK, true> p(args);
  p.run(
      args, [](DevRow row) { return row.slot >= 0 && row.write_slot >= 0 && row.accepted > 0; },
      [](const Coords&, const DevRow&) {},
      [&](const PipeItem& it) {
        stage_commit_chunk<LK, KDA, true>(args, p.st, it.layer.payload, it.at.r, 0, it.row.accepted, it.h, it.hv,
                                          it.tile_base, it.A_log, it.dtb);
      },
      [&](const PipeItem& it, float (&s)[kNR][kEK]) {
        for (int t = 0; t < it.row.accepted; ++t) {
          float d[kNR], o[kNR];
          run_staged<LK, KDA, false>(p.st, t, p.kl, p.lg.lrow0, s, d, o);
        }
        const DevCfg& c = args.c;
        store_tile_vk<LK>(c, state_head(c, it.layer.pool, it.row.write_slot, it.hv), it.r0, p.kl, s);
      },
      [](const Coords&, const DevRow&) {});
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

__global__ void __launch_bounds__(256) commit_copy_kernel(const LaunchArgs args) {
  const DevCfg& c = args.c;
  const long long x = blockIdx.x;
  const int hv = static_cast<int>(x % c.HV);
  const int r = static_cast<int>((x / c.HV) % args.num_rows);
  const int l = static_cast<int>(x / (static_cast<long long>(c.HV) * args.num_rows));
  const DevRow row = args.rows[r];
  const int n = row.accepted;
  if (row.slot < 0 || row.write_slot < 0 || n <= 0) return;
  const DevLayer layer = args.layers[l];
  const long long es = c.state_bf16 ? 2 : 4;
  const long long head_bytes = static_cast<long long>(c.K) * c.V * es;
  const char* src =
      static_cast<const char*>(layer.scratch) + ((static_cast<long long>(r) * args.max_T + n - 1) * c.HV + hv) * head_bytes;
  char* dst = state_head(c, layer.pool, row.write_slot, hv);
  // Heads are 16-byte aligned when slot_stride * element size is; otherwise (bf16 with slot_stride % 8 == 4)
  // only 8-byte aligned.
  if ((c.slot_stride * es) % 16 == 0)
    block_copy<uint4>(src, dst, head_bytes);
  else
    block_copy<uint2>(src, dst, head_bytes);
}

template <int LK, bool KDA, bool DENSE>
struct CommitFamily {
  using type = TileKernels<commit_replay_kernel<LK, KDA>, commit_pipe_kernel<LK, KDA, kPipeCtas>>;
};
// The dense commit (128 x 128; REPLAYSSM_DENSE_COMMIT=0 turns it off).
template <bool KDA>
struct CommitFamily<8, KDA, true> {
  using type = TileKernels<commit_replay_kernel<8, KDA>, commit_pipe_kernel<8, KDA, kPipeCtas>,
                           commit_pipe_kernel<8, KDA, kDenseCtas>>;
};
template <int LK, bool KDA>
using CommitReplayKernels = typename CommitFamily<LK, KDA, kDenseCommit>::type;

}  // namespace

int launch_commit_replay(const LaunchArgs& args, void* stream) {
  return launch_tiles<CommitReplayKernels>(args, tile_items(args, true), stream);
}

int launch_commit_copy(const LaunchArgs& args, void* stream) {
  const unsigned grid = static_cast<unsigned>(static_cast<long long>(args.num_layers) * args.num_rows * args.c.HV);
  if (grid == 0) return 0;
  commit_copy_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace replayssm::cuda::detail
