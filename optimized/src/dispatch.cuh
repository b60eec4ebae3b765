// Launching the tile kernels (verify, commit_replay, ring_decode): ONE dispatcher that picks the <LK, KDA>
// instance from the launch arguments, and ONE launch function that decides per-tile vs persistent.
//
// A kernel family is a class template Kernels<LK, KDA> with
//   static constexpr auto per_tile = ...;    grid = one CTA per work item, stage of kTC tokens
//   static constexpr bool has_persistent;    and, when true,
//   static constexpr auto persistent = ...;  grid = resident CTAs looping over the items, stage of max_T
//                                            tokens plus one prefetched state tile, registers for kPipeCtas
//   static constexpr bool has_dense;         and, when true,
//   static constexpr auto dense = ...;       the same schedule compiled for kDenseCtas CTAs per SM (fewer
//                                            registers, more warps in flight), launched when that many fit
// as TileKernels<per_tile, persistent> makes it, e.g. an alias template over a .cu's kernel templates.
// Each .cu instantiates these templates for its own kernels and launches them itself (no -rdc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "launch.hpp"

namespace replayssm::cuda::detail {

// A kernel family's members: the per-tile kernel and the persistent one (nullptr: per-tile only, whatever
// args.persistent says).
template <auto PerTile, auto Persistent = nullptr, auto Dense = nullptr>
struct TileKernels {
  static constexpr auto per_tile = PerTile;
  static constexpr bool has_persistent = !std::is_null_pointer_v<decltype(Persistent)>;
  static constexpr auto persistent = Persistent;
  static constexpr bool has_dense = !std::is_null_pointer_v<decltype(Dense)>;
  static constexpr auto dense = Dense;
};

// persistent_grid's answer when the persistent schedule does not fit (see there).
constexpr int kNoFit = -1;

// Persistent launch shape (dispatch.cu): sets the kernel's dynamic shared memory limit to `smem` and returns
// 0 with *grid = min(items, resident CTAs per SM * SMs), or kNoFit when smem exceeds the device's opt-in
// limit or fewer than min_per_sm CTAs would be resident per SM (a long token window), or a cudaError_t.
int persistent_grid(const void* kernel, int threads, std::size_t smem, long long items, int min_per_sm,
                    unsigned* grid);

// Records the instance a launch used for cuda::last_launch() (this host thread's last launch).
void record_launch(const char* instance, const void* kernel, unsigned grid, int threads, std::size_t smem);

// One CTA per work item; dynamic shared memory = the stage of kTC tokens.
template <class KernelT>
int launch_per_tile(KernelT kernel, const LaunchArgs& args, long long items, void* stream) {
  const unsigned grid = static_cast<unsigned>(items);
  const dim3 block(32 * args.c.warps);
  if (grid == 0) return 0;
  const int VT = v_tile_rows(args.c.warps, args.c.LK);
  const std::size_t smem = sizeof(float) * stage_floats<std::size_t>(kTC, args.c.K, args.c.a_width(), VT);
  if (smem > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);
  kernel<<<grid, block, smem, static_cast<cudaStream_t>(stream)>>>(args);
  record_launch("per_tile", reinterpret_cast<const void*>(kernel), grid, static_cast<int>(block.x), smem);
  return static_cast<int>(cudaGetLastError());
}

// Persistent launch: stage of max_T tokens + one state tile (W*32 threads * 32 chunks of 16 or 8 bytes) of
// dynamic shared memory. Returns kNoFit, launching nothing, when fewer than min_per_sm CTAs fit per SM
// (persistent_grid).
template <class KernelT>
int launch_persistent(KernelT kernel, const LaunchArgs& args, long long items, int min_per_sm, void* stream,
                      const char* instance) {
  if (items == 0) return 0;
  const int threads = 32 * args.c.warps;
  const int VT = v_tile_rows(args.c.warps, args.c.LK);
  const std::size_t stage =
      stage_bytes_16<std::size_t>(static_cast<std::size_t>(args.max_T), args.c.K, args.c.a_width(), VT);
  const std::size_t smem = stage + static_cast<std::size_t>(threads) * kNR * 4 * (args.c.state_bf16 ? 8 : 16);
  unsigned grid = 0;
  const int rc = persistent_grid(reinterpret_cast<const void*>(kernel), threads, smem, items, min_per_sm, &grid);
  if (rc != 0) return rc;
  kernel<<<grid, threads, smem, static_cast<cudaStream_t>(stream)>>>(args);
  record_launch(instance, reinterpret_cast<const void*>(kernel), grid, threads, smem);
  return static_cast<int>(cudaGetLastError());
}

// The one launch decision: with args.persistent (and a persistent kernel in the family) the dense persistent
// kernel when kDenseCtas CTAs fit per SM (a short window: the stage is small), else the standard one, falling
// back to per-tile when that does not fit either (same arithmetic, the window staged in chunks).
template <class Ks>
int launch_instance(const LaunchArgs& args, long long items, void* stream) {
  if constexpr (Ks::has_persistent) {
    if (args.persistent) {
      if constexpr (Ks::has_dense) {
        const int rc = launch_persistent(Ks::dense, args, items, kDenseCtas, stream, "dense");
        if (rc != kNoFit) return rc;
      }
      const int rc = launch_persistent(Ks::persistent, args, items, kPipeCtas, stream, "persistent");
      if (rc != kNoFit) return rc;
    }
  }
  return launch_per_tile(Ks::per_tile, args, items, stream);
}

// The one size / op dispatcher: lanes per row LK in {4, 8, 16} (K = 64, 128, 256) x GDN / KDA.
template <template <int, bool> class Kernels>
int launch_tiles(const LaunchArgs& args, long long items, void* stream) {
  switch (args.c.LK * 2 + (args.c.kda ? 1 : 0)) {
    case 8: return launch_instance<Kernels<4, false>>(args, items, stream);
    case 9: return launch_instance<Kernels<4, true>>(args, items, stream);
    case 16: return launch_instance<Kernels<8, false>>(args, items, stream);
    case 17: return launch_instance<Kernels<8, true>>(args, items, stream);
    case 32: return launch_instance<Kernels<16, false>>(args, items, stream);
    case 33: return launch_instance<Kernels<16, true>>(args, items, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace replayssm::cuda::detail
