// The register state tile shared by every kernel: constants, bf16 and activation element access, state tile
// load / store in both layouts, the persistent kernels' cp.async prefetch, and the per-lane row helpers.
//
// Thread-to-element mapping (shared by every kernel, which is what makes them agree bit for bit):
//   LK = K / 16 lanes share one state row (a value index v); lane kl = lane % LK holds the 16 elements
//   k = c*4*LK + kl*4 + e (c, e in 0..3) of each of its kNR = 8 rows, rows r0 + i*RW (RW = 32 / LK rows per
//   warp pass, r0 = tile base + warp * 8 * RW + lane / LK). In the [V,K] layout each chunk c is 4
//   consecutive k, so a warp instruction reads RW rows of 16*LK contiguous bytes (fp32) per row.
// Fixed reduction order: a lane sums its 16 products in the order (c, e) with fused multiply-adds, then
// an xor butterfly over the LK lanes of the row (offsets LK/2, ..., 1); every lane ends with the same bits.
// Every floating-point operation is written as an explicit round-to-nearest intrinsic (__fmul_rn,
// __fmaf_rn, ...), so the compiler can neither contract nor reorder them differently in different kernels.
//
// Device code only, all __forceinline__: each .cu that includes it compiles its own inlined copy (no -rdc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "launch.hpp"

namespace replayssm::cuda::detail {

constexpr int kEK = 16;  // state elements per lane and row (kNR, rows per lane, is in launch.hpp)
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float bf16_bits_to_f(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }
__device__ __forceinline__ unsigned short f_to_bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// One activation element (f32 or bf16) widened to float.
__device__ __forceinline__ float ld_act(const void* p, long long i, bool bf16) {
  return bf16 ? bf16_bits_to_f(__ldg(static_cast<const unsigned short*>(p) + i))
              : __ldg(static_cast<const float*>(p) + i);
}
// One activation element stored with rounding.
__device__ __forceinline__ void st_act(void* p, long long i, float x, bool bf16) {
  if (bf16)
    static_cast<unsigned short*>(p)[i] = f_to_bf16_bits(x);
  else
    static_cast<float*>(p)[i] = x;
}
// Index of the j-th element (j = c*4 + e) of lane kl inside a row of K.
template <int LK>
__device__ __forceinline__ int kidx(int kl, int j) {
  return (j >> 2) * 4 * LK + kl * 4 + (j & 3);
}

// ---------------------------------------------------------------------------------------------------------
// State tile load / store. `head` points at the head's first element; rows >= V read as zero, never stored.
template <int LK, bool BF16, bool VK>
__device__ __forceinline__ void load_tile_t(const DevCfg& c, const void* head, int r0, int kl,
                                            float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK, K = 16 * LK;  // K == c.K by construction
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    const bool ok = i * RW < rows_left;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      float x[4] = {0.f, 0.f, 0.f, 0.f};
      if (ok) {
        if (VK) {
          if (BF16) {
            const unsigned short* p = static_cast<const unsigned short*>(head) + static_cast<long long>(r0) * K + kl * 4;
            const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p + i * RW * K + ch * 4 * LK));
            x[0] = __uint_as_float(u.x << 16);
            x[1] = __uint_as_float(u.x & 0xffff0000u);
            x[2] = __uint_as_float(u.y << 16);
            x[3] = __uint_as_float(u.y & 0xffff0000u);
          } else {
            const float* p = static_cast<const float*>(head) + static_cast<long long>(r0) * K + kl * 4;
            const float4 f = __ldcs(reinterpret_cast<const float4*>(p + i * RW * K + ch * 4 * LK));
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const long long off = static_cast<long long>(k0 + e) * c.V + r0 + i * RW;
            x[e] = BF16 ? bf16_bits_to_f(__ldcs(static_cast<const unsigned short*>(head) + off))
                        : __ldcs(static_cast<const float*>(head) + off);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][ch * 4 + e] = x[e];
    }
  }
}

template <int LK, bool BF16, bool VK, int I0, int I1, bool CONST_K = false>
__device__ __forceinline__ void store_tile_t(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
  // CONST_K: row stride as a compile-time constant (K == 16 * LK == c.K); the generic kernels keep the
  // run-time stride, which lets the compiler keep their register use lower in the token loop.
  const int K = CONST_K ? 16 * LK : c.K;
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    const int row = r0 + i * RW;
    if (row >= c.V) continue;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const int k0 = ch * 4 * LK + kl * 4;
      const float* x = &s[i][ch * 4];
      if (VK) {
        const long long off = static_cast<long long>(row) * K + k0;
        if (BF16) {
          uint2 u;
          u.x = unsigned(f_to_bf16_bits(x[0])) | (unsigned(f_to_bf16_bits(x[1])) << 16);
          u.y = unsigned(f_to_bf16_bits(x[2])) | (unsigned(f_to_bf16_bits(x[3])) << 16);
          __stcs(reinterpret_cast<uint2*>(static_cast<unsigned short*>(head) + off), u);
        } else {
          __stcs(reinterpret_cast<float4*>(static_cast<float*>(head) + off), make_float4(x[0], x[1], x[2], x[3]));
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long off = static_cast<long long>(k0 + e) * c.V + row;
          if (BF16)
            static_cast<unsigned short*>(head)[off] = f_to_bf16_bits(x[e]);
          else
            static_cast<float*>(head)[off] = x[e];
        }
      }
    }
  }
}

