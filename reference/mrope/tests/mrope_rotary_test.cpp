// Rotary application: frequency-to-axis maps, hand-computed rotations, the binary32 engine path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "mrope_test_util.hpp"
#include "replayssm/compare.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/rng.hpp"

using namespace replayssm::mrope;

namespace {

std::vector<int> indices_with(const std::vector<int>& axes, int axis) {
  std::vector<int> out;
  for (std::size_t j = 0; j < axes.size(); ++j) {
    if (axes[j] == axis) out.push_back(static_cast<int>(j));
  }
  return out;
}

std::vector<int> range_step(int from, int to_inclusive, int step) {
  std::vector<int> out;
  for (int j = from; j <= to_inclusive; j += step) out.push_back(j);
  return out;
}

TEST(MropeRotary, Qwen35InterleavedAxes) {
  const auto axes = frequency_axes(Rotary::from(get_preset("qwen3.5")));
  ASSERT_EQ(axes.size(), 32u);
  EXPECT_EQ(indices_with(axes, kAxisT), range_step(0, 30, 3));  // 11
  EXPECT_EQ(indices_with(axes, kAxisH), range_step(1, 31, 3));  // 11
  EXPECT_EQ(indices_with(axes, kAxisW), range_step(2, 29, 3));  // 10
}

TEST(MropeRotary, Qwen3VlInterleavedAxes) {
  const auto axes = frequency_axes(Rotary::from(get_preset("qwen3-vl")));
  ASSERT_EQ(axes.size(), 64u);
  std::vector<int> t = range_step(0, 57, 3);
  for (int j = 60; j < 64; ++j) t.push_back(j);
  EXPECT_EQ(indices_with(axes, kAxisT), t);  // 20 + 4 = 24
  EXPECT_EQ(indices_with(axes, kAxisH), range_step(1, 58, 3));
  EXPECT_EQ(indices_with(axes, kAxisW), range_step(2, 59, 3));
}

TEST(MropeRotary, ChunkedAxes) {
  for (const char* name : {"qwen2-vl", "qwen2.5-vl"}) {
    const auto axes = frequency_axes(Rotary::from(get_preset(name)));
    ASSERT_EQ(axes.size(), 64u);
    EXPECT_EQ(indices_with(axes, kAxisT), range_step(0, 15, 1)) << name;
    EXPECT_EQ(indices_with(axes, kAxisH), range_step(16, 39, 1)) << name;
    EXPECT_EQ(indices_with(axes, kAxisW), range_step(40, 63, 1)) << name;
  }
  EXPECT_ERROR_FIELD(frequency_axis(Rotary::from(get_preset("qwen2-vl")), 64), "j");
}

TEST(MropeRotary, InverseFrequencies) {
  const Rotary r = Rotary::from(get_preset("qwen3.5"));  // R = 64, theta 1e7
  EXPECT_EQ(inv_freq(r, 0), 1.0);
  EXPECT_NEAR(inv_freq(r, 16), 1.0 / std::sqrt(1e7), 1e-15);  // theta^(-32/64)
  EXPECT_NEAR(inv_freq(r, 31), std::pow(1e7, -62.0 / 64.0), 1e-18);
}

// A unit vector in pair j rotates to (cos a, sin a) with a = pos[axis(j)] * inv_freq_j; the partner slot is
// j + R/2 (NeoX split-half pairing).
TEST(MropeRotary, HandComputedPairsChunked) {
  const Rotary r = Rotary::from(get_preset("qwen2-vl"));  // R = head_dim = 128, half 64
  const Pos3 pos{2, 5, 7};
  for (int j : {0, 15, 16, 39, 40, 63}) {
    std::vector<float> x(128, 0.0f);
    x[static_cast<std::size_t>(j)] = 1.0f;
    const auto y = rotate(r, {pos}, 1, x);
    const double p = j < 16 ? 2.0 : (j < 40 ? 5.0 : 7.0);
    const double a = p * std::pow(1e6, -2.0 * j / 128.0);
    EXPECT_EQ(y[static_cast<std::size_t>(j)], static_cast<float>(std::cos(a))) << j;
    EXPECT_EQ(y[static_cast<std::size_t>(j + 64)], static_cast<float>(std::sin(a))) << j;
    // The second half of the pair: (0, 1) -> (-sin a, cos a).
    std::vector<float> z(128, 0.0f);
    z[static_cast<std::size_t>(j + 64)] = 1.0f;
    const auto w = rotate(r, {pos}, 1, z);
    EXPECT_EQ(w[static_cast<std::size_t>(j)], static_cast<float>(-std::sin(a))) << j;
    EXPECT_EQ(w[static_cast<std::size_t>(j + 64)], static_cast<float>(std::cos(a))) << j;
  }
}

TEST(MropeRotary, PartialRotaryLeavesTailUntouched) {
  const Rotary r = Rotary::from(get_preset("qwen3.5"));  // head_dim 256, R 64
  std::vector<float> x(2 * 256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
  x[100] = -0.0f;  // a negative zero must survive the copy
  const auto y = rotate(r, {Pos3{3, 4, 5}}, 2, x);
  for (int hd = 0; hd < 2; ++hd) {
    for (int d = 64; d < 256; ++d) {
      const std::size_t i = static_cast<std::size_t>(hd * 256 + d);
      EXPECT_EQ(replayssm::f32_bits(y[i]), replayssm::f32_bits(x[i])) << i;
    }
  }
  // Pair 1 is an H frequency: x[1], x[33] rotate by 4 * inv_freq_1.
  const double a = 4.0 * std::pow(1e7, -2.0 / 64.0);
  EXPECT_EQ(y[1], static_cast<float>(double(x[1]) * std::cos(a) - double(x[33]) * std::sin(a)));
  EXPECT_EQ(y[33], static_cast<float>(double(x[33]) * std::cos(a) + double(x[1]) * std::sin(a)));
}

TEST(MropeRotary, RotateChecksShapes) {
  const Rotary r = Rotary::from(get_preset("qwen3.5"));
  EXPECT_ERROR_FIELD(rotate(r, {Pos3{0, 0, 0}}, 1, std::vector<float>(255)), "x");
  EXPECT_ERROR_FIELD(rotate(r, {Pos3{0, 0, 0}}, 0, std::vector<float>()), "heads");
}

// The binary32 engine path stays inside the fixture tolerance; prints the measured worst error so the
// margin of rotary_tolerance() can be re-checked.
TEST(MropeRotary, Binary32EnginePathWithinTolerance) {
  for (const auto& name : preset_names()) {
    double worst_ratio = 0.0, worst_abs = 0.0;
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      const MropeFixture fx = mrope_fixture(name, seed);
      const Rotary rot = Rotary::from(get_preset(name));
      const auto pos_rows = fx.tensors.at("out.positions").to_i64();
      const std::size_t N = pos_rows.size() / 3;
      std::vector<Pos3> pos(N);
      for (std::size_t n = 0; n < N; ++n) pos[n] = {pos_rows[n], pos_rows[N + n], pos_rows[2 * N + n]};
      for (const char* which : {"q", "k"}) {
        const auto x = fx.tensors.at(std::string("in.") + which).to_f32();
        const auto ref = fx.tensors.at(std::string("out.") + which + "_rot").to_f32();
        const std::int64_t heads = fx.tensors.at(std::string("in.") + which).shape[1];
        const auto got = rotate_f32_engine(rot, pos, heads, x);
        const auto tol = fx.tolerance.at(std::string("out.") + which + "_rot");
        const auto rep = replayssm::compare(ref, got, tol);
        EXPECT_TRUE(rep.ok) << name << " seed " << seed << " " << which << ": " << rep.str();
        worst_ratio = std::max(worst_ratio, rep.worst_excess);
        worst_abs = std::max(worst_abs, rep.max_abs);
      }
    }
    std::printf("[measure] %s: binary32 engine path max |err| %.3g, worst err/atol %.3f\n", name.c_str(),
                worst_abs, worst_ratio);
  }
}

// The same bound at long-context positions (up to 2^18 + 2^16, past Qwen3.5's 262144 context).
TEST(MropeRotary, Binary32EnginePathWithinToleranceAtLargePositions) {
  for (const auto& name : preset_names()) {
    const Rotary rot = Rotary::from(get_preset(name));
    replayssm::Rng rng(0x5eed + rot.head_dim);
    double worst_ratio = 0.0;
    for (std::int64_t scale : {std::int64_t{1} << 10, std::int64_t{1} << 14, (std::int64_t{1} << 18) + (1 << 16)}) {
      std::vector<Pos3> pos;
      for (int n = 0; n < 64; ++n) {
        pos.push_back({rng.uniform_int(0, scale), rng.uniform_int(0, scale), rng.uniform_int(0, scale)});
      }
      std::vector<float> x(pos.size() * static_cast<std::size_t>(rot.head_dim));
      for (float& v : x) v = rng.normalish();
      double max_in = 0.0;
      for (float v : x) max_in = std::max(max_in, static_cast<double>(std::fabs(v)));
      const auto rep = replayssm::compare(rotate(rot, pos, 1, x), rotate_f32_engine(rot, pos, 1, x),
                                          rotary_tolerance(scale, max_in));
      EXPECT_TRUE(rep.ok) << name << " positions up to " << scale << ": " << rep.str();
      worst_ratio = std::max(worst_ratio, rep.worst_excess);
    }
    std::printf("[measure] %s: large positions, worst err/atol %.3f\n", name.c_str(), worst_ratio);
  }
}

}  // namespace
