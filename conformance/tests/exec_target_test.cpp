// The exec: target against implementations that misbehave (data/misbehaving_target.py): every failure mode
// is an Error naming the command and the field, carrying the process status and its stderr, within the
// per-command timeout; the judge turns them into verdicts instead of crashing; the next case starts a fresh
// process. The same for the `fixture` command: misfit answers named, answers judged at the claimed tier, what
// the capabilities exclude not covered.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "exec_fixtures.hpp"
#include "exec_target.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/lifecycle/judge.hpp"

using namespace replayssm;

namespace {

std::string command(const std::string& mode) {
  return std::string(REPLAYSSM_PYTHON) + " " + REPLAYSSM_SOURCE_DIR + "/conformance/tests/data/misbehaving_target.py " +
         mode;
}

ref::EngineSetup tiny_setup() { return ref::make_setup(preset("tiny-gdn"), 7, 3, 2); }

struct Failure {
  std::string field, message;
};
template <class F>
Failure failure_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.field(), e.what()};
  }
  return {"<no error>", ""};
}

// Runs hello (target construction) and setup.
Failure setup_failure(const std::string& mode) {
  return failure_of([&] {
    auto t = ref::make_target("exec:" + command(mode));
    t->setup(tiny_setup());
  });
}

class ExecTarget : public ::testing::Test {
 protected:
  void SetUp() override {
    exec::register_exec_targets();
    exec::set_timeout(5);
    exec::set_startup_timeout(300);
  }
};

}  // namespace

// Each way of failing at hello or setup: the field the verdict names and what its message must carry.
struct SetupCase {
  const char* mode;
  const char* field;
  std::vector<std::string> says;
};
const SetupCase kSetupCases[] = {
    {"exit_at_start", "target.hello", {"exited with status 3"}},
    {"stderr_then_exit", "target.hello", {"cannot import the peer kernel", "exited with status 4"}},
    {"wrong_version", "target.hello.version", {"major version 2"}},
    {"crash_on_setup", "target.setup", {"killed by signal 11", "about to crash"}},  // via the shell: 128 + 11
    {"huge_frame_on_setup", "target.setup.frame", {"more than the cap"}},
    {"error_on_setup", "target.setup.setup.config.K", {"K = 8 is not supported"}},
    {"stderr_flood_on_setup", "<no error>", {}},
};

TEST_F(ExecTarget, EveryFailureAtHelloOrSetupIsNamed) {
  for (const auto& c : kSetupCases) {
    const auto f = setup_failure(c.mode);
    EXPECT_EQ(f.field, c.field) << c.mode << ": " << f.message;
    for (const auto& s : c.says) EXPECT_NE(f.message.find(s), std::string::npos) << c.mode << ": " << f.message;
  }
}

// After `shutdown` a target gets time to exit by itself (kShutdownGraceMs): what it writes at exit, such as
// compute-sanitizer's error summary, is kept. Killed at once, this process never writes its marker.
TEST_F(ExecTarget, ShutdownLetsTheTargetExitBeforeItIsKilled) {
  const std::string marker = ::testing::TempDir() + "replayssm_exec_exit_marker";
  std::remove(marker.c_str());
  {
    auto t = ref::make_target("exec:" + command("slow_exit_marker " + marker));
    t->setup(tiny_setup());
  }
  exec::shutdown_targets();
  std::ifstream in(marker);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "exited after shutdown");
}

// The target sleeps 3600 s in setup: "timed out" and an elapsed time far below that show it was killed at the
// per-command timeout, whatever the machine's load. Starting the interpreter is not part of that timeout (the
// start-up budget covers hello), so a loaded machine cannot turn this verdict into one about hello.
TEST_F(ExecTarget, HangIsKilledAtTheTimeout) {
  exec::set_timeout(1.5);
  const auto t0 = std::chrono::steady_clock::now();
  const auto f = setup_failure("hang_on_setup");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.field, "target.setup") << f.message;
  EXPECT_NE(f.message.find("timed out"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("per-command timeout 1.5 s (--target-timeout)"), std::string::npos) << f.message;
  EXPECT_LT(s, 600.0);
}

