// Properties of the GDN/KDA reference itself: the chunked form equals the recurrent form, layouts agree
// bit for bit, GVA routes key head h to value heads [h*G, (h+1)*G), float tracks double within a stated
// bound, and splitting a call changes nothing.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "gen.hpp"
#include "replayssm/compare.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/inputs.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {
std::string show(const ModelConfig& c) {
  return "op=" + to_string(c.op) + " H=" + std::to_string(c.H) + " HV=" + std::to_string(c.HV) +
         " K=" + std::to_string(c.K) + " V=" + std::to_string(c.V) + " layout=" + to_string(c.layout) +
         " gate=" + to_string(c.kda_gate);
}
}  // namespace

// Tolerance (double, both forms unrounded): the forms are algebraically identical; the only differences
// are binary64 roundings in a few hundred operations per element on O(1) values, i.e. ~1e-14 absolute.
// allclose(atol=1e-11, rtol=1e-10) leaves three orders of margin yet fails on any algebra slip (those give
// errors >= 1e-3). Measured worst over 1000 cases: see docs/numerics.md.
RC_GTEST_PROP(Chunked, EqualsRecurrentInDouble, ()) {
  const ModelConfig cfg = *testgen::small_config();
  const int T = *testgen::in(1, 100);
  const int chunk = *rc::gen::element(16, 32, 64, 1, 3, 7);
  const std::uint64_t s = *testgen::seed();
  RC_TAG(chunk);
  const auto in = random_inputs(cfg, T, s);
  const auto p = random_params(cfg, s);
  auto S_rec = widen<double>(random_state(cfg, s));
  auto S_chk = S_rec;
  std::vector<double> o_rec, o_chk;
  run_recurrent<double>(cfg, p, in, S_rec, o_rec);
  run_chunked<double>(cfg, p, in, chunk, S_chk, o_chk);
  const auto tol = Tolerance::allclose(1e-11, 1e-10);
  const auto ro = compare(o_rec, o_chk, tol);
  const auto rs = compare(S_rec, S_chk, tol);
  RC_LOG() << show(cfg) << " T=" << T << " chunk=" << chunk << "\n o: " << ro.str() << "\n S: " << rs.str();
  RC_ASSERT(ro.ok);
  RC_ASSERT(rs.ok);
}

// Bit-exact: the per-element operation sequence is the same for both layouts (docs/numerics.md).
RC_GTEST_PROP(Layout, KVAndVKAgreeBitForBit, ()) {
  ModelConfig cfg = *testgen::small_config();
  const int T = *testgen::in(1, 20);
  const std::uint64_t s = *testgen::seed();
  cfg.layout = StateLayout::KV;
  const auto in = random_inputs(cfg, T, s);
  const auto p = random_params(cfg, s);
  auto S_kv = random_state(cfg, s);
  ModelConfig vk = cfg;
  vk.layout = StateLayout::VK;
  auto S_vk = convert_layout(cfg, S_kv, StateLayout::KV, StateLayout::VK);
  std::vector<float> o_kv, o_vk;
  run_recurrent<float>(cfg, p, in, S_kv, o_kv);
  run_recurrent<float>(vk, p, in, S_vk, o_vk);
  RC_ASSERT(bitwise_equal(o_kv, o_vk));
  RC_ASSERT(bitwise_equal(S_kv, convert_layout(cfg, S_vk, StateLayout::VK, StateLayout::KV)));
}

