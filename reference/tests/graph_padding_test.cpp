// Captured (CUDA-graph style) steps and PAD conventions, scripted: the capacity-sized index buffer's tail holds
// the stale slot ids of an earlier, larger batch (H3-H5), PAD rows carry -1, a null block 0 or a dedicated pad
// slot (H1, H2). Every reference target passes each script; each PAD/graph fault of the catalogue fails it
// with the check that sees it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "fuzz_case.hpp"
#include "lifecycle.hpp"
#include "trace_gen.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/fixtures/trace_replay.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using ref::Cmd;
using ref::Fault;
using ref::PadConvention;

namespace {
ref::EngineSetup setup_with(PadConvention c, std::int32_t slots = 6) {
  auto s = ref::make_setup(preset("tiny-gdn"), 11, slots, 3);
  s.pad_convention = c;
  return s;
}
Cmd admit(std::int32_t req, std::int32_t slot, std::int32_t prompt = 2) {
  Cmd c;
  c.kind = Cmd::Kind::Admit;
  c.req = req;
  c.slot = slot;
  c.prompt = prompt;
  c.seed = 100 + static_cast<std::uint64_t>(req);
  return c;
}
Cmd finish(std::int32_t req) {
  Cmd c;
  c.kind = Cmd::Kind::Finish;
  c.req = req;
  return c;
}
// A step of the given requests, T = 3 with n accepted each; graph > 0 makes it a captured step.
Cmd step(const std::vector<std::int32_t>& reqs, std::int32_t n, std::int32_t graph = 0, bool stale = false,
         std::vector<std::int32_t> pad_at = {}) {
  Cmd c;
  c.kind = Cmd::Kind::Step;
  for (auto r : reqs) c.rows.push_back(ref::RowSpec{r, 3, n, 0, 7000 + static_cast<std::uint64_t>(r)});
  c.pad_at = std::move(pad_at);
  c.graph = graph;
  c.stale_tail = stale;
  return c;
}

// H3: a captured step of 4 rows, two requests finish, then a captured step of 2 live rows padded to 4: rows
// 2..3 of the index buffer still hold the finished requests' slots (4 and 2) with their accepted counts.
std::vector<Cmd> stale_tail_script() {
  return {admit(0, 3), admit(1, 1), admit(2, 4), admit(3, 2),
          step({0, 1, 2, 3}, 0, 4, true),  // prefill chunks (2 tokens each)
          step({2, 0, 3, 1}, 2, 4, true),  // verify, 2 accepted: the buffer's rows 2..3 hold slots 2 and 1
          finish(3), finish(1),
          step({0, 2}, 3, 4, true)};       // 2 live rows; the tail holds slots 2 and 1, now free
}

using replayssm::testing::field_of;
}  // namespace

TEST(GraphPadding, StaleTailIsLeftAloneByEveryReferenceTarget) {
  for (auto conv : ref::all_pad_conventions())
    for (const std::string t : {"replay", "ring", "full_state"})
      EXPECT_EQ(fuzz::replay_sequence(setup_with(conv), t, Fault::None, stale_tail_script()), "")
          << t << " / " << ref::to_string(conv);
}

TEST(GraphPadding, TheTailCarriesTheEarlierBatchsSlotsToTheTarget) {
  ref::Engine e(ref::make_target("full_state"), setup_with(PadConvention::MinusOne));
  const auto cmds = stale_tail_script();
  for (const auto& c : cmds) e.execute(c);
  // The last step: 2 live rows then the tail, whose windows follow the live tokens (2 x 3 + dummy tokens).
  ASSERT_EQ(e.last_rows().size(), 4u);
  EXPECT_EQ(e.last_rows()[2].req, -1);
  EXPECT_EQ(e.last_rows()[3].req, -1);
  EXPECT_EQ(e.last_rows()[2].offset, 6);
  EXPECT_EQ(e.last_written(), (std::vector<std::int32_t>{3, 4}));  // the live rows' slots only
}

TEST(GraphPadding, ProcessingTheWholeCaptureWritesTheStaleSlots) {
  const std::string why =
      fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::GraphTailProcessed, stale_tail_script());
  EXPECT_NE(why.find("changed although the command must not touch it"), std::string::npos) << why;
  EXPECT_NE(why.find("command 8"), std::string::npos) << why;  // the first step with a stale tail
}

