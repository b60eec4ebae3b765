// The short convolution (conv.hpp) and its fixtures (conv_fixture.hpp): hand-computed values, the float path
// within the derived bound of the truth, both commit designs bit-identical to a recomputation at n, rejected
// tokens without effect, fixtures that re-check clean, catch a tampered expectation at the tampered element
// and refuse bad inputs naming the field.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/conv.hpp"
#include "replayssm/fixtures/conv_fixture.hpp"
#include "replayssm/rng.hpp"

using namespace replayssm;

namespace {

ref::ConvConfig tiny(int W, bool bias, ref::ConvActivation act, DType a = DType::F32, DType s = DType::F32) {
  ref::ConvConfig c;  // C = 2*1*1 + 1*1 = 3 channels
  c.name = "hand";
  c.H = c.HV = c.K = c.V = 1;
  c.kernel_size = W;
  c.bias = bias;
  c.activation = act;
  c.act_dtype = a;
  c.state_dtype = s;
  return c;
}

// A seeded configuration of the kinds the fixtures use.
ref::ConvConfig drawn(std::uint64_t seed) {
  Rng r(seed);
  ref::ConvConfig c;
  c.H = static_cast<int>(r.uniform_int(1, 2));
  c.HV = c.H * static_cast<int>(r.uniform_int(1, 3));
  c.K = static_cast<int>(r.uniform_int(1, 8));
  c.V = static_cast<int>(r.uniform_int(1, 8));
  c.kernel_size = static_cast<int>(r.uniform_int(2, 8));
  c.bias = r.uniform_int(0, 1) == 1;
  c.activation = r.uniform_int(0, 3) == 0 ? ref::ConvActivation::None : ref::ConvActivation::Silu;
  c.act_dtype = r.uniform_int(0, 1) ? DType::BF16 : DType::F32;
  c.state_dtype = r.uniform_int(0, 1) ? DType::BF16 : DType::F32;
  return c;
}

std::string repro(std::uint64_t seed, const ref::ConvConfig& c) {
  return "seed " + std::to_string(seed) + " config " + ref::to_json(c).dump();
}

std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("replayssm-conv-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace

TEST(ConvReference, HandComputedWindowAndStates) {
  // W = 3: state [C, 2]; weights per channel w0 (oldest) .. w2 (current token); no activation.
  const auto c = tiny(3, true, ref::ConvActivation::None);
  ref::ConvParams p;
  p.weight = {1, 2, 3, /**/ 0.5f, 0, -1, /**/ 0, 0, 1};
  p.bias = {0.25f, 0, -1};
  const std::vector<float> state = {10, 20, /**/ 1, 2, /**/ 7, 8};  // [C, 2], column 0 the oldest
  const std::vector<float> x = {1, 2, 3, /**/ 4, 5, 6};            // [T = 2, C]
  for (auto prec : {ref::ConvPrecision::Truth, ref::ConvPrecision::KernelFaithful}) {
    const auto r = ref::conv_update(c, p, state, x, 2, prec, true);
    // token 1: channel 0 = 0.25 + 1*10 + 2*20 + 3*1; channel 1 = 0.5*1 + 0*2 - 1*2; channel 2 = -1 + 3
    // token 2: channel 0 = 0.25 + 1*20 + 2*1 + 3*4; channel 1 = 0.5*2 + 0*2 - 1*5; channel 2 = -1 + 6
    EXPECT_EQ(r.y, (std::vector<float>{53.25f, -1.5f, 2, 34.25f, -4, 5}));
    ASSERT_EQ(r.states.size(), 2u);
    EXPECT_EQ(r.states[0], (std::vector<float>{20, 1, 2, 2, 8, 3}));
    EXPECT_EQ(r.states[1], (std::vector<float>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(r.final_state, r.states[1]);
  }
  // A fresh prefill left-pads W-1 zeros; SiLU is z / (1 + exp(-z)).
  const auto s = tiny(3, false, ref::ConvActivation::Silu);
  ref::ConvParams q;
  q.weight = {1, 1, 1, 0, 0, 2, 0, 0, -1};
  const auto r = ref::conv_update(s, q, {}, {1, 2, 3}, 1, ref::ConvPrecision::Truth, false);
  auto silu = [](double z) { return static_cast<float>(z / (1 + std::exp(-z))); };
  EXPECT_EQ(r.y, (std::vector<float>{silu(1), silu(4), silu(-3)}));
  EXPECT_EQ(r.final_state, (std::vector<float>{0, 1, 0, 2, 0, 3}));
}

TEST(ConvReference, StateColumnsRoundToTheStateDtypeOnlyWhenStored) {
  // F32 inputs, BF16 state: the window's own outputs read x unrounded; the stored state holds bf16 values.
  const auto c = tiny(2, false, ref::ConvActivation::None, DType::F32, DType::BF16);
  ref::ConvParams p;
  p.weight = {1, 1, 1, 1, 1, 1};
  const float odd = 1.0f + 0x1p-12f;  // not a bf16 value
  const auto r = ref::conv_update(c, p, {0, 0, 0}, {odd, odd, odd, 0, 0, 0}, 2, ref::ConvPrecision::KernelFaithful, true);
  EXPECT_EQ(r.y[3], odd);                          // token 2 reads token 1's x as it is
  EXPECT_EQ(r.states[0][0], round_bf16(odd));      // stored once, rounded
  EXPECT_NE(r.states[0][0], odd);
}

TEST(ConvReference, FloatPathTracksTheTruthWithinTheDerivedBound) {
  double worst_fraction[2] = {0, 0};  // F32 outputs, BF16 outputs (where one ulp flip is the bound's purpose)
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const auto c = drawn(seed);
    const int T = static_cast<int>(Rng(seed + 7).uniform_int(1, 12));
    const auto p = ref::random_conv_params(c, seed);
    const auto s = ref::random_conv_state(c, seed + 1);
    const auto x = ref::random_conv_inputs(c, T, seed + 2);
    const auto truth = ref::conv_update(c, p, s, x, T, ref::ConvPrecision::Truth, true);
    const auto fast = ref::conv_update(c, p, s, x, T, ref::ConvPrecision::KernelFaithful, true);
    const auto b = ref::conv_output_bound(c, ref::conv_term_magnitude(c, p, s, x, T));
    const auto rep = compare(truth.y, fast.y, Tolerance::allclose(b.atol, b.rtol));
    ASSERT_TRUE(rep.ok) << rep.str() << " " << repro(seed, c);
    ASSERT_EQ(truth.states, fast.states) << repro(seed, c);  // no arithmetic in the state
    for (std::size_t i = 0; i < truth.y.size(); ++i)
      worst_fraction[c.act_dtype == DType::BF16] =
          std::max(worst_fraction[c.act_dtype == DType::BF16],
                   std::fabs(double(truth.y[i]) - fast.y[i]) / (b.atol + b.rtol * std::fabs(double(truth.y[i]))));
  }
  std::cout << "worst |float - truth| as a fraction of the bound: F32 outputs " << worst_fraction[0]
            << ", BF16 outputs " << worst_fraction[1] << "\n";
}

TEST(ConvReference, BothCommitDesignsEqualARecomputationAtEveryAcceptedLength) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto c = drawn(seed);
    const int T = static_cast<int>(Rng(seed + 3).uniform_int(1, 10));
    const auto p = ref::random_conv_params(c, seed);
    const auto s = ref::random_conv_state(c, seed + 1);
    const auto x = ref::random_conv_inputs(c, T, seed + 2);
    const auto win = ref::conv_update(c, p, s, x, T, ref::ConvPrecision::KernelFaithful, true);
    for (int n = 0; n <= T; ++n) {
      const auto full = ref::conv_commit_full_state(s, win.states, n);
      const auto replay = ref::conv_commit_replay(c, s, x, T, n);
      ASSERT_EQ(full, replay) << "n " << n << " " << repro(seed, c);
      // The same as a call that only ever saw the accepted prefix.
      const std::vector<float> prefix(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n * c.channels()));
      const auto direct = n == 0 ? s : ref::conv_update(c, p, s, prefix, n, ref::ConvPrecision::KernelFaithful, false).final_state;
      ASSERT_EQ(replay, direct) << "n " << n << " " << repro(seed, c);
      // Rejected tokens have no effect: perturb every token after n.
      auto other = x;
      for (std::size_t i = static_cast<std::size_t>(n * c.channels()); i < other.size(); ++i)
        other[i] = round_to(c.act_dtype, other[i] + 1.5f);
      ASSERT_EQ(ref::conv_commit_replay(c, s, other, T, n), replay) << "n " << n << " " << repro(seed, c);
      // Continuing from the committed state gives the outputs of one call over the accepted prefix and the next
      // window when the state holds x exactly (F32 state, or BF16 inputs).
      if (n > 0 && (c.state_dtype == DType::F32 || c.act_dtype == DType::BF16)) {
        const auto next = ref::random_conv_inputs(c, 2, seed + 9);
        auto joined = prefix;
        joined.insert(joined.end(), next.begin(), next.end());
        const auto one = ref::conv_update(c, p, s, joined, n + 2, ref::ConvPrecision::KernelFaithful, false);
        const auto two = ref::conv_update(c, p, replay, next, 2, ref::ConvPrecision::KernelFaithful, false);
        ASSERT_EQ(std::vector<float>(one.y.end() - static_cast<std::ptrdiff_t>(2 * c.channels()), one.y.end()), two.y)
            << "n " << n << " " << repro(seed, c);
      }
    }
    // Commits that roll back to the wrong length are told apart (a window with n < T differs from n = T).
    if (T >= 2) {
      bool differs = false;
      for (int n = 0; n < T; ++n) differs = differs || ref::conv_commit_replay(c, s, x, T, n) != win.final_state;
      EXPECT_TRUE(differs) << repro(seed, c);
    }
  }
}

