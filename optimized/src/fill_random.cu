// Deterministic device fill for benchmarks (replayssm::cuda::fill_random): uniform in [-scale, scale) from a
// hash of (seed, index).
#include <cuda_runtime.h>

#include "launch.hpp"
#include "tile.cuh"

namespace replayssm::cuda::detail {
namespace {

__global__ void fill_random_kernel(void* dst, long long n, int bf16, unsigned long long seed, float scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned long long z = seed + 0x9e3779b97f4a7c15ull * static_cast<unsigned long long>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;  // [0, 1)
    const float x = (2.f * u - 1.f) * scale;
    if (bf16)
      static_cast<unsigned short*>(dst)[i] = f_to_bf16_bits(x);
    else
      static_cast<float*>(dst)[i] = x;
  }
}

}  // namespace

int launch_fill_random(void* dst, std::int64_t n, int bf16, std::uint64_t seed, float scale, void* stream) {
  if (n <= 0) return 0;
  const long long blocks = (n + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  fill_random_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, n, bf16, seed, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace replayssm::cuda::detail
