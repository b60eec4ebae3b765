// check_fixture: what a fixture's expectations must satisfy before they are used, and inputs that made the
// checker allocate without bound (found while fuzzing, docs/fuzzing.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/mrope/mrope.hpp"
#include "replayssm/mrope/mrope_fixture.hpp"
#include "replayssm/fixtures/golden.hpp"

using namespace replayssm;

namespace {

Fixture base(const std::string& op, const nlohmann::json& model, const nlohmann::json& args = nlohmann::json::object()) {
  Fixture f;
  f.op = op;
  f.config = nlohmann::json{{"model", model}, {"args", args}};
  f.seed = 1;
  return f;
}

// An "mrope.rotary" fixture for Qwen2.5-VL whose video sits at time position ~70000 (scaled-time rule:
// frame 1 at 1 * 35000 s/grid * 2 tokens/s), with inputs of magnitude `amp`; expectations and tolerances
// are the reference's own (rotary_tolerance of its largest position and input).
Fixture long_context_rotary(double amp) {
  const mrope::Preset preset = mrope::get_preset("qwen2.5-vl");
  const mrope::Request req{{mrope::Segment::text(2), mrope::Segment::video(2, 2, 2, 35000.0), mrope::Segment::text(2)}};
  const std::int64_t generated = 1;
  const std::int64_t N = mrope::PromptPlan(preset, req).prompt_len() + generated;
  const mrope::Rotary rot = mrope::Rotary::from(preset);
  Fixture f;
  f.op = "mrope.rotary";
  f.config = nlohmann::json{{"model", "qwen2.5-vl"}, {"request", nlohmann::json::object()}};
  f.seed = 1;
  f.tensors["in.segments"] = Tensor::from_i64({3, 4}, {0, 2, 0, 0, 2, 2, 2, 2, 0, 2, 0, 0});
  f.tensors["in.second_per_grid"] = Tensor::from_f64(DType::F64, {3}, {-1.0, 35000.0, -1.0});
  f.tensors["in.frame_text"] = Tensor::from_i64({0}, {});
  f.tensors["in.generated"] = Tensor::from_i64({}, {generated});
  f.tensors["in.head_dim"] = Tensor::from_i64({}, {rot.head_dim});
  f.tensors["in.rotary_dim"] = Tensor::from_i64({}, {rot.rotary_dim});
  f.tensors["in.spatial_merge_size"] = Tensor::from_i64({}, {preset.spatial_merge_size});
  f.tensors["in.interleaved"] = Tensor::from_i64({}, {rot.layout == mrope::Layout::Interleaved ? 1 : 0});
  f.tensors["in.mrope_section"] = Tensor::from_i64({3}, {rot.section[0], rot.section[1], rot.section[2]});
  f.tensors["in.rope_theta"] = Tensor::from_f64(DType::F64, {}, {rot.theta});
  f.tensors["in.tokens_per_second"] = Tensor::from_f64(DType::F64, {}, {preset.tokens_per_second});
  auto values = [&](std::int64_t heads, int salt) {
    std::vector<float> v(static_cast<std::size_t>(N * heads * rot.head_dim));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(amp * std::sin(0.37 * static_cast<double>(i) + salt));
    return v;
  };
  f.tensors["in.q"] = Tensor::from_f32(DType::F32, {N, 2, rot.head_dim}, values(2, 0));
  f.tensors["in.k"] = Tensor::from_f32(DType::F32, {N, 1, rot.head_dim}, values(1, 1));
  std::int64_t max_pos = 0;
  for (auto& [name, t] : mrope::fixture_outputs(f)) {
    if (name == "out.positions")
      for (std::int64_t p : t.to_i64()) max_pos = std::max(max_pos, std::abs(p));
    f.tensors[name] = std::move(t);
  }
  double max_in = 0.0;
  for (const char* n : {"in.q", "in.k"})
    for (float x : f.tensors.at(n).to_f32()) max_in = std::max(max_in, static_cast<double>(std::fabs(x)));
  for (const char* n : {"out.positions", "out.delta", "out.prompt_len"}) f.tolerance[n] = Tolerance::exact();
  f.tolerance["out.q_rot"] = mrope::rotary_tolerance(max_pos, max_in);
  f.tolerance["out.k_rot"] = mrope::rotary_tolerance(max_pos, max_in);
  return f;
}

std::string failures(const ref::FixtureCheck& r) {
  std::string s = r.error;
  for (const auto& t : r.tensors)
    if (!t.report.ok) s += " [" + t.name + ": " + t.report.message + "]";
  return s;
}

}  // namespace

