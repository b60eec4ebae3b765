// The engine-level exec: bridge against engines that misbehave (data/misbehaving_engine.py): a wrong protocol
// or version, an error answer, a crash, an output of the wrong shape and a malformed request table are each
// an Error naming the command and the field (with the process status and stderr where it died).
#include <gtest/gtest.h>

#include <string>

#include "engine_exec.hpp"
#include "replayssm/error.hpp"
#include "replayssm/reference/engine.hpp"

using namespace replayssm;
namespace el = ref::engine_level;

namespace {
std::string command(const std::string& mode) {
  return std::string(REPLAYSSM_PYTHON) + " " + REPLAYSSM_SOURCE_DIR + "/conformance/tests/data/misbehaving_engine.py " +
         mode;
}
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
el::EngineLevelSetup tiny() {
  auto cfg = preset("tiny-gdn");
  cfg.num_layers = 1;
  return el::make_engine_level_setup(cfg, 5, 2, 3, {});
}
std::vector<ref::SequenceInputs> prompt(const el::EngineLevelSetup& s, int n) {
  return {ref::token_inputs(s.base.cfg, 0, n, 9)};
}
}  // namespace

TEST(EngineExec, WrongProtocolOrVersionIsRefusedAtHello) {
  EXPECT_EQ(failure_of([] { exec::make_engine_exec(command("wrong_protocol")); }).field, "engine.hello.protocol");
  EXPECT_EQ(failure_of([] { exec::make_engine_exec(command("wrong_version")); }).field, "engine.hello.version");
}

TEST(EngineExec, AnErrorAnswerNamesTheFieldAndTheProcessKeepsServing) {
  const auto s = tiny();
  auto e = exec::make_engine_exec(command("error_on_admit"));
  e->setup(s);
  const auto f = failure_of([&] { e->admit(0, prompt(s, 3), 4); });
  EXPECT_EQ(f.field, "engine.admit.max_new") << f.message;
  EXPECT_NE(f.message.find("budgets above 1"), std::string::npos) << f.message;
  EXPECT_NO_THROW(e->setup(s));  // still serving
}

TEST(EngineExec, ACrashIsAVerdictWithStatusAndStderr) {
  const auto s = tiny();
  auto e = exec::make_engine_exec(command("crash_on_admit"));
  e->setup(s);
  const auto f = failure_of([&] { e->admit(0, prompt(s, 3), 4); });
  EXPECT_EQ(f.field, "engine.admit") << f.message;
  EXPECT_NE(f.message.find("exited with status 5"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("giving up on admit"), std::string::npos) << f.message;
}

TEST(EngineExec, OutputsOfTheWrongShapeNameTheTensor) {
  const auto s = tiny();
  auto e = exec::make_engine_exec(command("short_output_on_step"));
  e->setup(s);
  e->admit(0, prompt(s, 3), 4);
  std::vector<std::vector<ref::SequenceInputs>> windows{{ref::token_inputs(s.base.cfg, 0, 2, 1)}};
  const auto f = failure_of([&] { e->step({el::StepEntry{0, 2, 2, 0, 1}}, windows); });
  EXPECT_EQ(f.field, "engine.step.o.0") << f.message;
}

TEST(EngineExec, AMalformedRequestTableNamesTheEntry) {
  const auto s = tiny();
  auto e = exec::make_engine_exec(command("bad_status"));
  e->setup(s);
  e->admit(0, prompt(s, 3), 4);
  EXPECT_EQ(failure_of([&] { e->requests(); }).field, "engine.requests.requests[0].status");
}
