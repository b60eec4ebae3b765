// The schedule skeleton of the tile kernels (verify, commit_replay, ring_decode), written once:
//   smem4      the kernels' dynamic shared memory
//   TileItem   per-tile schedule: the block's work item (coordinates, lane geometry, batch row, heads), its
//              shared-memory stage of kTC tokens, and the zero outputs of a PAD row
//
// Scheduling only: the per-element arithmetic stays in the kernels, token.cuh and tile.cuh.
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

}  // namespace
}  // namespace replayssm::cuda::detail
