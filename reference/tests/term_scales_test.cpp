// Term scales (term_scales.hpp) and the tier bounds read relative to them (tier.hpp, compare.hpp):
//  - every output and state element is bounded by its term scale (|sum| <= sum of |terms|), and the scales move
//    with the tensors (v and S0 scaled by c scale the state and output terms by c: the bound follows the size);
//  - a 1e-3 relative error in a tensor of size 3e-4 passes the old floor-of-1 bound and fails the scaled one;
//    an exact zero is judged at the zero-scale bound (2^-126), so a non-zero value there fails;
//  - the l2norm's eps placed outside the root (the catalogue fault l2norm_eps_outside_sqrt) stays inside the fp32
//    tier for unit-variance rows at K = 128 and lands far outside it for rows at a checkpoint's sizes
//    (inputs.hpp, GateRange::Checkpoint): the inputs decide what the bound can see.
// Tolerance-based throughout except where said: the bounds under test are the tier's, derived in docs/numerics.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "replayssm/compare.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/recurrence/term_scales.hpp"
#include "replayssm/tier.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {
ModelConfig small(Op op, L2Norm l2) {
  ModelConfig c = preset(op == Op::GDN ? "tiny-gdn" : "tiny-kda");
  c.act_dtype = DType::F32;
  c.state_dtype = DType::F32;
  c.num_layers = 1;
  c.l2norm = l2;
  return c;
}

// Runs the window in binary64 from S0; returns outputs [T, HV, V] and the final state.
void run64(const ModelConfig& cfg, const LayerParams& p, const std::vector<float>& S0, const SequenceInputs& in,
           std::vector<double>& o, std::vector<double>& S, const TokenHook* hook = nullptr) {
  S.assign(S0.begin(), S0.end());
  RecurrentOptions opt;
  opt.hook = hook;
  run_recurrent<double>(cfg, p, in, S, o, nullptr, opt);
}

struct EpsOutside : TokenHook {
  L2Norm l2norm(L2Norm) const override { return L2Norm::DivNormPlusEps; }
};
}  // namespace

TEST(TermScales, BoundEveryElementAndFollowTheTensorsSize) {
  for (Op op : {Op::GDN, Op::KDA})
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      const ModelConfig cfg = small(op, L2Norm::RsqrtMul);
      const GateRange g = seed % 2 ? GateRange::Checkpoint : GateRange::Benign;
      const LayerParams p = random_params(cfg, seed, g);
      SequenceInputs in = random_inputs(cfg, 6, seed, g);
      std::vector<float> S0 = random_state(cfg, seed);
      const TermScales ts = term_scales(cfg, p, S0, in);
      // |S_t| <= state term scale, and |o_t| <= out term scale, per head (checked token by token).
      std::vector<double> S(S0.begin(), S0.end()), o(static_cast<std::size_t>(cfg.HV) * cfg.V);
      for (int t = 0; t < in.T; ++t) {
        token_step<double>(cfg, p, in, t, S.data(), o.data());
        for (int hv = 0; hv < cfg.HV; ++hv) {
          const double so = ts.out[static_cast<std::size_t>(t) * cfg.HV + hv];
          const double ss = ts.state[static_cast<std::size_t>(t) * cfg.HV + hv];
          for (int v = 0; v < cfg.V; ++v)
            ASSERT_LE(std::fabs(o[static_cast<std::size_t>(hv) * cfg.V + v]), so * (1 + 1e-12))
                << "seed " << seed << " t " << t << " hv " << hv << " v " << v;
          for (int i = 0; i < cfg.K * cfg.V; ++i)
            ASSERT_LE(std::fabs(S[static_cast<std::size_t>(hv) * cfg.K * cfg.V + i]), ss * (1 + 1e-12))
                << "seed " << seed << " t " << t << " hv " << hv << " element " << i;
        }
      }
      // v and S0 scaled by 2^-10 (exact in binary32): every state and output term scales by 2^-10 exactly.
      for (auto& x : in.v) x = std::ldexp(x, -10);
      for (auto& x : S0) x = std::ldexp(x, -10);
      const TermScales small_ts = term_scales(cfg, p, S0, in);
      for (std::size_t i = 0; i < ts.out.size(); ++i) {
        EXPECT_NEAR(small_ts.out[i], std::ldexp(ts.out[i], -10), 1e-12 * ts.out[i]) << "seed " << seed << " out " << i;
        EXPECT_NEAR(small_ts.state[i], std::ldexp(ts.state[i], -10), 1e-12 * ts.state[i]) << "seed " << seed << " state " << i;
        EXPECT_EQ(small_ts.q_l1[i], ts.q_l1[i]) << "seed " << seed << ": q's weights do not depend on v";
      }
    }
}

