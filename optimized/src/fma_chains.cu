// The benchmarks' fp32 rate probe (replayssm::cuda::fma_chains): every thread runs 8 independent FFMA chains,
// so the FMA pipes, not the dependency latency, set the pace; one float per thread is stored so that nothing
// is optimised away.
#include <cuda_runtime.h>

#include "launch.hpp"

namespace replayssm::cuda::detail {
namespace {

constexpr int kChains = 8;

__global__ void __launch_bounds__(256) fma_chains_kernel(float* out, int iters) {
  float x[kChains];
#pragma unroll
  for (int j = 0; j < kChains; ++j) x[j] = static_cast<float>(threadIdx.x + j) * 1e-3f;
  const float a = 0.999f, b = 1e-4f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 16; ++u)
#pragma unroll
      for (int j = 0; j < kChains; ++j) x[j] = fmaf(x[j], a, b);
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kChains; ++j) s += x[j];
  out[blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x] = s;
}

}  // namespace

int launch_fma_chains(float* out, unsigned grid, int iters, void* stream) {
  if (grid == 0 || iters <= 0) return 0;
  fma_chains_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(out, iters);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace replayssm::cuda::detail
