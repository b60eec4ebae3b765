// The golden-fixture path must be able to fail: tampered expectations, corrupt files and unknown ops are
// reported (never silently passed), and the fuzz campaign catches an injected fault and its dump replays.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "campaign.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/fixtures/golden.hpp"

using namespace replayssm;

namespace {
std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("replayssm-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}
}  // namespace

TEST(Golden, GeneratedSetChecksClean) {
  const auto dir = temp_dir("golden-clean");
  const auto paths = ref::write_golden_set(preset("tiny-kda"), 5, dir.string());
  ASSERT_FALSE(paths.empty());
  for (const auto& p : paths) {
    const auto r = ref::check_fixture_file(p);
    EXPECT_TRUE(r.ok) << p << ": " << r.error;
  }
  std::filesystem::remove_all(dir);
}

TEST(Golden, TamperedExpectationFailsAndNamesTheWorstElement) {
  const auto dir = temp_dir("golden-tamper");
  const auto paths = ref::write_golden_set(preset("tiny-gdn"), 5, dir.string());
  for (const auto& p : paths) {
    if (p.find("recurrent") == std::string::npos) continue;
    Fixture f = load_fixture(p);
    auto vals = f.tensors.at("out.state").to_f32();
    vals[7] += 0.01f;  // far outside allclose(1e-5, 1e-4)
    f.tensors["out.state"] = Tensor::from_f32(f.tensors.at("out.state").dtype, f.tensors.at("out.state").shape, vals);
    save_fixture(p, f);
    const auto r = ref::check_fixture_file(p);
    EXPECT_FALSE(r.ok);
    bool named = false;
    for (const auto& t : r.tensors)
      if (t.name == "out.state") named = !t.report.ok && t.report.worst_index == 7;
    EXPECT_TRUE(named);
  }
  std::filesystem::remove_all(dir);
}

TEST(Golden, CorruptFileIsReportedNotThrown) {
  const auto dir = temp_dir("golden-corrupt");
  const auto paths = ref::write_golden_set(preset("tiny-gdn"), 5, dir.string());
  const auto size = std::filesystem::file_size(paths[0]);
  std::filesystem::resize_file(paths[0], size - 3);
  const auto r = ref::check_fixture_file(paths[0]);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
  std::filesystem::remove_all(dir);
}

TEST(Golden, MtpBatchRejectsAcceptedOutsideWindow) {
  auto cases = ref::golden_cases(preset("tiny-gdn"), 9);
  for (auto& g : cases) {
    if (g.op != "mtp_batch") continue;
    g.tensors["in.accepted"] = Tensor::from_i32({4}, {4, 1, 5, 2});
    try {
      ref::run_golden_op(g.op, g.config, g.tensors);
      FAIL() << "accepted = 5 > T = 4 was not rejected";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "in.accepted[2]");
    }
  }
}

TEST(Fuzz, CampaignCatchesInjectedFaultAndTheDumpReplays) {
  const auto dir = temp_dir("fuzz");
  fuzz::FuzzOptions o;
  o.cfg = preset("tiny-gdn");
  o.target = "replay";
  o.fault = ref::Fault::ZeroAcceptedAsOne;
  o.cases = 100;
  o.seed = 3;
  o.dump_dir = dir.string();
  const auto r = fuzz::run_fuzz(o, nullptr);
  ASSERT_TRUE(r.failed);
  EXPECT_FALSE(fuzz::replay_dump(r.dump_path).empty());
  o.fault = ref::Fault::None;
  const auto clean = fuzz::run_fuzz(o, nullptr);
  EXPECT_FALSE(clean.failed) << clean.reason;
  EXPECT_EQ(clean.cases_passed, 100);
  std::filesystem::remove_all(dir);
}