TEST(ConvReference, VllmSlidingBufferHoldsTheSameStateAsBothCommitDesigns) {
  // vLLM's layout: a W-2+T column buffer and a read offset n - 1. Over a run of windows with accepted counts
  // in [1, T], the state it exposes equals the ReplaySSM commit bit for bit; the buffer starts with the state
  // in its first W-1 columns and NaN elsewhere, so reading an unwritten column would show.
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    const auto c = drawn(seed);
    Rng r(seed + 5);
    const int T = static_cast<int>(r.uniform_int(1, 6)), M = c.state_cols(), L = M - 1 + T;
    auto S = ref::random_conv_state(c, seed + 1);
    std::vector<float> B(static_cast<std::size_t>(c.channels() * L), std::nanf(""));
    for (std::int64_t ch = 0; ch < c.channels(); ++ch)
      for (int i = 0; i < M; ++i) B[static_cast<std::size_t>(ch * L + i)] = S[static_cast<std::size_t>(ch * M + i)];
    int off = 0;
    for (int step = 0; step < 8; ++step) {
      const auto x = ref::random_conv_inputs(c, T, seed * 100 + static_cast<std::uint64_t>(step));
      const int n = static_cast<int>(r.uniform_int(1, T));
      B = ref::conv_sliding_verify(c, B, L, off, x, T);
      off = ref::conv_sliding_offset(n, T);
      S = ref::conv_commit_replay(c, S, x, T, n);
      ASSERT_EQ(ref::conv_sliding_state(c, B, L, off), S) << "step " << step << " n " << n << " " << repro(seed, c);
    }
  }
  EXPECT_THROW(ref::conv_sliding_offset(0, 4), Error);  // n = 0 has no offset in this layout
}