template <int LK>
__device__ __forceinline__ void load_tile(const DevCfg& c, const void* head, int r0, int kl, float (&s)[kNR][kEK]) {
  if (c.layout_vk) {
    if (c.state_bf16)
      load_tile_t<LK, true, true>(c, head, r0, kl, s);
    else
      load_tile_t<LK, false, true>(c, head, r0, kl, s);
  } else {
    if (c.state_bf16)
      load_tile_t<LK, true, false>(c, head, r0, kl, s);
    else
      load_tile_t<LK, false, false>(c, head, r0, kl, s);
  }
}
// The register tile as load_tile would give it back after store_tile: unchanged for an fp32 state, each
// element rounded to bf16 (RNE, f_to_bf16_bits) and widened back for a bf16 state. The fused verify continues
// from the committed state in registers; this makes them the bits the separate verify loads from the slot.
__device__ __forceinline__ void round_tile_to_state(const DevCfg& c, float (&s)[kNR][kEK]) {
  if (!c.state_bf16) return;
#pragma unroll
  for (int i = 0; i < kNR; ++i)
#pragma unroll
    for (int e = 0; e < kEK; ++e) s[i][e] = bf16_bits_to_f(f_to_bf16_bits(s[i][e]));
}

template <int LK, int I0 = 0, int I1 = kNR>
__device__ __forceinline__ void store_tile(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  if (c.layout_vk) {
    if (c.state_bf16)
      store_tile_t<LK, true, true, I0, I1>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, true, I0, I1>(c, head, r0, kl, s);
  } else {
    if (c.state_bf16)
      store_tile_t<LK, true, false, I0, I1>(c, head, r0, kl, s);
    else
      store_tile_t<LK, false, false, I0, I1>(c, head, r0, kl, s);
  }
}

// [V,K]-only store for the persistent kernels: base pointer plus compile-time offsets (K == 16 * LK).
template <int LK, bool BF16>
__device__ __forceinline__ void store_tile_vk_t(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK, K = 16 * LK;
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    if (i * RW >= rows_left) continue;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      const float* x = &s[i][ch * 4];
      if (BF16) {
        unsigned short* p = static_cast<unsigned short*>(head) + static_cast<long long>(r0) * K + kl * 4;
        uint2 u;
        u.x = unsigned(f_to_bf16_bits(x[0])) | (unsigned(f_to_bf16_bits(x[1])) << 16);
        u.y = unsigned(f_to_bf16_bits(x[2])) | (unsigned(f_to_bf16_bits(x[3])) << 16);
        __stcs(reinterpret_cast<uint2*>(p + i * RW * K + ch * 4 * LK), u);
      } else {
        float* p = static_cast<float*>(head) + static_cast<long long>(r0) * K + kl * 4;
        __stcs(reinterpret_cast<float4*>(p + i * RW * K + ch * 4 * LK), make_float4(x[0], x[1], x[2], x[3]));
      }
    }
  }
}
template <int LK>
__device__ __forceinline__ void store_tile_vk(const DevCfg& c, void* head, int r0, int kl, const float (&s)[kNR][kEK]) {
  if (c.state_bf16)
    store_tile_vk_t<LK, true>(c, head, r0, kl, s);
  else
    store_tile_vk_t<LK, false>(c, head, r0, kl, s);
}

// First byte of value head hv of pool slot `slot`.
__device__ __forceinline__ char* state_head(const DevCfg& c, void* pool, int slot, int hv) {
  const long long es = c.state_bf16 ? 2 : 4;
  return static_cast<char*>(pool) +
         (static_cast<long long>(slot) * c.slot_stride + static_cast<long long>(hv) * c.K * c.V) * es;
}

