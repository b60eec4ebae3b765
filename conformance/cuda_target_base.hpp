// What the CUDA lifecycle targets ("cuda", "cuda_full_state", "cuda_fused") share: a CUDA device at
// construction, the kernels' own limits as the answer to unsupported(), and the fp32 tier for the judge.
#pragma once

#include <cstdint>
#include <string>

#include "replayssm/cuda/kernels.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/target.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::conformance {

class CudaTargetBase : public ref::Target {
 public:
  // Throws Error("device") without a CUDA device.
  CudaTargetBase() { require(cuda::device_count() > 0, "device", "no CUDA device: the cuda targets need a GPU"); }
  bool bit_exact() const override { return false; }
  // The kernels' own limits (cuda::check_supported: K in {64, 128, 256}, V <= 1024, F32/BF16), asked before a
  // campaign: a preset outside them is reported as not covered rather than failing at setup.
  std::string unsupported(const ModelConfig& cfg, std::int32_t /*max_T*/) const override {
    try {
      cuda::check_supported(cfg);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  }
  // GPU vs CPU float reference: different reduction trees and fused multiply-adds, fp32 arithmetic: the
  // fp32 precision tier (tier.hpp; docs/cuda.md measured ~1e-7 relative against its 2e-5 bound), which
  // also covers bf16 storage rounding one ulp apart (an F32 state depends on the state dtype only; an
  // output also reads the stored state) and bf16-rounded beta (a discontinuous function of a libm result).
  // The fused target's arithmetic is bit-identical to verify_replay + commit_replay, so the same tier holds.
  Tolerance tolerance(const std::vector<double>& term_scale, bool state) const override {
    return tier_tolerance(Tier::Fp32, s_.cfg, term_scale, state);
  }

 protected:
  ref::EngineSetup s_;  // the setup of the current sequence (setup() stores it)
};

}  // namespace replayssm::conformance
