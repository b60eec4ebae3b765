// Small cases computed by hand (K = V = 2), so the reference is checked against arithmetic a reader can
// redo on paper, not against itself.
#include <gtest/gtest.h>

#include <cmath>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/inputs.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {
ModelConfig hand_cfg() {
  ModelConfig c;
  c.H = c.HV = 1;
  c.K = c.V = 2;
  c.l2norm = L2Norm::None;
  c.q_scale = 1.0;
  c.act_dtype = DType::F32;
  c.layout = StateLayout::KV;
  return c;
}
// a = 0, dt_bias = 0, A_log = 0: softplus(0) = ln 2, g = -ln 2, alpha = 1/2; b = 0: beta = 1/2.
SequenceInputs hand_inputs() {
  SequenceInputs in;
  in.T = 2;
  in.k = {1, 0, 0.5f, 0.75f};  // dyadic values: exact in float and double
  in.q = {0, 1, 1, 1};
  in.v = {1, 1, 0, 2};
  in.a = {0, 0};
  in.b = {0, 0};
  return in;
}
LayerParams hand_params() { return LayerParams{{0.0f}, {0.0f}}; }
}  // namespace

TEST(GdnHand, TwoTokensKV) {
  const auto cfg = hand_cfg();
  std::vector<double> S{1, 2, 3, 4};  // S[k][v]
  std::vector<double> o;
  std::vector<std::vector<double>> after;
  run_recurrent<double>(cfg, hand_params(), hand_inputs(), S, o, &after);
  // Token 1: decay -> [[.5,1],[1.5,2]]; read S^T k = (.5,1); delta = .5*((1,1)-(.5,1)) = (.25,0);
  // write row 0 -> [[.75,1],[1.5,2]]; o = S^T q = row 1 = (1.5, 2).
  EXPECT_NEAR(o[0], 1.5, 1e-12);
  EXPECT_NEAR(o[1], 2.0, 1e-12);
  const std::vector<double> s1{0.75, 1, 1.5, 2};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(after[0][i], s1[i], 1e-12) << i;
  // Token 2: decay -> [[.375,.5],[.75,1]]; read = .5*row0 + .75*row1 = (.75, 1);
  // delta = .5*((0,2) - (.75,1)) = (-.375, .5); rows += (.5, .75) x delta -> [[.1875,.75],[.46875,1.375]];
  // o = row0 + row1 = (.65625, 2.125).
  EXPECT_NEAR(o[2], 0.65625, 1e-12);
  EXPECT_NEAR(o[3], 2.125, 1e-12);
  const std::vector<double> s2{0.1875, 0.75, 0.46875, 1.375};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(S[i], s2[i], 1e-12) << i;
}

TEST(GdnHand, VKLayoutHoldsTheTranspose) {
  auto cfg = hand_cfg();
  cfg.layout = StateLayout::VK;
  std::vector<double> S{1, 3, 2, 4};  // S[v][k] = transpose of the KV case
  std::vector<double> o;
  run_recurrent<double>(cfg, hand_params(), hand_inputs(), S, o);
  const std::vector<double> s2{0.1875, 0.46875, 0.75, 1.375};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(S[i], s2[i], 1e-12) << i;
  EXPECT_NEAR(o[3], 2.125, 1e-12);
}

TEST(GdnHand, L2NormAndScale) {
  auto cfg = hand_cfg();
  cfg.l2norm = L2Norm::DivSqrt;
  cfg.q_scale = 0.0;  // default K^-1/2
  double out[2];
  const float x[2] = {3, 4};
  l2normalize<double>(cfg, x, 2, 1.0, out);
  EXPECT_DOUBLE_EQ(out[0], 3.0 / std::sqrt(25.0 + static_cast<double>(1e-6f)));
  EXPECT_NEAR(cfg.scale(), 1.0 / std::sqrt(2.0), 1e-15);
  // The two public forms agree to rounding but are distinct operations.
  cfg.l2norm = L2Norm::RsqrtMul;
  double out2[2];
  l2normalize<double>(cfg, x, 2, 1.0, out2);
  EXPECT_NEAR(out2[0], out[0], 1e-15);
}