TEST(GraphPadding, APadTailIsNotStale) {
  auto cmds = stale_tail_script();
  cmds.back().stale_tail = false;  // the engine fills the tail with PAD sentinels: nothing to write
  EXPECT_EQ(fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::GraphTailProcessed, cmds), "");
}

TEST(GraphPadding, CapturedSizeBelowTheLiveRowsOrAboveCapacityIsRefused) {
  ref::Engine e(ref::make_target("full_state"), setup_with(PadConvention::MinusOne));
  e.execute(admit(0, 1));
  e.execute(admit(1, 2));
  EXPECT_EQ(field_of([&] { e.execute(step({0, 1}, 0, 1, true)); }), "cmd.graph");
  EXPECT_EQ(field_of([&] { e.execute(step({0, 1}, 0, 6 + 8 + 1, true)); }), "cmd.graph");
}

// H1: PAD index -1 wrapping to the last pool slot, which a live request holds.
TEST(PadConventions, MinusOneWrappingToTheLastSlotIsCaught) {
  const std::vector<Cmd> cmds{admit(0, 5), step({0}, 0), step({0}, 2, 0, false, {0, 1})};
  EXPECT_EQ(fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::None, cmds), "");
  EXPECT_NE(fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::PadIndexWraps, cmds), "");
}

// H2: the sentinel 0 taken for PAD while 0 is a valid slot (the -1 convention): slot 0's request is skipped.
TEST(PadConventions, SlotZeroTakenForPadUnderMinusOneIsCaught) {
  const std::vector<Cmd> cmds{admit(0, 0), admit(1, 3), step({0, 1}, 0), step({1, 0}, 2, 0, false, {1})};
  EXPECT_EQ(fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::None, cmds), "");
  const std::string why =
      fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::PadSentinelZero, cmds);
  EXPECT_NE(why.find("request 0"), std::string::npos) << why;
}

TEST(PadConventions, TheReservedSlotIsNeverAllocated) {
  ref::Engine null_block(ref::make_target("full_state"), setup_with(PadConvention::NullBlock));
  EXPECT_EQ(field_of([&] { null_block.execute(admit(0, 0)); }), "cmd.slot");
  ref::Engine pad_slot(ref::make_target("full_state"), setup_with(PadConvention::PadSlot));
  EXPECT_EQ(field_of([&] { pad_slot.execute(admit(0, 5)); }), "cmd.slot");
  EXPECT_EQ(field_of([] { setup_with(PadConvention::NullBlock, 1).validate(); }), "pad_convention");
}

TEST(PadConventions, EachConventionsPadRowsLeaveEverySlotAlone) {
  for (auto conv : {PadConvention::NullBlock, PadConvention::PadSlot}) {
    const std::vector<Cmd> cmds{admit(0, 1), admit(1, 3), step({0, 1}, 0, 0, false, {0, 2}),
                                step({1, 0}, 3, 4, true, {1}), step({0}, 1, 8, true)};
    for (const std::string t : {"replay", "ring"})
      EXPECT_EQ(fuzz::replay_sequence(setup_with(conv), t, Fault::None, cmds), "") << t << " / " << ref::to_string(conv);
  }
}

TEST(PadConventions, TheTargetSeesTheConventionsSentinel) {
  for (auto conv : ref::all_pad_conventions()) {
    const auto s = setup_with(conv);
    ref::TargetRow pad{BatchRow{s.pad_sentinel(), s.pad_sentinel(), 2, 0, 2}, ref::RowKind::Verify, false, false};
    ref::TargetRow live{BatchRow{3, 3, 2, 2, 0}, ref::RowKind::Verify, false, false};
    ref::TargetRow tail{BatchRow{3, 3, 2, 4, 2}, ref::RowKind::Verify, false, true};
    const auto c = ref::canonical_rows({pad, live, tail}, s);
    EXPECT_EQ(c[0].row.slot, kPadSlot);
    EXPECT_EQ(c[1].row.slot, 3);
    EXPECT_EQ(c[2].row.slot, kPadSlot);  // a tail row is PAD whatever its slot says
    EXPECT_EQ(c[2].row.write_slot, kPadSlot);
  }
  EXPECT_EQ(setup_with(PadConvention::PadSlot).pad_sentinel(), 5);
  EXPECT_EQ(setup_with(PadConvention::NullBlock).pad_sentinel(), 0);
}

