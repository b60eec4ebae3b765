// Rotary and text-only properties of MRoPE.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "mrope_gen.hpp"
#include "replayssm/dtype.hpp"

namespace {

using namespace mrope_prop;

// A rotary configuration: one of the presets, or a generated one (head_dim, partial factor, layout and a
// section that fits the layout).
rc::Gen<Rotary> genRotary() {
  return rc::gen::exec([] {
    if (*rc::gen::arbitrary<bool>()) return Rotary::from(get_preset(*genPresetName()));
    Rotary r;
    const int half = *rc::gen::inRange(1, 49);
    r.rotary_dim = 2 * half;
    r.head_dim = r.rotary_dim + 2 * *rc::gen::inRange(0, 40);
    r.theta = static_cast<double>(*rc::gen::elementOf(std::vector<int>{10000, 1000000, 5000000, 10000000}));
    r.layout = *rc::gen::arbitrary<bool>() ? Layout::Interleaved : Layout::Chunked;
    int s1, s2;
    if (r.layout == Layout::Chunked) {
      s1 = *rc::gen::inRange(0, half + 1);
      s2 = *rc::gen::inRange(0, half - s1 + 1);
    } else {
      // H frequencies are 1, 4, ...: at most (half + 1) / 3 of them; W frequencies 2, 5, ...: half / 3.
      s1 = *rc::gen::inRange(0, (half + 1) / 3 + 1);
      s2 = *rc::gen::inRange(0, half / 3 + 1);
    }
    r.section = {half - s1 - s2, s1, s2};
    return r;
  });
}

// The axis each frequency must read, written from the layout description independently of the library:
// chunked = s0 T's, then s1 H's, then s2 W's; interleaved = the cycle T, H, W, where H (W) falls back to T
// once s1 (s2) of them have been handed out.
std::vector<int> expected_axes(const Rotary& r) {
  std::vector<int> out;
  const int half = r.rotary_dim / 2;
  if (r.layout == Layout::Chunked) {
    for (int a = 0; a < 3; ++a) out.insert(out.end(), static_cast<std::size_t>(r.section[a]), a);
    return out;
  }
  int given[3] = {0, 0, 0};
  for (int j = 0; j < half; ++j) {
    int a = j % 3;
    if (a != kAxisT && given[a] >= r.section[a]) a = kAxisT;
    ++given[a];
    out.push_back(a);
  }
  return out;
}

// Vector entries as k / 64 with k in [-512, 512]: exact, bounded, shrinkable.
rc::Gen<std::vector<float>> genVector(std::size_t n) {
  return rc::gen::map(rc::gen::container<std::vector<int>>(n, rc::gen::inRange(-512, 513)), [](const std::vector<int>& k) {
    std::vector<float> v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) v[i] = static_cast<float>(k[i]) / 64.0f;
    return v;
  });
}

rc::Gen<Pos3> genPos(std::int64_t max) {
  return rc::gen::exec([max] {
    return Pos3{*rc::gen::inRange<std::int64_t>(0, max + 1), *rc::gen::inRange<std::int64_t>(0, max + 1),
                *rc::gen::inRange<std::int64_t>(0, max + 1)};
  });
}

RC_GTEST_PROP(MropeRotaryProperties, EveryFrequencyReadsItsAxis, ()) {
  const Rotary r = *genRotary();
  const std::vector<int> want = expected_axes(r);
  RC_ASSERT(frequency_axes(r) == want);
  // Observe the rotation itself: a unit vector in pair j, rotated at (t, h, w), must equal the rotation at
  // the position whose three axes all hold pos[want[j]].
  const Pos3 pos = *genPos(100000);
  const int half = r.rotary_dim / 2;
  for (int j = 0; j < half; ++j) {
    std::vector<float> e(static_cast<std::size_t>(r.head_dim), 0.0f);
    e[static_cast<std::size_t>(j)] = 1.0f;
    const std::int64_t p = pos[static_cast<std::size_t>(want[static_cast<std::size_t>(j)])];
    RC_ASSERT(rotate(r, {pos}, 1, e) == rotate(r, {Pos3{p, p, p}}, 1, e));
  }
}

