// The exec: target against implementations that misbehave (data/misbehaving_target.py): every failure mode
// is an Error naming the command and the field, carrying the process status and its stderr, within the
// per-command timeout; the judge turns them into verdicts instead of crashing; the next case starts a fresh
// process.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "exec_target.hpp"
#include "replayssm/error.hpp"
#include "replayssm/reference/judge.hpp"

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

TEST_F(ExecTarget, HangIsKilledAtTheTimeout) {
  exec::set_timeout(1.5);
  const auto t0 = std::chrono::steady_clock::now();
  const auto f = setup_failure("hang_on_setup");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.field, "target.setup");
  EXPECT_NE(f.message.find("timed out"), std::string::npos) << f.message;
  EXPECT_LT(s, 10.0);
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