TEST(ConvReference, BadArgumentsNameTheField) {
  const auto c = tiny(4, false, ref::ConvActivation::Silu);
  ref::ConvParams p;
  p.weight.assign(12, 0.5f);
  const std::vector<float> s(9, 0.0f), x(6, 1.0f);
  auto field_of = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(field_of([&] { ref::conv_commit_replay(c, s, x, 2, 3); }), "accepted");
  EXPECT_EQ(field_of([&] { ref::conv_commit_replay(c, s, x, 2, -1); }), "accepted");
  EXPECT_EQ(field_of([&] { ref::conv_update(c, p, std::vector<float>(8), x, 2, ref::ConvPrecision::Truth, false); }), "state");
  EXPECT_EQ(field_of([&] { ref::conv_update(c, p, s, x, 3, ref::ConvPrecision::Truth, false); }), "x");
  auto nb = p;
  nb.bias.assign(3, 0.0f);
  EXPECT_EQ(field_of([&] { ref::conv_update(c, nb, s, x, 2, ref::ConvPrecision::Truth, false); }), "param.bias");
  auto w9 = c;
  w9.kernel_size = 9;
  EXPECT_EQ(field_of([&] { w9.validate(); }), "conv.kernel_size");
  auto j = ref::to_json(c);
  j["channels"] = 4;
  EXPECT_EQ(field_of([&] { ref::conv_config_from_json(j); }), "config.conv.channels");
  j = ref::to_json(c);
  j.erase("bias");
  EXPECT_EQ(field_of([&] { ref::conv_config_from_json(j); }), "config.conv.bias");
}

