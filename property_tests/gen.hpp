// RapidCheck generators shared by the reference's property tests. All randomness flows from rc::gen so a
// failing case replays from its RC_PARAMS reproduce string.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>

#include "replayssm/config.hpp"
#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::testgen {

// Integer uniform in [lo, hi) at every test size. rc::gen::inRange scales its spread with the test size, so
// with the default size ramp most cases would stay near lo (63% of T in [1,17) were <= 4); a property
// meant to cover the whole range must not depend on that. Shrinking still moves towards lo.
inline rc::Gen<int> in(int lo, int hi) { return rc::gen::resize(100, rc::gen::inRange(lo, hi)); }

// A small but complete GDN or KDA configuration: GVA ratio in {1,2,3,4,8}, K != V allowed, both layouts,
// both l2norm forms, optional beta rounding, both KDA gate forms, F32 or BF16 activations.
inline rc::Gen<ModelConfig> small_config(bool allow_kda = true) {
  return rc::gen::exec([allow_kda] {
    ModelConfig c;
    c.name = "generated";
    c.op = allow_kda && *rc::gen::arbitrary<bool>() ? Op::KDA : Op::GDN;
    c.H = *in(1, 3);
    c.HV = c.H * *rc::gen::element(1, 2, 3, 4, 8);
    c.K = *rc::gen::element(2, 3, 4, 8, 16);
    c.V = *rc::gen::element(2, 4, 5, 8, 16);
    c.layout = *rc::gen::arbitrary<bool>() ? StateLayout::KV : StateLayout::VK;
    c.l2norm = *rc::gen::element(L2Norm::RsqrtMul, L2Norm::DivSqrt);
    c.round_beta_to_act = *rc::gen::arbitrary<bool>();
    c.kda_gate = *rc::gen::arbitrary<bool>() ? KdaGate::Softplus : KdaGate::LowerBoundSigmoid;
    c.act_dtype = *rc::gen::arbitrary<bool>() ? DType::BF16 : DType::F32;
    return c;
  });
}

inline rc::Gen<std::uint64_t> seed() { return rc::gen::arbitrary<std::uint64_t>(); }


// Engine setups for the lifecycle properties: small models with 1-2 layers, 3-6 slots, realistic gates in a
// quarter of the cases (large |g|, saturated and near-zero beta: inputs.hpp), checkpoint sizes of q, k and v with
// those gates in another quarter; the largest window
// max_T in 1..6 for half the cases, else 8 or 12 (the verify widths of MTP / EAGLE engines, so windows of 9..12
// tokens and spec rings of 10 and 14 records occur: docs/lifecycle.md, H15).
// ring_exact: F32 state (the configuration in which the Serial/F32 ring is claimed bit-exact).
inline rc::Gen<ref::EngineSetup> lifecycle_setup(bool ring_exact) {
  return rc::gen::exec([ring_exact] {
    ModelConfig cfg = *small_config();
    cfg.num_layers = *in(1, 3);
    cfg.state_dtype = ring_exact ? DType::F32 : *rc::gen::element(DType::F32, DType::BF16);
    const std::uint64_t seed = *rc::gen::arbitrary<std::uint64_t>();
    const int max_T = *rc::gen::oneOf(in(1, 7), rc::gen::element(8, 12));
    // A quarter of the cases draw the gates of trained models (inputs.hpp, GateRange::Realistic), a quarter those
    // gates with q, k and v at a checkpoint's sizes (GateRange::Checkpoint).
    const int mix = *in(0, 4);
    const auto gates = mix == 3 ? ref::GateRange::Realistic : mix == 2 ? ref::GateRange::Checkpoint : ref::GateRange::Benign;
    auto setup = ref::make_setup(cfg, seed, *in(3, 7), max_T, gates);
    // A quarter of the cases carry the conv component (conv_component.hpp; dropped by check_lifecycle for a
    // target that keeps no conv state): kernel sizes 2..5 (W = 4 in the shipped models), F32 or BF16 windows,
    // SiLU or none, with or without bias. Drawn last, so the draws above are those of a case without it.
    if (*in(0, 4) == 3) {
      const int W = *in(2, 6);
      const DType window_dtype = *rc::gen::element(DType::F32, DType::BF16);
      const auto act = *rc::gen::element(ref::ConvActivation::Silu, ref::ConvActivation::None);
      const bool bias = *rc::gen::arbitrary<bool>();
      setup.conv = ref::make_conv_setup(cfg, seed ^ 0xc0ffeeull, W, window_dtype, act, bias);
    }
    return setup;
  });
}

}  // namespace replayssm::testgen

namespace replayssm::ref {
// How RapidCheck prints a generated setup in a counterexample.
inline void showValue(const EngineSetup& s, std::ostream& os) { os << s.to_json().dump(); }
}  // namespace replayssm::ref
