// The judge's own teeth: every check of the judge (judge.hpp, Check) is needed. For each check a catalogue fault
// is named that only it catches at its call: a campaign with the fault fails, naming that check; the shrunk case,
// replayed with that one check turned off, no longer fails at that command (it passes, or fails later or by
// another check). So a judge with any check weakened or dropped fails this test. The checks another one
// implies are pinned the other way: turned off, the implying check still catches their fault at the same call.
// The table is docs/lifecycle.md's "The judge's checks".
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "campaign.hpp"
#include "lifecycle.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/lifecycle/judge.hpp"

using namespace replayssm;

namespace {

struct Needed {
  ref::Check check;
  ref::Fault fault;
  const char* target;
  bool conv;  // the fault lives in the conv component
};

// The one fault per check that only that check catches at its call.
const Needed kNeeded[] = {
    {ref::Check::Outputs, ref::Fault::OutputBeforeUpdate, "replay", false},
    {ref::Check::PadZeros, ref::Fault::PadOutputsFromZeroState, "replay", false},
    {ref::Check::Requests, ref::Fault::RequestStaysAfterStop, "replay", false},
    {ref::Check::States, ref::Fault::OffByOneAccepted, "replay", false},
    {ref::Check::OracleSelfCheck, ref::Fault::FullStateCopyOffByOne, "full_state", false},
    {ref::Check::Untouched, ref::Fault::AllocateZeroesNextSlot, "replay", false},
    {ref::Check::Gaps, ref::Fault::CommitSpillsIntoGap, "replay", false},
    {ref::Check::KeptAtZero, ref::Fault::ZeroAcceptedWritesDestination, "replay", false},
    {ref::Check::ReadOnly, ref::Fault::CommitWritesReadSlot, "replay", false},
    {ref::Check::StatesAfterStep, ref::Fault::PrefillCommittedAtCommit, "replay", false},
    {ref::Check::UntouchedAfterStep, ref::Fault::VerifyScratchInIdleSlot, "replay", false},
    {ref::Check::ConvOutputs, ref::Fault::ConvFreshKeepsTenantWindow, "replay", true},
    {ref::Check::ConvWindows, ref::Fault::ConvColumnOffByOne, "replay", true},
    {ref::Check::ConvUntouched, ref::Fault::ConvPadRowWritesSlot0, "replay", true},
    {ref::Check::Bookkeeping, ref::Fault::StopTokenPlusOne, "replay", false},
    {ref::Check::SelfConsistency, ref::Fault::DecodePathDrift, "full_state", false},
};

// A check implied by another: its fault is still caught at the same call by the implying check when it is off.
struct Implied {
  ref::Check check, by;
  ref::Fault fault;
  const char* target;
};
const Implied kImplied[] = {
    // A non-finite output also fails the comparison of its row; the tripwire only adds its coordinates.
    {ref::Check::NanTripwire, ref::Check::Outputs, ref::Fault::DecayWeightsFactored, "ring"},
};

// self_checks: the campaign's self checks (a separate command) are drawn only when hunting their own check's fault:
// they catch many faults too (an off-by-one commit disagrees with itself), so with them on, the shortest
// counterexample of another check's fault may end at a self check instead of at that check's call.
fuzz::FuzzReport hunt(ref::Fault fault, const std::string& target, bool conv, bool self_checks = false) {
  fuzz::FuzzOptions o;
  o.self_checks = self_checks;
  o.target = target;
  o.cfg = preset("tiny-gdn");
  o.seed = 11;
  o.cases = 200;
  o.max_commands = 100;
  o.fault = fault;
  if (const auto recon = ref::fault_reconstruction(fault)) {  // where the fault lives, and the widths that show it
    o.recon = *recon;
    o.max_T = 12;
  }
  o.conv = conv ? fuzz::ConvMix::On : fuzz::ConvMix::Off;
  // One folder per process: ctest runs these tests in parallel, and a dump read back must be this hunt's own.
  o.dump_dir = ::testing::TempDir() + "judge_teeth_" + std::to_string(::getpid()) + "_" + ref::to_string(fault);
  return fuzz::run_fuzz(o, nullptr);
}

// Where the dumped case fails with `disabled` turned off: the command index (-1 when it passes) and the call.
struct Where {
  long command = -1;
  std::string call, why;
};
Where failing_call(const fuzz::DumpedCase& c, const std::set<ref::Check>& disabled) {
  Where w;
  std::size_t at = 0;
  w.why = fuzz::replay_sequence(c.setup, c.target, c.fault, c.commands, disabled, &at, &w.call);
  if (!w.why.empty()) w.command = static_cast<long>(at);
  return w;
}

}  // namespace

