// The schedule skeletons of the tile kernels (verify, commit_replay, ring_decode), written once; the kernels
// supply only what differs:
//   smem4       the kernels' dynamic shared memory
//   TileItem    per-tile schedule: the block's work item (coordinates, lane geometry, batch row, heads), its
//               shared-memory stage of kTC tokens, and the zero outputs of a PAD row
//   PipeLoop    persistent schedule: the item loop with the state tile prefetch; the kernel passes which
//               items are real, what a skipped one writes, the staging and the token loop as functors, and
//               gets each item as a PipeItem (one_layer: a per-layer launch's layer as a DevLayer)
//
// Scheduling only: the per-element arithmetic stays in the kernels, token.cuh and tile.cuh. The order in
// which these compute and read things is the order the kernels had before they shared them: the generated
// code (SASS) is unchanged, and a change of that order can change it.
// Device code only, all __forceinline__ (see tile.cuh); in the unnamed namespace of the .cu that includes it,
// like the kernels.
#pragma once

#include "launch.hpp"
#include "tile.cuh"
#include "token.cuh"

namespace replayssm::cuda::detail {
namespace {

// The kernels' dynamic shared memory (the token stage, then the persistent kernels' state buffer). In the
// unnamed namespace, where each .cu defines its kernels: the symbol a kernel-local declaration would name.
extern __shared__ float4 smem4[];

// The per-tile kernels' work item: their block, (row, value head, V tile), and this lane's place in it.
// The members are initialised in the order the kernels computed them before they shared this struct, which
// keeps their generated code unchanged (compare the SASS after changing the order).
template <int LK>
struct TileItem {
  Coords at;
  LaneGeo<LK> lg;
  int r0, kl;   // the lane's first state row of the head (tile base + lg.lrow0), its lane inside the row
  DevRow row;   // batch row at.r
  int hv, h;    // value head, key head
  bool bf;      // activations are bf16 (c.act_bf16)
  // The block's item, its batch row read from args.rows after the lane geometry.
  __device__ __forceinline__ explicit TileItem(const LaunchArgs& args)
      : TileItem(args, coords(args.c, args.num_rows)) {}
  // The same for a kernel that has read the batch row already (to return early on it, before the lane
  // geometry): at = coords(args.c, args.num_rows), row = args.rows[at.r].
  __device__ __forceinline__ TileItem(const LaunchArgs& args, const Coords& at_, const DevRow& row_)
      : at(at_),
        lg(args.c, at.tile),
        r0(lg.tile_base + lg.lrow0),
        kl(lg.kl),
        row(row_),
        hv(at.hv),
        h(hv / args.c.G),
        bf(args.c.act_bf16) {}
  // A PAD row (slot < 0) writes the zero outputs of its window and nothing else: the kernel returns after
  // this.
  __device__ __forceinline__ void pad_outputs(const LaunchArgs& args) const {
    zero_pad_outputs<LK>(args, row, hv, r0, kl, bf);
  }
  // The stage of kTC tokens in dynamic shared memory.
  __device__ __forceinline__ Stage stage(const DevCfg& c) const {
    return Stage(reinterpret_cast<float*>(smem4), c, lg.VT, kTC);
  }

 private:
  // args.rows[at_.r] binds as a reference: the row is read where `row` is initialised, after the geometry.
  __device__ __forceinline__ TileItem(const LaunchArgs& args, const Coords& at_)
      : TileItem(args, at_, args.rows[at_.r]) {}
};

// ---------------------------------------------------------------------------------------------------------
// Persistent schedule ([V,K] layout): a grid of about two CTAs per SM walks the work items 0 .. total-1
// (tile_items, tile fastest) with stride gridDim.x. While a CTA computes one item from registers, the state
// tile of its next real item streams into shared memory with cp.async (prefetch_tile, tile.cuh); items that
// are not real (a PAD row, a row with nothing to commit) are passed over on the way. This keeps device
// memory busy through the compute phases, which the one-CTA-per-tile schedule leaves idle because all CTAs
// move through load, compute and store in lock step.

// The launch's own layer (a per-layer launch: verify) as a DevLayer.
__device__ __forceinline__ DevLayer one_layer(const LaunchArgs& args) {
  return DevLayer{args.pool, args.payload, args.scratch, args.A_log, args.dt_bias};
}

// What the loop knows of an item before the kernel's own part runs.
struct PipeItem {
  Coords at;
  DevRow row;      // batch row at.r
  DevLayer layer;  // args.layers[at.layer] (ALL_LAYERS) or one_layer(args)
  int hv, h;       // value head, key head
  int tile_base, r0;  // the tile's first row, the lane's first row (tile_base + lrow0)
  float A_log;        // A_log of head hv
  const float* dtb;   // dt_bias of head hv
};

// ALL_LAYERS: the items are those of every layer of args.layers (commit); otherwise of the launch's own
// layer (verify).
template <int LK, bool ALL_LAYERS>
struct PipeLoop {
  long long total;  // work items
  LaneGeo<LK> lg;   // lane geometry of tile 0 (tile t starts t * lg.VT rows further)
  int kl;
  Stage st;   // dynamic shared memory: the stage of max_T tokens (a row's whole window) ...
  char* buf;  // ... then the prefetched state tile (16-byte aligned)
  __device__ __forceinline__ explicit PipeLoop(const LaunchArgs& args)
      : total(tile_items(args, ALL_LAYERS)),
        lg(args.c, 0),
        kl(lg.kl),
        st(reinterpret_cast<float*>(smem4), args.c, lg.VT, args.max_T),
        buf(reinterpret_cast<char*>(smem4) + stage_bytes_16<int>(args.max_T, args.c.K, args.c.a_width(), lg.VT)) {}

