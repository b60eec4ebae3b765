// The engine-level exec: bridge against engines that misbehave (data/misbehaving_engine.py): a wrong protocol
// or version, an error answer, a crash, an output of the wrong shape and a malformed request table are each
// an Error naming the command and the field (with the process status and stderr where it died). Version 0.2:
// a capability claimed at 0.1 or not as a boolean, a malformed snapshot answer, a crash on snapshot_hit and a
// hang on migrate likewise; an engine answering 0.1 keeps working and is sent no snapshot or migrate command.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "engine_exec.hpp"
#include "replayssm/error.hpp"
#include "exec_target.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/engine_level/judge.hpp"

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

TEST(EngineExecSnapshots, ACapabilityOf0_2ClaimedAt0_1OrNotABooleanIsRefusedAtHello) {
  const auto at01 = failure_of([] { exec::make_engine_exec(command("snapshots_at_0_1")); });
  EXPECT_EQ(at01.field, "engine.hello.capabilities.prefix_snapshots") << at01.message;
  EXPECT_NE(at01.message.find("needs 0.2"), std::string::npos) << at01.message;
  EXPECT_EQ(failure_of([] { exec::make_engine_exec(command("snapshots_not_bool")); }).field,
            "engine.hello.capabilities.prefix_snapshots");
}

TEST(EngineExecSnapshots, AnEngineAnswering0_1KeepsWorkingAndIsSentNoSnapshotsOrMigrations) {
  auto s = tiny();
  auto e = exec::make_engine_exec(command("older"));
  EXPECT_FALSE(e->prefix_snapshots());
  EXPECT_FALSE(e->migrates());
  e->setup(s);
  e->admit(0, prompt(s, 3), 4);  // the 0.1 commands still work
  EXPECT_EQ(e->requests().at(0).to_prefill, 3);
  EXPECT_EQ(failure_of([&] { e->snapshot_tokens(0); }).field, "engine.snapshot");
  EXPECT_EQ(failure_of([&] { e->migrate(0); }).field, "engine.migrate");
  // A judge with prefix snapshots refuses it before anything is sent, naming the option.
  s.options.block = 2;
  s.base.num_slots = 3 * s.options.max_live + 2;
  EXPECT_EQ(failure_of([&] { el::EngineJudge(s, exec::make_engine_exec(command("older"))); }).field, "options.block");
}

TEST(EngineExecSnapshots, AMalformedSnapshotAnswerNamesTheField) {
  const auto s = tiny();
  auto query = [&](const std::string& mode, bool state) {
    auto e = exec::make_engine_exec(command(mode));
    EXPECT_TRUE(e->prefix_snapshots() && e->migrates()) << mode;
    e->setup(s);
    return failure_of([&] {
      if (state)
        e->snapshot_state(0, 0);
      else
        e->snapshot_tokens(0);
    });
  };
  EXPECT_EQ(query("negative_snapshot_tokens", false).field, "engine.snapshot.tokens");
  EXPECT_EQ(query("snapshot_state_unasked", false).field, "engine.snapshot.state");
  const auto missing = query("snapshot_state_missing", true);
  EXPECT_EQ(missing.field, "engine.snapshot.state") << missing.message;
  EXPECT_NE(missing.message.find("missing"), std::string::npos) << missing.message;
  const auto shape = query("snapshot_state_wrong_shape", true);
  EXPECT_EQ(shape.field, "engine.snapshot.state") << shape.message;
  EXPECT_NE(shape.message.find("shape"), std::string::npos) << shape.message;
  // The well-formed answer of the same engine is read: boundary 2, a zero state of the layout's shape.
  auto e = exec::make_engine_exec(command("snapshot_state_missing"));
  e->setup(s);
  EXPECT_EQ(e->snapshot_tokens(0), 2);
}

TEST(EngineExecSnapshots, ACrashOnSnapshotHitAndAHangOnMigrateAreVerdictsNotHangs) {
  const auto s = tiny();
  auto e = exec::make_engine_exec(command("crash_on_snapshot_hit"));
  e->setup(s);
  const auto crash = failure_of([&] { e->snapshot_hit(1, 0, prompt(s, 2), 4); });
  EXPECT_EQ(crash.field, "engine.snapshot_hit") << crash.message;
  EXPECT_NE(crash.message.find("exited with status 6"), std::string::npos) << crash.message;
  EXPECT_NE(crash.message.find("no snapshot to restore"), std::string::npos) << crash.message;

  const double was = exec::timeout();
  exec::set_timeout(1.5);
  auto h = exec::make_engine_exec(command("hang_on_migrate"));
  h->setup(s);
  const auto t0 = std::chrono::steady_clock::now();
  const auto hang = failure_of([&] { h->migrate(0); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  exec::set_timeout(was);
  EXPECT_EQ(hang.field, "engine.migrate") << hang.message;
  EXPECT_LT(took, 600.0) << hang.message;  // it sleeps 3600 s: killed at the timeout, at any machine load
  EXPECT_NE(hang.message.find("per-command timeout 1.5 s"), std::string::npos) << hang.message;
  // The process was killed: the next command says so instead of waiting.
  EXPECT_EQ(failure_of([&] { h->requests(); }).field, "engine.requests");
}