class JudgeTeeth : public ::testing::TestWithParam<Needed> {};

TEST_P(JudgeTeeth, OnlyThisCheckCatchesItsFaultAtThatCall) {
  const Needed n = GetParam();
  const auto r = hunt(n.fault, n.target, n.conv, n.check == ref::Check::SelfConsistency);
  ASSERT_TRUE(r.failed) << ref::to_string(n.fault) << " survived 200 cases";
  EXPECT_EQ(r.check, ref::to_string(n.check)) << ref::to_string(n.fault) << ": " << r.reason;
  ASSERT_FALSE(r.dump_path.empty());
  const auto c = fuzz::load_dump(r.dump_path);
  const Where on = failing_call(c, {});
  ASSERT_GE(on.command, 0) << "the dumped case passes on replay";
  EXPECT_EQ(on.call, r.call);
  const Where off = failing_call(c, {n.check});
  // Not caught at that call any more: the case passes, fails at a later command, or at another call of it.
  EXPECT_TRUE(off.command < 0 || off.command > on.command || off.call != on.call)
      << "with " << ref::to_string(n.check) << " off, " << ref::to_string(n.fault) << " is still caught at command "
      << off.command << " (" << off.call << "): " << off.why;
  std::cout << "[judge-teeth] " << ref::to_string(n.check) << ": " << ref::to_string(n.fault) << " caught at command "
            << on.command << " (" << on.call << "); without the check: "
            << (off.command < 0 ? std::string("the case passes")
                                : "command " + std::to_string(off.command) + " (" + off.call + "): " + off.why)
            << "\n";
  std::filesystem::remove(r.dump_path);
}

INSTANTIATE_TEST_SUITE_P(EveryCheck, JudgeTeeth, ::testing::ValuesIn(kNeeded),
                         [](const auto& info) { return ref::to_string(info.param.check); });

TEST(JudgeTeeth, EveryCheckIsNeededOrImplied) {
  for (auto c : ref::all_checks()) {
    bool listed = false;
    for (const auto& n : kNeeded) listed = listed || n.check == c;
    for (const auto& i : kImplied) listed = listed || i.check == c;
    EXPECT_TRUE(listed) << ref::to_string(c) << " has no fault that only it catches and no implying check";
  }
}

TEST(JudgeTeeth, AnImpliedCheckIsCoveredByTheCheckThatImpliesIt) {
  for (const auto& i : kImplied) {
    const auto r = hunt(i.fault, i.target, false);
    ASSERT_TRUE(r.failed) << ref::to_string(i.fault);
    EXPECT_EQ(r.check, ref::to_string(i.check)) << r.reason;
    const auto c = fuzz::load_dump(r.dump_path);
    const Where on = failing_call(c, {});
    const Where off = failing_call(c, {i.check});
    EXPECT_TRUE(off.command == on.command && off.call == on.call)
        << "with " << ref::to_string(i.check) << " off, " << ref::to_string(i.by) << " does not catch "
        << ref::to_string(i.fault) << " at the same call: " << off.why;
    std::filesystem::remove(r.dump_path);
  }
}