  // Runs this CTA's items with the kernel's parts:
  //   real(row)          whether an item of batch row `row` is computed; it takes the row by value (with
  //                      a reference, commit's && chain read the fields one by one: other SASS)
  //   skipped(at, row)   runs for each item that is not (verify: the PAD row's zero outputs)
  //   stage(it)          stages the item's window (every thread; the stage is free)
  //   compute(it, s)     the token loop on the item's state tile s, in registers, and its stores
  //   hint(at, row)      runs when the state tile of real item `at` is prefetched, one item ahead (verify:
  //                      the L2 prefetch of its token inputs; commit: nothing)
  template <class RealF, class SkipF, class StageF, class ComputeF, class HintF>
  __device__ __forceinline__ void run(const LaunchArgs& args, RealF&& real, SkipF&& skipped, StageF&& stage,
                                      ComputeF&& compute, HintF&& hint) const {
    run_from(
        args, [&](int r) { return args.rows[r].slot; }, real, skipped, stage, compute, hint);
  }
  // The same with the slot whose state tile an item of batch row r loads given by read_slot(r) (the fused
  // verify: the previous step's checkpoint while a commit is pending, else the row's slot).
  template <class SlotF, class RealF, class SkipF, class StageF, class ComputeF, class HintF>
  __device__ __forceinline__ void run_from(const LaunchArgs& args, SlotF&& read_slot, RealF&& real, SkipF&& skipped,
                                           StageF&& stage, ComputeF&& compute, HintF&& hint) const {
    const DevCfg& c = args.c;
    // Next real item at or after w (stride gridDim.x).
    auto next_real = [&](long long w) {
      for (; w < total; w += gridDim.x) {
        const Coords at = item_coords(c, args.num_rows, w);
        const DevRow row = args.rows[at.r];
        if (real(row)) return w;
        skipped(at, row);
      }
      return total;
    };
    auto prefetch = [&](long long w) {
      const Coords at = item_coords(c, args.num_rows, w);
      void* pool = ALL_LAYERS ? args.layers[at.layer].pool : args.pool;
      prefetch_tile<LK>(c, state_head(c, pool, read_slot(at.r), at.hv), at.tile * lg.VT + lg.lrow0, kl, buf);
      hint(at, args.rows[at.r]);
    };
    long long cur = next_real(blockIdx.x);
    if (cur < total) prefetch(cur);
    while (cur < total) {
      // The order of these reads is the one each kernel had before it shared this loop (the SASS depends on
      // it): commit reads its item's layer before the heads, verify takes its own layer's pointers after.
      PipeItem it;
      it.at = item_coords(c, args.num_rows, cur);
      it.row = args.rows[it.at.r];
      if constexpr (ALL_LAYERS) it.layer = args.layers[it.at.layer];
      it.hv = it.at.hv, it.h = it.hv / c.G;
      it.tile_base = it.at.tile * lg.VT, it.r0 = it.tile_base + lg.lrow0;
      if constexpr (!ALL_LAYERS) it.layer = one_layer(args);
      it.A_log = __ldg(it.layer.A_log + it.hv);
      it.dtb = it.layer.dt_bias + static_cast<long long>(it.hv) * c.a_width();
      const long long nxt = next_real(cur + gridDim.x);
      float s[kNR][kEK];
      __syncthreads();  // the stage is free (previous item)
      stage(static_cast<const PipeItem&>(it));
      cp_async_wait_all();
      tile_from_smem<LK>(c, buf, it.r0, s);
      __syncthreads();  // stage written; state buffer consumed by every thread
      if (nxt < total) prefetch(nxt);
      compute(static_cast<const PipeItem&>(it), s);
      cur = nxt;
    }
  }
};

}  // namespace
}  // namespace replayssm::cuda::detail