TEST(ConvFixture, CasesCoverWhatTheyClaimAndReproduceExactly) {
  for (const char* name : {"tiny-gdn", "tiny-kda"}) {
    const auto cfg = preset(name);
    const auto cases = ref::conv_cases(cfg, 11);
    ASSERT_EQ(cases.size(), 9u);
    bool fresh = false, n0 = false, partial = false, full = false, old_columns = false, k2 = false, noact = false,
         bias = false, bf16_state_f32_act = false;
    for (const auto& g : cases) {
      const auto c = ref::conv_config_from_json(g.config.at("conv"));
      EXPECT_EQ(c.channels(), 2LL * cfg.H * cfg.K + static_cast<long long>(cfg.HV) * cfg.V);
      const auto T = g.tensors.at("in.x").shape[0];
      if (g.op == ref::kConvPrefillOp) {
        const auto st = g.tensors.at("in.state").to_f32();
        fresh |= std::all_of(st.begin(), st.end(), [](float v) { return v == 0.0f; });
      }
      if (g.op == ref::kConvCommitOp) {
        const auto n = g.tensors.at("in.accepted").to_i64()[0];
        n0 |= n == 0;
        partial |= n > 0 && n < T;
        full |= n == T;
        old_columns |= n > 0 && n < c.state_cols();
      }
      k2 |= c.kernel_size == 2;
      noact |= c.activation == ref::ConvActivation::None;
      bias |= c.bias;
      bf16_state_f32_act |= c.state_dtype == DType::BF16 && c.act_dtype == DType::F32;
      const auto got = ref::run_conv_op(g.op, g.config, g.tensors);
      ASSERT_EQ(got.size(), g.tolerance.size()) << g.name;
      for (const auto& [tn, tol] : g.tolerance) {
        EXPECT_TRUE(compare(g.tensors.at(tn).to_f64(), got.at(tn).to_f64(), Tolerance::exact()).ok) << g.name << tn;
        EXPECT_EQ(tol.kind, tn == "out.y" ? Tolerance::Kind::AllClose : Tolerance::Kind::Exact) << g.name << tn;
      }
    }
    EXPECT_TRUE(fresh && n0 && partial && full && old_columns && k2 && noact && bias && bf16_state_f32_act) << name;
  }
  EXPECT_EQ(ref::conv_cases(preset("qwen3.5"), 11).size(), 2u);  // real dimensions: C = 8192
}