TEST(FixtureCheck, CorrectLongContextRotaryFixtureIsAccepted) {
  // Positions near 70k with |x| = 5: the fixture's own bound exceeds 0.1 in absolute terms, which the old
  // fixed cap refused as "too loose" although the fixture is correct.
  const Fixture f = long_context_rotary(5.0);
  std::int64_t max_pos = 0;
  for (std::int64_t p : f.tensors.at("out.positions").to_i64()) max_pos = std::max(max_pos, p);
  ASSERT_GT(max_pos, 69000);
  ASSERT_GT(f.tolerance.at("out.q_rot").atol, 0.1);
  const auto r = ref::check_fixture(f);
  EXPECT_TRUE(r.ok) << failures(r);
}

TEST(FixtureCheck, AbsurdTolerancesAreStillRefused) {
  Fixture f = long_context_rotary(5.0);
  f.tolerance["out.q_rot"] = Tolerance::allclose(2.0, 0.0);  // 40% of the data's magnitude
  auto r = ref::check_fixture(f);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(failures(r).find("too loose"), std::string::npos) << failures(r);
  // On data of magnitude <= 1 the cap stays 0.1.
  f = long_context_rotary(0.5);
  f.tolerance["out.k_rot"] = Tolerance::allclose(0.11, 0.0);
  r = ref::check_fixture(f);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(failures(r).find("too loose"), std::string::npos) << failures(r);
  // A budget tolerance was never checked: budget(rel_rms=0.9, atol=1e9) let anything pass.
  f = long_context_rotary(0.5);
  f.tolerance["out.k_rot"] = Tolerance::budget(0.9, 1e9);
  r = ref::check_fixture(f);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(failures(r).find("too loose"), std::string::npos) << failures(r);
}

TEST(FixtureCheck, ToleranceLimitsScaleWithMagnitude) {
  EXPECT_EQ(ref::tolerance_too_loose(Tolerance::allclose(0.1, 0.1), 0.5), "");
  EXPECT_NE(ref::tolerance_too_loose(Tolerance::allclose(0.1001, 0.0), 0.5), "");
  EXPECT_EQ(ref::tolerance_too_loose(Tolerance::allclose(0.4, 0.0), 4.0), "");
  EXPECT_NE(ref::tolerance_too_loose(Tolerance::allclose(0.41, 0.0), 4.0), "");
  EXPECT_NE(ref::tolerance_too_loose(Tolerance::allclose(0.0, 0.11), 100.0), "");
  EXPECT_NE(ref::tolerance_too_loose(Tolerance::allclose(NAN, 0.0), 1.0), "");
  EXPECT_NE(ref::tolerance_too_loose(Tolerance::rel_rms(0.06), 1.0), "");
  EXPECT_EQ(ref::tolerance_too_loose(Tolerance::budget(0.05, 0.1), 1.0), "");
}