TEST(TermScales, ASmallTensorIsJudgedAtItsOwnSize) {
  const ModelConfig cfg = small(Op::GDN, L2Norm::RsqrtMul);
  // A tensor of scale 3e-4 (a real checkpoint's decode outputs) carrying a 1e-3 relative error.
  std::vector<double> ref(64), got(64), scale(64, 3e-4);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ref[i] = 3e-4 * std::sin(static_cast<double>(i) + 0.5);
    got[i] = ref[i] * (1 + 1e-3);
  }
  const auto old_bound = compare(ref, got, tier_tolerance(Tier::Fp32, cfg, 1.0, false));
  const auto scaled = compare(ref, got, tier_tolerance(Tier::Fp32, cfg, scale, false));
  EXPECT_TRUE(old_bound.ok) << "the floor of 1 should pass it (that is what it missed): " << old_bound.str();
  EXPECT_FALSE(scaled.ok) << "the term-scaled fp32 bound passed a 1e-3 relative error: " << scaled.str();
  EXPECT_NE(scaled.str().find("term_scale=0.0003"), std::string::npos) << scaled.str();
  // The same error at the bf16 tier (16 u = 2^-4 of the scale) is inside: the tier still decides.
  EXPECT_TRUE(compare(ref, got, tier_tolerance(Tier::Bf16, cfg, scale, false)).ok);
  // Zero scale: the exact value is 0, and only a value within 2^-126 of it passes.
  std::vector<double> z(4, 0.0), zs(4, 0.0), near = {0.0, 0x1p-127, 0.0, 0.0}, off = {0.0, 1e-30, 0.0, 0.0};
  EXPECT_TRUE(compare(z, near, tier_tolerance(Tier::Fp32, cfg, zs, false)).ok);
  EXPECT_FALSE(compare(z, off, tier_tolerance(Tier::Fp32, cfg, zs, false)).ok);
  // A scale vector of the wrong length is an error, not a pass.
  const auto wrong = compare(ref, got, tier_tolerance(Tier::Fp32, cfg, std::vector<double>(3, 1.0), false));
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.str().find("term scale has 3 elements"), std::string::npos) << wrong.str();
}

TEST(TermScales, EpsOutsideTheRootShowsOnlyAtCheckpointSizes) {
  ModelConfig cfg = preset("qwen3.5");
  cfg.act_dtype = DType::F32;
  cfg.num_layers = 1;
  const EpsOutside hook;
  for (GateRange g : {GateRange::Benign, GateRange::Checkpoint}) {
    double worst = 0;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const LayerParams p = random_params(cfg, seed, g);
      const SequenceInputs in = random_inputs(cfg, 4, seed, g);
      const std::vector<float> S0;  // a fresh request
      std::vector<double> o_ref, s_ref, o_bad, s_bad;
      run64(cfg, p, std::vector<float>(static_cast<std::size_t>(cfg.state_elems()), 0.0f), in, o_ref, s_ref);
      run64(cfg, p, std::vector<float>(static_cast<std::size_t>(cfg.state_elems()), 0.0f), in, o_bad, s_bad, &hook);
      TermScales ts = term_scales(cfg, p, S0, in);
      add_state_error(ts, std::vector<double>(static_cast<std::size_t>(cfg.HV), 0.0));
      const auto r = compare(o_ref, o_bad, tier_tolerance(Tier::Fp32, cfg, output_element_scales(cfg, ts), false));
      worst = std::max(worst, r.worst_excess);
    }
    std::cout << "[term-scales] eps outside the root, qwen3.5 dims, " << to_string(g) << " inputs: worst output "
              << worst << "x the fp32 tier bound\n";
    if (g == GateRange::Benign)
      EXPECT_LT(worst, 0.1) << "unit-variance rows at K = 128: eps / (2 sum(x^2)) ~ 4e-9, far inside the bound";
    else
      EXPECT_GT(worst, 10.0) << "rows of norm 1e-3 .. 1e-2: eps decides the normalised row";
  }
}