// hello has its own budget: a target slower to start than the per-command timeout still starts, and one that
// never answers hello is given up at the start-up budget, its verdict naming that budget.
TEST_F(ExecTarget, StartUpHasItsOwnBudget) {
  exec::set_timeout(2);
  EXPECT_EQ(setup_failure("slow_hello 3").field, "<no error>");
  exec::set_startup_timeout(1);
  const auto f = setup_failure("hang_at_hello");
  EXPECT_EQ(f.field, "target.hello") << f.message;
  EXPECT_NE(f.message.find("start-up budget 1 s (--target-startup-timeout)"), std::string::npos) << f.message;
}

TEST_F(ExecTarget, MalformedFrameIsNamed) {
  const auto f = setup_failure("garbage_on_setup");
  EXPECT_EQ(f.field.rfind("target.setup.frame", 0), 0u) << f.field;
}

TEST_F(ExecTarget, WrongShapeAndDtypeOfAnAnswerAreNamed) {
  for (const char* mode : {"wrong_shape_on_step", "wrong_dtype_on_step"}) {
    const auto s = tiny_setup();
    const auto f = failure_of([&] {
      auto t = ref::make_target("exec:" + command(mode));
      t->setup(s);
      ref::TargetRow row;
      row.row = BatchRow{0, 0, 2, 0, 2};
      row.kind = ref::RowKind::Prefill;
      row.fresh = true;
      std::vector<ref::SequenceInputs> in;
      for (int l = 0; l < s.cfg.num_layers; ++l) in.push_back(ref::token_inputs(s.cfg, l, 2, 9));
      t->step({row}, in);
    });
    EXPECT_EQ(f.field, "target.step.o.0") << mode;
    EXPECT_NE(f.message.find(std::string(mode) == "wrong_shape_on_step" ? "has shape" : "has dtype F64"),
              std::string::npos)
        << f.message;
  }
}

// Through the judge: the failure is a verdict naming the command, the campaign's next case gets a fresh
// process, and capabilities the target lacks are visible to the generator.
TEST_F(ExecTarget, JudgeTurnsAFailingTargetIntoAVerdict) {
  const std::string kind = "exec:" + command("wrong_shape_on_step");
  ref::Judge judge(tiny_setup(), kind);
  EXPECT_FALSE(judge.sut().target().implements_copy());
  ref::Cmd admit;
  admit.kind = ref::Cmd::Kind::Admit;
  admit.req = 0;
  admit.slot = 1;
  admit.prompt = 3;
  admit.seed = 5;
  EXPECT_EQ(judge.apply(admit), "");
  ref::Cmd step;
  step.kind = ref::Cmd::Kind::Step;
  step.rows.push_back(ref::RowSpec{0, 2, 2, 0, 11});
  const std::string why = judge.apply(step);
  EXPECT_NE(why.find("target.step.o.0"), std::string::npos) << why;
}