// GVA: perturbing the q/k of key head h changes exactly the value heads h*G .. h*G+G-1 (block mapping);
// all other value heads stay bit-identical. A modulo mapping (hv % H) fails this for every H > 1, G > 1.
RC_GTEST_PROP(Gva, KeyHeadReachesExactlyItsBlockOfValueHeads, ()) {
  ModelConfig cfg = *testgen::small_config();
  cfg.H = *testgen::in(2, 4);
  cfg.HV = cfg.H * *rc::gen::element(1, 2, 3, 4, 8);
  const int T = *testgen::in(1, 6);
  const int h = *testgen::in(0, cfg.H);
  const std::uint64_t s = *testgen::seed();
  const auto in = random_inputs(cfg, T, s);
  const auto p = random_params(cfg, s);
  auto in2 = in;
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < cfg.K; ++c) {
      const std::size_t i = (static_cast<std::size_t>(t) * cfg.H + h) * cfg.K + c;
      in2.k[i] = round_to(cfg.act_dtype, in2.k[i] + (c == 0 ? 1.5f : -0.75f));
      in2.q[i] = round_to(cfg.act_dtype, in2.q[i] - (c == 1 ? 1.25f : 0.5f));
    }
  auto S1 = random_state(cfg, s);
  auto S2 = S1;
  std::vector<float> o1, o2;
  run_recurrent<float>(cfg, p, in, S1, o1);
  run_recurrent<float>(cfg, p, in2, S2, o2);
  const std::size_t head = static_cast<std::size_t>(cfg.K) * cfg.V;
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const bool mine = hv / cfg.G() == h;
    const std::vector<float> a(S1.begin() + hv * head, S1.begin() + (hv + 1) * head);
    const std::vector<float> b(S2.begin() + hv * head, S2.begin() + (hv + 1) * head);
    RC_LOG() << "hv=" << hv << " h=" << h << " G=" << cfg.G();
    RC_ASSERT(bitwise_equal(a, b) == !mine);
  }
}

// Float (kernel-faithful) vs double (truth): F32 activations, F32 state, T up to 64. The float path makes
// one rounding per operation; errors stay at the level of K * eps_f32 relative to the output scale.
// Bound: relative RMS <= 2e-6 and every element within atol=2e-6 + rtol=2e-5 (docs/numerics.md).
RC_GTEST_PROP(Precision, FloatTracksDoubleWithinStatedBound, ()) {
  ModelConfig cfg = *testgen::small_config();
  cfg.act_dtype = DType::F32;
  cfg.round_beta_to_act = false;
  const int T = *testgen::in(1, 64);
  const std::uint64_t s = *testgen::seed();
  const auto in = random_inputs(cfg, T, s);
  const auto p = random_params(cfg, s);
  auto Sf = random_state(cfg, s);
  auto Sd = widen<double>(Sf);
  std::vector<float> of;
  std::vector<double> od;
  run_recurrent<float>(cfg, p, in, Sf, of);
  run_recurrent<double>(cfg, p, in, Sd, od);
  const auto ro = compare(od, widen<double>(of), Tolerance::allclose(2e-6, 2e-5));
  const auto rs = compare(Sd, widen<double>(Sf), Tolerance::allclose(2e-6, 2e-5));
  RC_LOG() << show(cfg) << " T=" << T << "\n o: " << ro.str() << "\n S: " << rs.str();
  RC_ASSERT(ro.ok);
  RC_ASSERT(rs.ok);
  RC_ASSERT(ro.rel_rms <= 2e-6);
  RC_ASSERT(rs.rel_rms <= 2e-6);
}

// Splitting a T-token call into two calls that restart from the saved state is bit-exact (float path), for
// an F32 pool and for a BF16 pool rounded after every token (failure class: a second call restarting from
// a differently rounded state).
RC_GTEST_PROP(Recurrent, SplitCallIsBitExact, ()) {
  ModelConfig cfg = *testgen::small_config();
  cfg.state_dtype = *rc::gen::arbitrary<bool>() ? DType::BF16 : DType::F32;
  const int T = *testgen::in(2, 24);
  const int cut = *testgen::in(1, T);
  const std::uint64_t s = *testgen::seed();
  const auto in = random_inputs(cfg, T, s);
  const auto p = random_params(cfg, s);
  RecurrentOptions opt;
  opt.round_state_each_token = cfg.state_dtype == DType::BF16;
  auto S1 = random_state(cfg, s);
  auto S2 = S1;
  std::vector<float> o1, o2a, o2b;
  run_recurrent<float>(cfg, p, in, S1, o1, nullptr, opt);
  run_recurrent<float>(cfg, p, in.slice(cfg, 0, cut), S2, o2a, nullptr, opt);
  run_recurrent<float>(cfg, p, in.slice(cfg, cut, T - cut), S2, o2b, nullptr, opt);
  o2a.insert(o2a.end(), o2b.begin(), o2b.end());
  RC_ASSERT(bitwise_equal(S1, S2));
  RC_ASSERT(bitwise_equal(o1, o2a));
}