TEST(GdnHand, GateFormulas) {
  EXPECT_DOUBLE_EQ(softplus(20.5), 20.5);                       // linear above the threshold
  EXPECT_DOUBLE_EQ(softplus(20.0), std::log1p(std::exp(20.0)));  // threshold itself is not linear
  EXPECT_NEAR(softplus(0.0), std::log(2.0), 1e-15);
  EXPECT_DOUBLE_EQ(sigmoid(0.0), 0.5);
  // GDN: g = -exp(A_log) * softplus(a + dt_bias).
  auto cfg = hand_cfg();
  SequenceInputs in = hand_inputs();
  in.a = {1.0f, 0.0f};
  LayerParams p{{std::log(3.0f)}, {0.5f}};
  double g;
  log_decay<double>(cfg, p, in, 0, 0, &g);
  EXPECT_NEAR(g, -3.0 * std::log1p(std::exp(1.5)), 1e-6);
  // KDA lower-bound gate: g_c = lb * sigmoid(exp(A_log) * (a_c + dt_bias_c)).
  ModelConfig k = hand_cfg();
  k.op = Op::KDA;
  k.kda_gate = KdaGate::LowerBoundSigmoid;
  k.lower_bound = -5.0f;
  SequenceInputs ki = hand_inputs();
  ki.a = {0.25f, -1.0f, 0, 0};
  LayerParams kp{{std::log(2.0f)}, {0.25f, 1.0f}};
  double gk[2];
  log_decay<double>(k, kp, ki, 0, 0, gk);
  EXPECT_NEAR(gk[0], -5.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(gk[1], -2.5, 1e-12);  // sigmoid(0) = 1/2
}

TEST(GdnHand, BetaRoundingToActivationDtype) {
  auto cfg = hand_cfg();
  cfg.act_dtype = DType::BF16;
  SequenceInputs in = hand_inputs();
  in.b = {0.3f, 0.0f};
  const float exact = beta_of<float>(cfg, in, 0, 0);
  cfg.round_beta_to_act = true;
  const float rounded = beta_of<float>(cfg, in, 0, 0);
  EXPECT_EQ(rounded, round_bf16(exact));
  EXPECT_NE(rounded, exact);
}

TEST(GdnHand, KdaEqualsGdnWhenAllChannelsShareTheGate) {
  // KDA with a[t,hv,c] = a_GDN and dt_bias_c = dt_bias for every channel is GDN.
  ModelConfig g = preset("tiny-gdn");
  g.H = g.HV = 2;
  ModelConfig k = g;
  k.op = Op::KDA;
  const auto in = random_inputs(g, 5, 7);
  const auto p = random_params(g, 7);
  SequenceInputs ki = in;
  ki.a.clear();
  for (float x : in.a) ki.a.insert(ki.a.end(), static_cast<std::size_t>(k.K), x);
  LayerParams kp{p.A_log, {}};
  for (float x : p.dt_bias) kp.dt_bias.insert(kp.dt_bias.end(), static_cast<std::size_t>(k.K), x);
  auto S1 = widen<double>(random_state(g, 7));
  auto S2 = S1;
  std::vector<double> o1, o2;
  run_recurrent<double>(g, p, in, S1, o1);
  run_recurrent<double>(k, kp, ki, S2, o2);
  EXPECT_EQ(S1, S2);
  EXPECT_EQ(o1, o2);
}

TEST(GdnHand, ShapeErrorsNameTheField) {
  const auto cfg = hand_cfg();
  auto in = hand_inputs();
  in.v.pop_back();
  std::vector<double> S(4), o;
  try {
    run_recurrent<double>(cfg, hand_params(), in, S, o);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "inputs.v");
  }
  std::vector<double> bad(3);
  try {
    run_recurrent<double>(cfg, hand_params(), hand_inputs(), bad, o);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "state");
  }
}
