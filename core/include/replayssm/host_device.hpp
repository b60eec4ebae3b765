// replayssm/host_device.hpp — REPLAYSSM_HOST_DEVICE marks a small constexpr function that the host code and
// the CUDA kernels share (one definition for both compilers): __host__ __device__ under nvcc, nothing under
// the host compiler.
#pragma once

#if defined(__CUDACC__)
#define REPLAYSSM_HOST_DEVICE __host__ __device__
#else
#define REPLAYSSM_HOST_DEVICE
#endif
