// Host part of the persistent launch decision (dispatch.cuh): device limits and occupancy of a persistent
// kernel for a given dynamic shared memory size. No kernels here.
#include <string>

#include "dispatch.cuh"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"

namespace replayssm::cuda::detail {

int persistent_grid(const void* kernel, int threads, std::size_t smem, long long items, int min_per_sm,
                    unsigned* grid) {
  int dev = 0, sms = 0, optin = 0, per_sm = 0;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return static_cast<int>(e);
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return static_cast<int>(e);
  if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
    return static_cast<int>(e);
  if (smem > static_cast<std::size_t>(optin)) return kNoFit;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) !=
      cudaSuccess)
    return static_cast<int>(e);
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem)) != cudaSuccess)
    return static_cast<int>(e);
  if (per_sm < min_per_sm) return kNoFit;
  const long long resident = static_cast<long long>(per_sm) * sms;
  *grid = static_cast<unsigned>(items < resident ? items : resident);
  return 0;
}

namespace {
thread_local LaunchInfo g_last_launch;
thread_local const void* g_last_kernel = nullptr;
}  // namespace

void record_launch(const char* instance, const void* kernel, unsigned grid, int threads, std::size_t smem) {
  g_last_launch = LaunchInfo{instance, grid, threads, smem};
  g_last_kernel = kernel;
}

}  // namespace replayssm::cuda::detail

namespace replayssm::cuda {
LaunchInfo last_launch() {
  const auto check = [](cudaError_t e, const char* call) {
    if (e != cudaSuccess) fail(std::string("cuda.") + call, cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  };
  LaunchInfo info = detail::g_last_launch;
  if (detail::g_last_kernel == nullptr) return info;
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, detail::g_last_kernel), "cudaFuncGetAttributes");
  info.registers = attr.numRegs;
  info.local_bytes = static_cast<std::size_t>(attr.localSizeBytes);
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&info.ctas_per_sm, detail::g_last_kernel, info.threads, info.smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return info;
}
}  // namespace replayssm::cuda