TEST(ConvFixture, WrittenSetChecksCleanAndATamperedExpectationFailsAtThatElement) {
  const auto dir = temp_dir("tamper");
  const auto paths = ref::write_conv_set(preset("tiny-gdn"), 11, dir.string());
  ASSERT_EQ(paths.size(), 9u);
  for (const auto& path : paths) {
    const auto r = ref::check_fixture_file(path);
    std::string why = r.error;
    for (const auto& t : r.tensors) why += "\n" + t.name + ": " + t.report.str();
    ASSERT_TRUE(r.ok) << path << ": " << why;
    Fixture f = load_fixture(path);
    // One element moved by 0.5: beyond every bound these fixtures carry (out.y: rtol 2^-7 of values below 30).
    const std::string name = f.tensors.count("out.y") ? "out.y" : f.tensors.count("out.state") ? "out.state" : "out.states";
    auto v = f.tensors.at(name).to_f32();
    const std::size_t at = v.size() / 2 + 1;
    v[at] = round_to(f.tensors.at(name).dtype, v[at] + 0.5f);
    f.tensors[name] = Tensor::from_f32(f.tensors.at(name).dtype, f.tensors.at(name).shape, v);
    save_fixture(path, f);
    const auto bad = ref::check_fixture_file(path);
    EXPECT_FALSE(bad.ok) << path;
    bool seen = false;
    for (const auto& t : bad.tensors)
      if (t.name == name) {
        seen = true;
        EXPECT_FALSE(t.report.ok);
        EXPECT_EQ(t.report.worst_index, at) << path << " " << t.report.str();
      }
    EXPECT_TRUE(seen) << path;
  }
  std::filesystem::remove_all(dir);
}

TEST(ConvFixture, BadInputsAreRefusedNamingTheField) {
  const auto cases = ref::conv_cases(preset("tiny-gdn"), 11);
  auto by_tag = [&](const std::string& tag) {
    for (const auto& g : cases)
      if (g.config.at("args").at("case") == tag) return g;
    throw std::runtime_error(tag);
  };
  auto field_of = [](const ref::GoldenCase& g) {
    try {
      ref::run_conv_op(g.op, g.config, g.tensors);
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  auto commit = by_tag("commit_T4_n2");
  commit.tensors["in.accepted"] = Tensor::from_i32({}, {5});
  EXPECT_EQ(field_of(commit), "in.accepted");
  commit.tensors.erase("in.accepted");
  EXPECT_EQ(field_of(commit), "in.accepted");
  auto upd = by_tag("update_T4");
  upd.tensors["param.bias"] = Tensor::zeros(DType::BF16, {64});
  EXPECT_EQ(field_of(upd), "param.bias");
  upd = by_tag("update_T4");
  upd.tensors["in.state"] = Tensor::zeros(DType::F32, {64, 3});  // the config says BF16
  EXPECT_EQ(field_of(upd), "in.state");
  upd = by_tag("update_T4");
  upd.tensors["in.x"] = Tensor::zeros(DType::BF16, {4, 63});
  EXPECT_EQ(field_of(upd), "in.x");
  upd = by_tag("update_T4");
  upd.config["conv"]["kernel_size"] = 1;
  EXPECT_EQ(field_of(upd), "config.conv.kernel_size");
  upd = by_tag("update_T4");
  upd.tensors.erase("param.weight");
  EXPECT_EQ(field_of(upd), "param.weight");
  upd = by_tag("update_T4");
  EXPECT_EQ([&] {
    try {
      ref::run_conv_op("conv.rollback", upd.config, upd.tensors);
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<no error>");
  }(), "op");
}

TEST(ConvFixture, CommittedFixturesAreTheGeneratorsBytes) {
  // fixtures/conv/<preset>/ holds what `replayssm fixtures generate --conv` writes with the default seed.
  const auto dir = temp_dir("regen");
  for (const char* name : {"tiny-gdn", "tiny-kda"}) {
    const auto paths = ref::write_conv_set(preset(name), 20261129, (dir / name).string());
    for (const auto& p : paths) {
      const auto committed = std::filesystem::path(REPLAYSSM_SOURCE_DIR) / "fixtures" / "conv" / name /
                             std::filesystem::path(p).filename();
      ASSERT_TRUE(std::filesystem::exists(committed)) << committed;
      const auto a = load_fixture(p), b = load_fixture(committed.string());
      EXPECT_EQ(a.config, b.config) << committed;
      for (const auto& [tn, t] : a.tensors) EXPECT_EQ(t.data, b.tensors.at(tn).data) << committed << " " << tn;
    }
  }
  std::filesystem::remove_all(dir);
}