TEST(Golden, MropeFixtureRecomputesFromInputsAndCatchesAShiftedPosition) {
  const auto dir = temp_dir("golden-mrope");
  const auto paths = ref::write_mrope_fixtures(11, dir.string());
  ASSERT_EQ(paths.size(), 4u);
  for (const auto& p : paths) {
    EXPECT_TRUE(ref::check_fixture_file(p).ok) << p;
    Fixture f = load_fixture(p);
    auto pos = f.tensors.at("out.positions").to_i64();
    pos[pos.size() - 1] += 1;  // the last token's w position off by one
    f.tensors["out.positions"] = Tensor::from_i64(f.tensors.at("out.positions").shape, pos);
    save_fixture(p, f);
    EXPECT_FALSE(ref::check_fixture_file(p).ok) << p;
  }
  std::filesystem::remove_all(dir);
}

TEST(GoldenMatrix, PublicMatrixCoversThePublicShapesAndChecksClean) {
  const auto cases = ref::matrix_cases("public", 11);
  std::set<std::string> names;
  std::set<int> dims, ratios, mtp_T, mtp_B;
  bool k_ne_v = false, kda = false, pool_larger = false, pad_row = false;
  for (const auto& g : cases) {
    EXPECT_TRUE(names.insert(g.name).second) << "duplicate name " << g.name;
    const ModelConfig c = config_from_json(g.config.at("model"));
    dims.insert(c.K);
    ratios.insert(c.HV / c.H);
    k_ne_v |= c.K != c.V;
    kda |= c.op == Op::KDA;
    if (g.op == "mtp_batch") {
      const auto& q = g.tensors.at("in.q");
      mtp_T.insert(static_cast<int>(q.shape[1]));
      mtp_B.insert(static_cast<int>(q.shape[0]));
      pool_larger |= g.tensors.at("in.pool").shape[0] > q.shape[0];
      for (auto s : g.tensors.at("in.slot").to_i64()) pad_row |= s < 0;
    }
    ASSERT_TRUE(g.config.at("args").contains("public_shape")) << g.name;
    // Re-checking a case from its own tensors passes (the same path as `replayssm check`).
    const auto out = ref::run_golden_op(g.op, g.config, g.tensors);
    for (const auto& [name, tol] : g.tolerance)
      EXPECT_TRUE(compare(g.tensors.at(name).to_f64(), out.at(name).to_f64(), tol).ok) << g.name << " " << name;
  }
  for (int d : {60, 64, 100, 128}) EXPECT_TRUE(dims.count(d)) << "D = " << d;
  for (int r : {1, 2, 3, 4, 8}) EXPECT_TRUE(ratios.count(r)) << "HV/H = " << r;
  for (int t : {2, 4, 8}) EXPECT_TRUE(mtp_T.count(t)) << "MTP T = " << t;
  EXPECT_TRUE(mtp_B.count(1) && mtp_B.count(16));
  EXPECT_TRUE(k_ne_v && kda && pool_larger && pad_row);
}

TEST(GoldenMatrix, UnknownMatrixNamesTheField) {
  try {
    ref::matrix_cases("no-such-matrix", 1);
    FAIL() << "an unknown matrix was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "matrix");
  }
}

TEST(Golden, FixtureWithoutExpectationsOrWithALooseToleranceFails) {
  const auto dir = temp_dir("golden-empty");
  const auto paths = ref::write_golden_set(preset("tiny-gdn"), 5, dir.string());
  for (const auto& p : paths) {
    if (p.find("__recurrent__") == std::string::npos) continue;
    Fixture f = load_fixture(p);
    Fixture no_state = f;
    no_state.tensors.erase("out.state");
    no_state.tolerance.erase("out.state");
    save_fixture(p, no_state);
    EXPECT_FALSE(ref::check_fixture_file(p).ok) << "a missing expected tensor passed";
    Fixture loose = f;
    loose.tolerance["out.o"] = Tolerance::allclose(1e300, 0);
    save_fixture(p, loose);
    EXPECT_FALSE(ref::check_fixture_file(p).ok) << "an absurd tolerance passed";
  }
  std::filesystem::remove_all(dir);
}