// --- the fixture command ---------------------------------------------------------------------------------------
namespace {

std::string golden(const std::string& rel) { return std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/golden/" + rel; }
const std::string kRecurrent = golden("tiny-gdn/tiny-gdn__recurrent__T12.safetensors");
const std::string kBatch = golden("tiny-gdn/tiny-gdn__mtp_batch__B4_T4.safetensors");

const exec::ExecTensorCheck* find_check(const exec::ExecFixtureResult& r, const std::string& name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

// Each misfit answer is an Error naming the command and the tensor; through check_fixture_through it is a failed
// (covered) fixture carrying that field, never a pass.
TEST_F(ExecTarget, FixtureAnswerMisfitsAreNamed) {
  struct Case {
    const char* mode;
    const char* field;
    const char* says;
  };
  const Case cases[] = {
      {"fixture_wrong_shape", "target.fixture.out.o", "has shape [13, 4, 8], expected [12, 4, 8]"},
      {"fixture_wrong_dtype", "target.fixture.out.o", "has dtype F64, expected F32"},
      {"fixture_missing", "target.fixture.out.state", "is missing from the answer"},
      {"fixture_extra", "target.fixture.out.bonus", "is not an output of this fixture (expected out.o, out.state)"},
  };
  const Fixture f = load_fixture(kRecurrent);
  for (const auto& c : cases) {
    const auto e = failure_of([&] { (void)exec::run_fixture(command(c.mode), f); });
    EXPECT_EQ(e.field, c.field) << c.mode << ": " << e.message;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.mode << ": " << e.message;
    const auto r = exec::check_fixture_through(command(c.mode), kRecurrent);
    EXPECT_TRUE(r.covered && !r.ok) << c.mode << ": " << r.str();
    EXPECT_NE(r.why.find(c.field), std::string::npos) << c.mode << ": " << r.str();
    EXPECT_NE(r.str().find("FAIL"), std::string::npos) << r.str();
  }
}

// Zeros of the right dtype and shape: PASS on a fixture whose expectations are zeros, FAIL on the golden one,
// naming the tensor, the worst element (index, coordinates, expected, got) and both tolerances.
// The recurrent fixture with every out.* tensor replaced by zeros, saved in `dir` (created); returns its path.
std::string save_zeros_fixture(const std::filesystem::path& dir) {
  Fixture f = load_fixture(kRecurrent);
  std::filesystem::create_directories(dir);
  for (const auto& name : f.tensor_names("out.")) {
    auto& t = f.tensors.at(name);
    t = Tensor::zeros(t.dtype, t.shape);
  }
  const std::string zeros = (dir / "zeros__recurrent.safetensors").string();
  save_fixture(zeros, f);
  return zeros;
}

// A fatal error answer (a sticky device fault: every later kernel launch of that process fails the same way)
// ends the target's process; the next fixture of the same command line is judged by a fresh process instead of
// inheriting the fault (before, the second fixture failed with "the target process failed earlier" or a broken
// pipe, blamed on a fixture the target never ran).
TEST_F(ExecTarget, AFatalErrorAnswerEndsTheProcessAndTheNextFixtureGetsAFreshOne) {
  const auto dir = std::filesystem::temp_directory_path() / ("exec-fatal-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string zeros = save_zeros_fixture(dir);
  const std::string cmd = command("fixture_fatal_once " + (dir / "marker").string());
  const auto first = exec::check_fixture_through(cmd, zeros);
  ASSERT_TRUE(first.covered && !first.ok) << first.str();
  EXPECT_NE(first.why.find("misaligned address"), std::string::npos) << first.why;
  EXPECT_NE(first.why.find("fatal: the target ended its process"), std::string::npos) << first.why;
  const auto second = exec::check_fixture_through(cmd, zeros);
  EXPECT_TRUE(second.covered && second.ok) << second.str();
  std::filesystem::remove_all(dir);
}

TEST_F(ExecTarget, FixtureAnswersAreComparedAtTheClaimedTierNamingTheWorstElement) {
  const auto dir = std::filesystem::temp_directory_path() / ("exec-fixture-test-" + std::to_string(::getpid()));
  const std::string zeros = save_zeros_fixture(dir);
  const auto pass = exec::check_fixture_through(command("fixture_zeros"), zeros);
  EXPECT_TRUE(pass.covered && pass.ok) << pass.str();
  EXPECT_EQ(pass.tier, "fp32");

  const auto fail = exec::check_fixture_through(command("fixture_zeros"), kRecurrent);
  ASSERT_TRUE(fail.covered && !fail.ok) << fail.str();
  const auto* o = find_check(fail, "out.o");
  ASSERT_NE(o, nullptr) << fail.str();
  EXPECT_FALSE(o->report.ok);
  EXPECT_EQ(o->report.worst_got, 0.0);
  EXPECT_NE(o->report.worst_ref, 0.0);
  const std::string line = fail.str();
  for (const char* s : {"FAIL ", "tiny-gdn__recurrent__T12", "fp32 tier", "worst@", "worst element [",
                        "stored tolerance allclose(atol=1e-05,rtol=0.0001)", "[allclose(atol="})
    EXPECT_NE(line.find(s), std::string::npos) << s << " in\n" << line;
  std::filesystem::remove_all(dir);
}

// mtp_batch: an answer that commits nothing keeps every slot no row writes bitwise (that check passes) and is
// caught on the written slots alone; its PAD row's outputs are don't-care (no pad_outputs_zero claim).
TEST_F(ExecTarget, FixtureMtpBatchJudgesWrittenAndUntouchedSlotsApart) {
  const auto r = exec::check_fixture_through(command("fixture_echo_pool"), kBatch);
  ASSERT_TRUE(r.covered && !r.ok) << r.str();
  const auto* untouched = find_check(r, "out.pool (slots no row writes: bitwise unchanged)");
  const auto* written = find_check(r, "out.pool (written slots)");
  ASSERT_TRUE(untouched && written) << r.str();
  EXPECT_TRUE(untouched->report.ok) << untouched->str();
  EXPECT_FALSE(written->report.ok) << written->str();
  // The scale of the written slots, not the 1e30 markers of unused ones: atol = 2e-5 * max(1, max|S|).
  EXPECT_LT(written->judged.atol, 1e-3) << written->judged.str();
  EXPECT_EQ(find_check(r, "out.o (PAD rows: exact zeros, claimed)"), nullptr);  // no claim: don't-care

  // Claiming pad_outputs_zero: the PAD row's outputs must be exact +0 (row 1 of [4, 4, HV, V]).
  const auto claimed = exec::check_fixture_through(command("fixture_pad_ones"), kBatch);
  const auto* pad = find_check(claimed, "out.o (PAD rows: exact zeros, claimed)");
  ASSERT_NE(pad, nullptr) << claimed.str();
  EXPECT_FALSE(pad->report.ok);
  EXPECT_EQ(exec::coords_of(pad->report.worst_index, pad->shape).rfind("[1, ", 0), 0u) << pad->str();
}

// What the capabilities exclude is "not covered" with the reason, never a pass.
TEST_F(ExecTarget, FixturesOutsideTheCapabilitiesAreNotCovered) {
  struct Case {
    std::string mode, path, says;
  };
  const Case cases[] = {
      {"fixture_v10", kRecurrent, "protocol 1.0, which has no fixture command"},
      {"stderr_flood_on_setup", kRecurrent, "fixture op 'recurrent' is not claimed"},
      {"fixture_zeros", golden("tiny-gdn/tiny-gdn__mtp_verify__T4.safetensors"), "'mtp_verify' is not claimed"},
      {"fixture_zeros", golden("mrope/mrope__qwen2-vl.safetensors"), "which has no fixture op 'mrope.rotary' (added in 1.10)"},
      {"fixture_zeros", std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/traces/mrope/qwen3.5__session__0.safetensors",
       "the target does not claim mrope"},
      {"fixture_zeros", std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/trees/tiny-gdn/tiny-gdn__tree_commit__k1d3n4_a1.safetensors",
       "which has no fixture op 'tree.commit' (added in 1.11)"},
      {"fixture_zeros", std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/ring/tiny-gdn/tiny-gdn__ring_step__append_f32.safetensors",
       "ring-step fixtures need the ring's records"},
  };
  for (const auto& c : cases) {
    const auto r = exec::check_fixture_through(command(c.mode), c.path);
    EXPECT_FALSE(r.covered) << c.mode << ": " << r.str();
    EXPECT_FALSE(r.ok) << c.mode;
    EXPECT_NE(r.why.find(c.says), std::string::npos) << c.mode << ": " << r.str();
    EXPECT_EQ(r.str().rfind("not covered ", 0), 0u) << r.str();
  }
}

// --- the conv fixture ops (protocol 1.3) -------------------------------------------------------------------------
namespace {
std::string conv(const std::string& rel) { return std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/conv/" + rel; }
}  // namespace

// A commit that keeps the checkpoint is right exactly when n = 0: PASS there, FAIL for n = 2 on out.state, judged
// exact (the stored tolerance, whatever the claimed tier), naming the worst element's coordinates [c, column].
TEST_F(ExecTarget, ConvFixturesAreJudgedAtTheirStoredTolerance) {
  const auto pass = exec::check_fixture_through(command("fixture_conv_echo"),
                                                conv("tiny-gdn/tiny-gdn__conv__commit_T4_n0.safetensors"));
  EXPECT_TRUE(pass.covered && pass.ok) << pass.str();
  EXPECT_EQ(pass.op, "conv.commit");
  EXPECT_EQ(pass.tier, "fp32");

  const auto fail = exec::check_fixture_through(command("fixture_conv_echo"),
                                                conv("tiny-gdn/tiny-gdn__conv__commit_T4_n2.safetensors"));
  ASSERT_TRUE(fail.covered && !fail.ok) << fail.str();
  const auto* st = find_check(fail, "out.state");
  ASSERT_NE(st, nullptr) << fail.str();
  EXPECT_FALSE(st->report.ok);
  EXPECT_EQ(st->judged.str(), "exact") << st->str();
  EXPECT_EQ(st->stored, "exact");
  ASSERT_EQ(st->shape.size(), 2u);  // [C, W-1]
  const std::string line = fail.str();
  for (const char* s : {"FAIL ", "tiny-gdn__conv__commit_T4_n2", "conv.commit", "worst@", "worst element ["})
    EXPECT_NE(line.find(s), std::string::npos) << s << " in\n" << line;

  // conv.update: every per-token state wrong (the input state repeated), out.y zeros: both fail, out.y at its
  // stored allclose bound.
  const auto upd = exec::check_fixture_through(command("fixture_conv_echo"),
                                               conv("tiny-kda/tiny-kda__conv__update_T4.safetensors"));
  ASSERT_TRUE(upd.covered && !upd.ok) << upd.str();
  const auto* y = find_check(upd, "out.y");
  const auto* states = find_check(upd, "out.states");
  ASSERT_TRUE(y && states) << upd.str();
  EXPECT_FALSE(y->report.ok);
  EXPECT_FALSE(states->report.ok);
  EXPECT_EQ(y->judged.str(), y->stored);
  EXPECT_NE(y->stored.find("allclose"), std::string::npos) << y->str();
}

// A missing tensor is an Error naming the command and the tensor, and a failed (covered) fixture.
TEST_F(ExecTarget, ConvFixtureMissingTensorIsNamed) {
  const std::string path = conv("tiny-gdn/tiny-gdn__conv__update_T4.safetensors");
  const Fixture f = load_fixture(path);
  const auto e = failure_of([&] { (void)exec::run_fixture(command("fixture_conv_missing"), f); });
  EXPECT_EQ(e.field, "target.fixture.out.y") << e.message;
  EXPECT_NE(e.message.find("is missing from the answer"), std::string::npos) << e.message;
  const auto r = exec::check_fixture_through(command("fixture_conv_missing"), path);
  EXPECT_TRUE(r.covered && !r.ok) << r.str();
  EXPECT_NE(r.why.find("target.fixture.out.y"), std::string::npos) << r.str();
}

// Not covered, with the reason, never a pass: an op not claimed, a dtype outside act_dtypes, and a target speaking
// protocol 1.2 or 1.1 (no conv ops), which is never sent one.
TEST_F(ExecTarget, ConvFixturesOutsideTheCapabilitiesAreNotCovered) {
  struct Case {
    std::string mode, path, says;
  };
  const Case cases[] = {
      {"fixture_conv_echo", conv("tiny-gdn/tiny-gdn__conv__prefill_fresh_T9.safetensors"),
       "fixture op 'conv.prefill' is not claimed"},
      {"fixture_conv_echo", conv("tiny-gdn/tiny-gdn__conv__commit_T5_n3_k6_f32act_bf16state.safetensors"),
       "act_dtype F32"},
      {"fixture_conv_v12", conv("tiny-gdn/tiny-gdn__conv__commit_T4_n2.safetensors"),
       "protocol 1.2, which has no fixture op 'conv.commit' (added in 1.3)"},
      {"fixture_zeros", conv("tiny-gdn/tiny-gdn__conv__commit_T4_n2.safetensors"),
       "protocol 1.1, which has no fixture op 'conv.commit'"},
  };
  for (const auto& c : cases) {
    const auto r = exec::check_fixture_through(command(c.mode), c.path);
    EXPECT_FALSE(r.covered) << c.mode << ": " << r.str();
    EXPECT_FALSE(r.ok) << c.mode;
    EXPECT_NE(r.why.find(c.says), std::string::npos) << c.mode << ": " << r.str();
  }
}
