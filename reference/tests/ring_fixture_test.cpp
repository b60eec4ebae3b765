// Ring-step fixtures: they cover the cursor cases they claim, re-check clean, catch a tampered expectation and
// refuse cursors the ring could not have.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "replayssm/error.hpp"
#include "replayssm/fixtures/ring_fixture.hpp"
#include "replayssm/step.hpp"

using namespace replayssm;

namespace {
std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("replayssm-ring-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}
}  // namespace

TEST(RingFixture, CasesCoverAppendFlushWrapAndFlushWithNothingAccepted) {
  for (const char* p : {"tiny-gdn", "tiny-kda"}) {
    const auto cases = ref::ring_step_cases(preset(p), 4);
    ASSERT_EQ(cases.size(), 3u);
    bool append = false, wrap = false, flush_n0 = false, bf16 = false;
    for (const auto& g : cases) {
      const auto in = g.tensors.at("in.cursors").to_i64(), out = g.tensors.at("out.cursors").to_i64();
      const auto n = g.tensors.at("in.accepted").to_i64()[0];
      const auto T = g.tensors.at("in.q").shape[0];
      const SpecRingGeometry geo{g.config.at("args").at("ring_B").get<int>(), g.config.at("args").at("ring_T").get<int>()};
      append |= in[2] == 0 && in[1] > 0 && n > 0 && n < T && out[1] == in[1] + n;
      wrap |= in[2] == 1 && n > 0 && in[0] + in[1] + T > geo.physical() && out[0] == (in[0] + in[1]) % geo.physical();
      flush_n0 |= in[2] == 1 && n == 0 && out[1] == 0;
      bf16 |= g.tensors.at("in.rec.u").dtype == DType::BF16;
      // Re-running the reference on the stored inputs reproduces every expectation under its tolerance.
      const auto got = ref::run_ring_step(g.config, g.tensors);
      for (const auto& [name, tol] : g.tolerance) {
        const Tensor& want = g.tensors.at(name);
        if (is_float(want.dtype))
          EXPECT_TRUE(compare(want.to_f64(), got.at(name).to_f64(), Tolerance::exact()).ok) << g.name << name;
        else
          EXPECT_EQ(want.to_i64(), got.at(name).to_i64()) << g.name << name;
      }
    }
    EXPECT_TRUE(append && wrap && flush_n0 && bf16) << p;
  }
}

TEST(RingFixture, WrittenSetChecksCleanAndATamperedCheckpointFails) {
  const auto dir = temp_dir("tamper");
  const auto paths = ref::write_ring_set(preset("tiny-gdn"), 4, dir.string());
  ASSERT_EQ(paths.size(), 3u);
  for (const auto& p : paths) {
    const auto r = ref::check_fixture_file(p);
    std::string why = r.error;
    for (const auto& t : r.tensors) why += "\n" + t.name + ": " + t.report.str();
    EXPECT_TRUE(r.ok) << p << ": " << why;
    Fixture f = load_fixture(p);
    auto c = f.tensors.at("out.committed").to_f32();
    c[5] += 0.1f;  // beyond every tolerance these fixtures carry (the largest: 2^-6 * max(1, scale))
    f.tensors["out.committed"] = Tensor::from_f32(DType::F32, f.tensors.at("out.committed").shape, c);
    save_fixture(p, f);
    const auto bad = ref::check_fixture_file(p);
    EXPECT_FALSE(bad.ok) << p;
    for (const auto& t : bad.tensors)
      if (t.name == "out.committed") EXPECT_EQ(t.report.worst_index, 5u);
  }
  std::filesystem::remove_all(dir);
}

TEST(RingFixture, CursorsTheRingCannotHaveAreRefusedNamingTheField) {
  auto g = ref::ring_step_cases(preset("tiny-gdn"), 4).at(0);
  auto cur = g.tensors.at("in.cursors").to_i64();
  g.tensors["in.cursors"] = Tensor::from_i32({3}, {static_cast<std::int32_t>(cur[0]), static_cast<std::int32_t>(cur[1]),
                                                  cur[2] ? 0 : 1});
  try {
    ref::run_ring_step(g.config, g.tensors);
    FAIL() << "an is_flush that contradicts write_pos was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "in.cursors[2]");
  }
  g.tensors["in.accepted"] = Tensor::from_i32({}, {9});
  g.tensors["in.cursors"] = Tensor::from_i32({3}, {static_cast<std::int32_t>(cur[0]), static_cast<std::int32_t>(cur[1]),
                                                  static_cast<std::int32_t>(cur[2])});
  try {
    ref::run_ring_step(g.config, g.tensors);
    FAIL() << "accepted = 9 > T was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "in.accepted");
  }
}