TEST(FixtureCheck, MtpBatchOutputSizeIsCappedBeforeAllocation) {
  // PAD-only batch over an empty pool with a declared window of 2^20 tokens: the checker allocated
  // B * T * HV * V doubles (2^42) before looking at the inputs (AddressSanitizer: allocation-size-too-big).
  const int HV = 4096;
  Fixture f = base("mtp_batch", {{"op", "gdn"}, {"H", 1}, {"HV", HV}, {"K", 1}, {"V", 1024}, {"act_dtype", "F32"},
                                 {"state_dtype", "F32"}, {"layout", "vk"}});
  f.tensors["in.slot"] = Tensor::from_i32({1}, {-1});
  f.tensors["in.accepted"] = Tensor::from_i32({1}, {0});
  f.tensors["in.pool"] = Tensor::zeros(DType::F32, {0, HV, 1024, 1});
  f.tensors["param.A_log"] = Tensor::zeros(DType::F32, {HV});
  f.tensors["param.dt_bias"] = Tensor::zeros(DType::F32, {HV});
  for (const char* n : {"in.q", "in.k"}) f.tensors[n] = Tensor::zeros(DType::F32, {1, 1 << 20, 1, 1});
  f.tensors["in.v"] = Tensor::zeros(DType::F32, {1, 1 << 20, HV, 0});
  const auto r = ref::check_fixture(f);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind(ref::kInternalErrorPrefix, 0), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("in.v"), std::string::npos) << r.error;  // the inputs are checked first
}

TEST(FixtureCheck, ChunkArgumentIsNotWrapped) {
  // config.args.chunk = 2^32 + 16 was read through static_cast<int> as 16 and the fixture passed.
  for (const auto& c : ref::golden_cases(preset("tiny-gdn"), 3)) {
    if (c.op != "chunked") continue;
    EXPECT_NO_THROW(ref::run_golden_op(c.op, c.config, c.tensors));
    for (const std::int64_t chunk : {(1ll << 32) + 16, 0ll, -16ll}) {
      nlohmann::json cfg = c.config;
      cfg["args"]["chunk"] = chunk;
      try {
        ref::run_golden_op(c.op, cfg, c.tensors);
        ADD_FAILURE() << "chunk " << chunk << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.field(), "config.args.chunk") << e.what();
      }
    }
    nlohmann::json cfg = c.config;
    cfg["args"]["chunk"] = 16.5;
    EXPECT_THROW(ref::run_golden_op(c.op, cfg, c.tensors), Error);
    break;
  }
}

// Found with the fixture harness (docs/fuzzing.md): an "mrope.rotary" fixture's integer inputs were narrowed
// with static_cast<int> (2^32 + 128 read as 128) and added without overflow checks (UBSan: signed integer
// overflow in the section sum and in prompt_len + generated).
TEST(FixtureCheck, RotaryFixtureIntegersAreRangeChecked) {
  struct Case {
    const char* tensor;
    Tensor value;
  };
  const std::vector<Case> cases = {
      {"in.mrope_section", Tensor::from_i64({3}, {2147483647, 2147483647, 2})},
      {"in.mrope_section", Tensor::from_i64({3}, {-8, 40, 0})},
      {"in.generated", Tensor::from_i64({}, {9223372036854775803ll})},
      {"in.generated", Tensor::from_i64({}, {-1})},
      {"in.head_dim", Tensor::from_i64({}, {(1ll << 32) + 128})},
      {"in.rotary_dim", Tensor::from_i64({}, {(1ll << 32) + 128})},
      {"in.spatial_merge_size", Tensor::from_i64({}, {(1ll << 32) + 2})},
      {"in.spatial_merge_size", Tensor::from_i64({}, {0})},
      {"in.interleaved", Tensor::from_i64({}, {2})},
  };
  const Fixture good = long_context_rotary(1.0);
  ASSERT_TRUE(ref::check_fixture(good).ok);
  for (const auto& c : cases) {
    Fixture f = good;
    f.tensors[c.tensor] = c.value;
    try {
      (void)mrope::fixture_outputs(f);
      ADD_FAILURE() << c.tensor << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), c.tensor) << e.what();
    }
  }
  Fixture f = good;  // zero heads: N tokens of nothing
  f.tensors["in.q"] = Tensor::zeros(DType::F32, {f.tensors.at("in.q").shape[0], 0, f.tensors.at("in.q").shape[2]});
  EXPECT_THROW((void)mrope::fixture_outputs(f), Error);
}
