// Helpers shared by the GPU tests: device detection, host images of device tensors in either dtype,
// poison markers, and seeded random step cases.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/compare.hpp"
#include "replayssm/config.hpp"
#include "replayssm/cuda/kernels.hpp"
#include "replayssm/step.hpp"

namespace replayssm::testing {

// Skips the current test when no CUDA device is usable (CI machines have none).
#define REPLAYSSM_REQUIRE_GPU()                                                                        \
  do {                                                                                                 \
    if (::replayssm::cuda::device_count() == 0)                                                        \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or found none): GPU test skipped";    \
  } while (0)

// Unsigned environment variable, or def when unset/empty.
std::uint64_t env_u64(const char* name, std::uint64_t def);

// Bytes per element of dtype t (dtype_size).
std::size_t dsize(DType t);
// Raw bytes of a host tensor in dtype t (F32 or BF16; Tensor::from_f32, BF16 rounded to nearest even: the
// values must already be representable) and back (Tensor::to_f32, exact for every non-NaN value).
std::vector<std::uint8_t> encode(const std::vector<float>& x, DType t);
std::vector<float> decode(const std::uint8_t* bytes, std::size_t n, DType t);
// Writes / reads n elements at element offset `at` of a byte image.
void put(std::vector<std::uint8_t>& img, std::int64_t at, const std::vector<float>& x, DType t);
std::vector<float> get(const std::vector<std::uint8_t>& img, std::int64_t at, std::size_t n, DType t);
// Fills elements [at, at+n) of an image with a raw bit pattern (low 16 bits used for BF16).
void fill_marker(std::vector<std::uint8_t>& img, std::int64_t at, std::int64_t n, DType t, std::uint32_t bits);

// Poison patterns (all NaN, distinct, so a stray read shows up and a stray write is detected bitwise).
inline constexpr std::uint32_t kSlotMarkF32 = 0x7fc0beefu, kGapMarkF32 = 0x7f80deadu, kOutMarkF32 = 0xfff0cafeu;
inline constexpr std::uint32_t kSlotMarkBF16 = 0x7fc1u, kGapMarkBF16 = 0x7f81u, kOutMarkBF16 = 0xfff3u;
std::uint32_t slot_mark(DType t);
std::uint32_t gap_mark(DType t);
std::uint32_t out_mark(DType t);

// Device copy of a byte image.
cuda::DeviceBuffer to_device(const std::vector<std::uint8_t>& img);
std::vector<std::uint8_t> to_host(const cuda::DeviceBuffer& b);

// One random verify/commit step.
struct StepCase {
  std::uint64_t seed = 0;
  ModelConfig cfg;
  std::int32_t max_T = 1;
  PoolGeometry pool;
  PayloadGeometry pay;
  std::vector<BatchRow> rows;
  std::vector<std::int32_t> pages;
  std::int64_t total_tokens = 0;
  cuda::Schedule sched_full = cuda::Schedule::Auto, sched_replay = cuda::Schedule::Auto;
  std::string describe() const;
};

// Optional overrides of make_case's draws (0 = draw).
struct CaseShape {
  int K = 0, V = 0, rows = 0, H = 0, G = 0, layers = 0;
};

// Draws a case from the seed: GVA ratio in {1,2,3,4,8}, K and V in {64,128} (unless forced), both state and
// activation dtypes, both layouts, both l2norm forms, 1..3 layers, 1..5 rows with T in 1..8, accepted in
// 0..T, PAD rows (T in 0..max_T), permuted slots, in-place and out-of-place commits, slot_stride gaps,
// permuted pages of 1..4 tokens, token windows in permuted order with gaps, and the schedule of each path
// drawn from {Auto, PerTile} (Auto is the persistent schedule for [V,K]), so schedules are mixed too.
StepCase make_case(std::uint64_t seed, Op op, const CaseShape& shape = {});

// Tolerance used for GPU vs CPU float reference on quantities stored in dtype t (docs/cuda.md).
Tolerance gpu_vs_cpu_tolerance(DType stored);

// Running record of the worst GPU-vs-CPU element per category, printed at the end of a test.
struct WorstTracker {
  struct Entry {
    std::string what;
    double max_abs = 0, max_rel = 0, worst_excess = 0, max_rel_rms = 0;
    std::string report;
  };
  std::vector<Entry> entries;
  void add(const std::string& what, const CompareReport& r, const std::vector<float>& ref,
           const std::vector<float>& got);
  void print() const;
};

}  // namespace replayssm::testing
