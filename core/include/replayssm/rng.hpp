// replayssm/rng.hpp — a portable, seeded generator for test and fixture inputs.
//
// std:: distributions are implementation-defined, so every random value in this project is derived from
// raw 64-bit SplitMix64 outputs with written mappings. The same seed gives the same bits on every platform
// and standard library; fixtures record the seed and kGeneratorName.
#pragma once

#include <cstdint>

namespace replayssm {

inline constexpr const char* kGeneratorName = "splitmix64/v1";

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  // SplitMix64 (Steele, Lea, Flood 2014; constants as published by Vigna).
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // U[0,1) with 24 random bits: exactly representable in float.
  float uniform01_f() { return static_cast<float>(next_u64() >> 40) * 0x1p-24f; }
  // U[0,1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1p-53; }
  // U[lo,hi) in float arithmetic (one rounding).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform01_f(); }
  // Integer in [lo, hi] (inclusive); modulo bias is negligible for the small ranges used here.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1u;
    return lo + static_cast<std::int64_t>(next_u64() % span);
  }
  // Approximately standard normal: Irwin-Hall sum of 4 uniforms, centred and scaled to unit variance.
  // Pure arithmetic (no libm), so bit-identical everywhere; tails are bounded at +-2*sqrt(3).
  float normalish() {
    const float s = uniform01_f() + uniform01_f() + uniform01_f() + uniform01_f();
    return (s - 2.0f) * 1.7320508f;
  }

 private:
  std::uint64_t state_;
};

// Derives an independent stream seed from (seed, stream id): used so that each tensor of a fixture has its
// own stream and adding a tensor does not shift the others.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xd1b54a32d192ed03ull));
  return r.next_u64();
}

}  // namespace replayssm