TEST(GraphPaddingJson, CommandsAndRowsRoundTripStrictly) {
  const Cmd c = step({0, 1}, 2, 8, true, {1});
  EXPECT_EQ(Cmd::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_FALSE(step({0}, 1).to_json().contains("graph"));  // eager steps keep the 1.0 form
  auto j = c.to_json();
  j.erase("stale_tail");
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.stale_tail");
  j = c.to_json();
  j["graph"] = 0;
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.graph");
  j = c.to_json();
  j["stale_tail"] = 1;
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.stale_tail");

  ref::TargetRow live{BatchRow{3, 3, 2, 0, 0}, ref::RowKind::Verify, false, false};
  ref::TargetRow tail{BatchRow{1, 1, 2, 2, 2}, ref::RowKind::Verify, false, true};
  const auto rj = ref::rows_to_json({live, tail}, false);
  EXPECT_FALSE(rj[0].contains("graph_tail"));
  EXPECT_EQ(rj[1]["graph_tail"], true);
  EXPECT_TRUE(ref::rows_from_json(rj)[1].graph_tail);
  const auto swapped = ref::rows_to_json({tail, live}, false);
  EXPECT_EQ(field_of([&] { ref::rows_from_json(swapped); }), "rows[1].graph_tail");
}

TEST(GraphPaddingJson, SetupConventionRoundTripsAndIsOptional) {
  const auto s = setup_with(PadConvention::PadSlot);
  EXPECT_EQ(s.to_json()["pad_convention"], "pad_slot");
  EXPECT_FALSE(setup_with(PadConvention::MinusOne).to_json().contains("pad_convention"));
  const auto back = ref::EngineSetup::from_json(s.to_json(), s.params, s.poison);
  EXPECT_EQ(back.pad_convention, PadConvention::PadSlot);
  auto j = s.to_json();
  j["pad_convention"] = "zero";
  EXPECT_EQ(field_of([&] { ref::EngineSetup::from_json(j, s.params, s.poison); }), "setup.pad_convention");
}

TEST(GraphPaddingJson, FuzzCaseFilesCarryTheConventionAndCapTheCapture) {
  fuzz::FuzzCase c;
  c.setup = setup_with(PadConvention::NullBlock, 3);
  c.target = "replay";
  c.commands = {admit(0, 1), step({0}, 0, 4, true)};
  c.reason = "r";
  const auto back = fuzz::parse_fuzz_case(fuzz::fuzz_case_file(c));
  EXPECT_EQ(back.setup.pad_convention, PadConvention::NullBlock);
  EXPECT_EQ(back.commands[1].graph, 4);
  EXPECT_TRUE(back.commands[1].stale_tail);
  c.commands[1].graph = 3 + 8 + 1;  // over max_rows = num_slots + 8
  const std::string f = field_of([&] { fuzz::parse_fuzz_case(fuzz::fuzz_case_file(c)); });
  EXPECT_NE(f.find(".graph"), std::string::npos) << f;
}

// A captured step and another PAD convention export as a trace_version 1.1 trace: the stale tail rows stay
// graph_tail rows whose slots the trace expects unchanged, so the trace fails a target that commits the tail
// and passes the reference designs.
TEST(GraphPaddingJson, ExportingACapturedStepGivesA1_1TraceThatCatchesTheTail) {
  fuzz::FuzzCase c;
  c.setup = setup_with(PadConvention::MinusOne);
  c.target = "replay";
  c.commands = stale_tail_script();
  c.reason = "r";
  const std::string path = ::testing::TempDir() + "graph_padding_export.trace.safetensors";
  fuzz::export_trace(c, path, "test");
  EXPECT_EQ(load_fixture(path).extra_metadata.at("trace_version"), "1.1");
  const ref::Trace t = ref::load_trace(path);
  ASSERT_TRUE(ref::trace_has_graph_tail(t));
  EXPECT_TRUE(ref::replay_trace(t, *ref::make_target("replay")).ok);
  EXPECT_FALSE(ref::replay_trace(t, *ref::make_target("replay", Fault::GraphTailProcessed)).ok);
  c.setup = setup_with(PadConvention::NullBlock);
  fuzz::export_trace(c, path, "test");
  EXPECT_EQ(load_fixture(path).extra_metadata.at("pad_convention"), "null_block");
  EXPECT_TRUE(ref::replay_trace(ref::load_trace(path), *ref::make_target("ring")).ok);
  std::remove(path.c_str());
}

// H12, first part: an out-of-place commit writes write_slot and leaves the read slot bitwise unchanged; the
// request moves to write_slot when the commit writes (n > 0) and stays when it does not (n = 0).
namespace {
Cmd step_to(std::int32_t req, std::int32_t n, std::int32_t to_slot) {
  Cmd c = step({req}, n);
  c.rows[0].to_slot = to_slot;
  return c;
}
}  // namespace

TEST(OutOfPlace, TheRequestMovesAndTheReadSlotIsUntouched) {
  const std::vector<Cmd> cmds{admit(0, 1), admit(1, 4), step({0, 1}, 0), step_to(0, 2, 3), step_to(0, 0, 2),
                              step({1, 0}, 3), step_to(1, 3, 1)};
  for (const std::string t : {"replay", "full_state"})
    EXPECT_EQ(fuzz::replay_sequence(setup_with(PadConvention::MinusOne), t, Fault::None, cmds), "") << t;
  ref::Engine e(ref::make_target("full_state"), setup_with(PadConvention::MinusOne));
  for (std::size_t i = 0; i < 4; ++i) e.execute(cmds[i]);
  EXPECT_EQ(e.requests().at(0).slot, 3);
  EXPECT_EQ(e.last_written(), std::vector<std::int32_t>{3});
  EXPECT_EQ(e.last_read_only(), std::vector<std::int32_t>{1});
  EXPECT_TRUE(e.last_kept().empty());
  e.execute(cmds[4]);  // n = 0: nothing written, the request stays in slot 3
  EXPECT_EQ(e.requests().at(0).slot, 3);
}

TEST(OutOfPlace, ACommitThatAlsoWritesTheReadSlotIsCaught) {
  const std::vector<Cmd> cmds{admit(0, 1), step({0}, 0), step_to(0, 2, 3)};
  const std::string why =
      fuzz::replay_sequence(setup_with(PadConvention::MinusOne), "replay", Fault::CommitWritesReadSlot, cmds);
  EXPECT_NE(why.find("slot 1"), std::string::npos) << why;
  EXPECT_NE(why.find("only read it (out-of-place commit)"), std::string::npos) << why;
}

TEST(OutOfPlace, TheDestinationMustBeFreeAndTheRowAVerifyRow) {
  ref::Engine e(ref::make_target("full_state"), setup_with(PadConvention::MinusOne));
  e.execute(admit(0, 1));
  e.execute(admit(1, 2));
  EXPECT_EQ(field_of([&] { e.execute(step_to(0, 1, 3)); }), "cmd.rows.to_slot");  // still prefilling
  e.execute(step({0, 1}, 0));
  EXPECT_EQ(field_of([&] { e.execute(step_to(0, 1, 2)); }), "cmd.slot");  // slot 2 is in use
  EXPECT_EQ(field_of([&] { ref::Engine r(ref::make_target("ring"), setup_with(PadConvention::MinusOne));
                           r.execute(admit(0, 1)); r.execute(step({0}, 0)); r.execute(step_to(0, 1, 3)); }),
            "commit.write_slot");
  const Cmd c = step_to(0, 1, 3);
  EXPECT_EQ(Cmd::from_json(c.to_json()).rows[0].to_slot, 3);
  EXPECT_FALSE(step({0}, 1).to_json()["rows"][0].contains("to_slot"));
  auto j = c.to_json();
  j["rows"][0]["to_slot"] = -1;
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.rows[0].to_slot");
}