// ---------------------------------------------------------------------------------------------------------
// Prefetch of the persistent schedule ([V,K] layout): while a CTA computes one tile from registers, the next
// tile's state streams into shared memory with cp.async (each thread copies exactly the 16- or 8-byte chunks
// it will later read, so no other thread's copy is waited for).
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int bytes) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Chunk (i, ch) of thread tid lives at buf + ((i*4 + ch) * blockDim + tid) * chunk_bytes: consecutive
// threads hit consecutive addresses (no bank conflicts). Addresses are a base plus compile-time offsets.
template <int LK, int CB>
__device__ __forceinline__ void prefetch_tile_t(const DevCfg& c, const void* head, int r0, int kl, char* buf) {
  constexpr int RW = 32 / LK, K = 16 * LK, ES = CB / 4;
  const char* g = static_cast<const char*>(head) + (static_cast<long long>(r0) * K + kl * 4) * ES;
  char* sp = buf + threadIdx.x * CB;
  const int stride = static_cast<int>(blockDim.x) * CB;
  const int rows_left = c.V - r0;
#pragma unroll
  for (int i = 0; i < kNR; ++i) {
    if (i * RW >= rows_left) break;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) cp_async(sp + (i * 4 + ch) * stride, g + (i * RW * K + ch * 4 * LK) * ES, CB);
  }
  cp_async_commit();
}
template <int LK>
__device__ __forceinline__ void prefetch_tile(const DevCfg& c, const void* head, int r0, int kl, char* buf) {
  if (c.state_bf16)
    prefetch_tile_t<LK, 8>(c, head, r0, kl, buf);
  else
    prefetch_tile_t<LK, 16>(c, head, r0, kl, buf);
}

template <int LK>
__device__ __forceinline__ void tile_from_smem(const DevCfg& c, const char* buf, int r0, float (&s)[kNR][kEK]) {
  constexpr int RW = 32 / LK;
  const int rows_left = c.V - r0;
  if (c.state_bf16) {
    const uint2* sp = reinterpret_cast<const uint2*>(buf) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        uint2 u = make_uint2(0u, 0u);
        if (i * RW < rows_left) u = sp[(i * 4 + ch) * static_cast<int>(blockDim.x)];
        s[i][ch * 4 + 0] = __uint_as_float(u.x << 16);
        s[i][ch * 4 + 1] = __uint_as_float(u.x & 0xffff0000u);
        s[i][ch * 4 + 2] = __uint_as_float(u.y << 16);
        s[i][ch * 4 + 3] = __uint_as_float(u.y & 0xffff0000u);
      }
  } else {
    const float4* sp = reinterpret_cast<const float4*>(buf) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kNR; ++i)
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i * RW < rows_left) f = sp[(i * 4 + ch) * static_cast<int>(blockDim.x)];
        s[i][ch * 4 + 0] = f.x, s[i][ch * 4 + 1] = f.y, s[i][ch * 4 + 2] = f.z, s[i][ch * 4 + 3] = f.w;
      }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Per-lane helpers of the register tile.

// Loads 16 lane elements of a staged K-vector (chunks of 4 at kidx).
template <int LK>
__device__ __forceinline__ void lane_vec(const float* base, int kl, float (&x)[kEK]) {
#pragma unroll
  for (int ch = 0; ch < 4; ++ch) {
    const float4 f = *reinterpret_cast<const float4*>(base + ch * 4 * LK + kl * 4);
    x[ch * 4 + 0] = f.x, x[ch * 4 + 1] = f.y, x[ch * 4 + 2] = f.z, x[ch * 4 + 3] = f.w;
  }
}

// Picks x[i] with a run-time i without dynamic register indexing.
__device__ __forceinline__ float pick(const float (&x)[kNR], int i) {
  float r = 0.f;
#pragma unroll
  for (int ii = 0; ii < kNR; ++ii)
    if (ii == i) r = x[ii];
  return r;
}

// Lane kl of a row group stores rows i = kl, kl + LK, ...: one coalesced store instruction per LK rows.
template <int LK, int I0 = 0, int I1 = kNR, class F>
__device__ __forceinline__ void for_my_rows(const DevCfg& c, int r0, int kl, F&& f) {
  constexpr int RW = 32 / LK;
#pragma unroll
  for (int i0 = 0; i0 < kNR; i0 += (LK < kNR ? LK : kNR)) {
    const int i = i0 + kl;
    if (i >= I0 && i < I1) {
      const int row = r0 + i * RW;
      if (row < c.V) f(i, row);
    }
  }
}

// Scheduling only (no effect on any element's arithmetic): with REPLAYSSM_ROW_GROUPS == 2 a lane runs all
// tokens of its rows 0..3 (and stores them) before rows 4..7, so the first group's compute and stores
// overlap the second group's loads.
#ifndef REPLAYSSM_ROW_GROUPS
#define REPLAYSSM_ROW_GROUPS 1
#endif
template <class F>
__device__ __forceinline__ void for_row_groups(F&& f) {
  using Z = std::integral_constant<int, 0>;
  using N = std::integral_constant<int, kNR>;
  using H = std::integral_constant<int, kNR / 2>;
  if (REPLAYSSM_ROW_GROUPS == 2) {
    f(Z{}, H{});
    f(H{}, N{});
  } else {
    f(Z{}, N{});
  }
}

}  // namespace replayssm::cuda::detail