RC_GTEST_PROP(MropeRotaryProperties, PreservesNormsAndLeavesTailBitIdentical, ()) {
  const Rotary r = *genRotary();
  const std::int64_t heads = *rc::gen::inRange<std::int64_t>(1, 4);
  const Pos3 pos = *genPos(1 << 20);
  const std::vector<float> x = *genVector(static_cast<std::size_t>(heads * r.head_dim));
  const std::vector<float> y = rotate(r, {pos}, heads, x);
  const int half = r.rotary_dim / 2;
  for (std::int64_t hd = 0; hd < heads; ++hd) {
    const std::size_t o = static_cast<std::size_t>(hd * r.head_dim);
    double in2 = 0.0, out2 = 0.0;
    for (int j = 0; j < half; ++j) {
      const double a = x[o + j], b = x[o + j + half], c = y[o + j], d = y[o + j + half];
      const double pin = std::sqrt(a * a + b * b), pout = std::sqrt(c * c + d * d);
      // Each output is the exact rotation rounded once to binary32: the pair norm moves by < 2^-23 of it.
      RC_ASSERT(std::fabs(pout - pin) <= std::ldexp(pin, -23) + 1e-30);
      in2 += a * a + b * b;
      out2 += c * c + d * d;
    }
    RC_ASSERT(std::fabs(std::sqrt(out2) - std::sqrt(in2)) <= std::ldexp(std::sqrt(in2), -22) + 1e-30);
    for (int d = r.rotary_dim; d < r.head_dim; ++d) {
      RC_ASSERT(replayssm::f32_bits(y[o + static_cast<std::size_t>(d)]) ==
                replayssm::f32_bits(x[o + static_cast<std::size_t>(d)]));
    }
  }
}

// A plain 1-D NeoX RoPE written out in the test: angle = p * theta^(-2j/R), pair (j, j + R/2).
std::vector<float> rope_1d(const Rotary& r, std::int64_t p, const std::vector<float>& x) {
  std::vector<float> y = x;
  const int half = r.rotary_dim / 2;
  for (int j = 0; j < half; ++j) {
    const double angle = static_cast<double>(p) / std::pow(r.theta, static_cast<double>(2 * j) / r.rotary_dim);
    const double a = x[static_cast<std::size_t>(j)], b = x[static_cast<std::size_t>(j + half)];
    y[static_cast<std::size_t>(j)] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
    y[static_cast<std::size_t>(j + half)] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
  }
  return y;
}

RC_GTEST_PROP(MropeRotaryProperties, TextOnlyPromptsReduceToOneDimensionalRope, ()) {
  const Preset preset = get_preset(*genPresetName());
  const Request req{*genTextOnly()};
  const PromptPlan plan(preset, req);
  RC_ASSERT(plan.delta() == 0);
  const std::int64_t extra = *rc::gen::inRange<std::int64_t>(0, 10);
  const std::vector<Pos3> pos = plan.positions(0, plan.prompt_len() + extra);
  for (std::size_t n = 0; n < pos.size(); ++n) {
    const auto i = static_cast<std::int64_t>(n);
    RC_ASSERT(pos[n] == (Pos3{i, i, i}));
  }
  // The rotation at (p, p, p) is ordinary RoPE at p, whatever the layout.
  const Rotary r = Rotary::from(preset);
  const std::int64_t n = *rc::gen::inRange<std::int64_t>(0, static_cast<std::int64_t>(pos.size()) + 1);
  const std::int64_t p = n < static_cast<std::int64_t>(pos.size()) ? pos[static_cast<std::size_t>(n)][0] : 0;
  const std::vector<float> x = *genVector(static_cast<std::size_t>(r.head_dim));
  const std::vector<float> got = rotate(r, {Pos3{p, p, p}}, 1, x);
  const std::vector<float> want = rope_1d(r, p, x);
  for (std::size_t d = 0; d < x.size(); ++d) RC_ASSERT(std::fabs(got[d] - want[d]) <= 1e-6f);
  // Text-only requests keep delta 0 through speculative decoding too.
  PositionTracker tr(preset, req.segments.empty() || plan.prompt_len() == 0 ? Request{{Segment::text(1)}} : req);
  tr.prefill(tr.seq_len());
  const Window w = tr.verify(4, 2);
  for (std::size_t i = 0; i < w.pos.size(); ++i) RC_ASSERT(w.pos[i] == text_position(w.slot(i), 0));
}

}  // namespace
