// Captured buckets replayed (protocol 1.9, Cmd::replay_T): a bucket captured while requests are live, then
// replayed with other slots, live row counts, accepted counts, PAD rows and tails. Every reference target passes
// the script; each graph replay fault of the catalogue fails it at the first replay that changes the value it
// kept, and passes a script whose replays never change it (the replays are what shows it). The engine refuses
// a replay of a bucket never captured, a row of another width and a prefill chunk; commands round-trip through
// JSON; a campaign's coverage counts the replays.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "lifecycle.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using ref::Cmd;
using ref::Fault;
using replayssm::testing::field_of;

namespace {
constexpr std::int32_t kW = 3;  // the bucket's window (max_T of the setup)

ref::EngineSetup setup_with(ref::PadConvention c) {
  auto s = ref::make_setup(preset("tiny-gdn"), 23, 6, kW);
  s.pad_convention = c;
  return s;
}
Cmd admit(std::int32_t req, std::int32_t slot) {
  Cmd c;
  c.kind = Cmd::Kind::Admit;
  c.req = req;
  c.slot = slot;
  c.prompt = 2;
  c.seed = 300 + static_cast<std::uint64_t>(req);
  return c;
}
Cmd capture(std::int32_t rows, std::int32_t T) {
  Cmd c;
  c.kind = Cmd::Kind::Capture;
  c.graph = rows;
  c.capture_T = T;
  return c;
}
// A step of (request, accepted) rows, kW wide; replay: it replays the bucket (graph, kW).
Cmd step(const std::vector<std::pair<std::int32_t, std::int32_t>>& rows, std::int32_t graph, bool replay,
         std::uint64_t seed, std::vector<std::int32_t> pad_at = {}) {
  Cmd c;
  c.kind = Cmd::Kind::Step;
  for (const auto& [req, n] : rows) c.rows.push_back(ref::RowSpec{req, kW, n, 0, seed + static_cast<std::uint64_t>(req)});
  c.pad_at = std::move(pad_at);
  c.graph = graph;
  c.stale_tail = graph > 0;
  c.replay_T = replay ? kW : 0;
  return c;
}

// Four requests prefilled, a bucket of 4 rows captured while they are live, then replays: the first with two
// rows (slots 3, 1), the second with three other rows and other counts (command 7), the third back to two rows.
std::vector<Cmd> script() {
  return {admit(0, 3),
          admit(1, 1),
          admit(2, 4),
          admit(3, 2),
          step({{0, 0}, {1, 0}, {2, 0}, {3, 0}}, 0, false, 10),  // prefill chunks (2 tokens each)
          capture(4, kW),
          step({{0, 2}, {1, 2}}, 4, true, 20),                     // the bucket's first replay
          step({{2, 1}, {3, 3}, {0, 0}}, 4, true, 30, {3}),        // other slots, live rows, counts; a PAD row
          step({{1, 3}, {0, 1}}, 4, true, 40)};
}
// Replays that change nothing a graph could keep: the same two requests in the same order, the same counts.
std::vector<Cmd> unchanging_script() {
  auto s = script();
  s[7] = step({{0, 2}, {1, 2}}, 4, true, 30);
  s[8] = step({{0, 2}, {1, 2}}, 4, true, 40);
  return s;
}
}  // namespace

TEST(GraphReplay, EveryReferenceTargetPassesTheReplays) {
  for (auto conv : ref::all_pad_conventions())
    for (const std::string t : {"replay", "ring", "full_state"})
      EXPECT_EQ(fuzz::replay_sequence(setup_with(conv), t, Fault::None, script()), "") << t << " / " << to_string(conv);
}

TEST(GraphReplay, EachGraphReplayFaultFailsAtTheReplayThatChangesWhatItKept) {
  int faults = 0;
  for (auto f : ref::all_faults()) {
    if (!ref::graph_replay_fault(f)) continue;
    ++faults;
    std::size_t at = 0;
    const std::string why = fuzz::replay_sequence(setup_with(ref::PadConvention::MinusOne), "replay", f, script(), {}, &at);
    EXPECT_FALSE(why.empty()) << ref::to_string(f) << " passed the replays";
    EXPECT_EQ(at, 7u) << ref::to_string(f) << ": " << why;  // the second replay, the first to change anything
    // Dormant while the replays change nothing it kept: the fault lives in the replays only.
    EXPECT_EQ(fuzz::replay_sequence(setup_with(ref::PadConvention::MinusOne), "replay", f, unchanging_script()), "")
        << ref::to_string(f);
  }
  EXPECT_EQ(faults, 3);
}

TEST(GraphReplay, TheEngineRefusesAReplayItCannotMake) {
  auto run = [](std::vector<Cmd> cmds) {
    ref::Engine e(ref::make_target("replay"), setup_with(ref::PadConvention::MinusOne));
    return field_of([&] {
      for (const auto& c : cmds) e.execute(c);
    });
  };
  auto s = script();
  EXPECT_EQ(run(s), "<no error>");
  auto uncaptured = s;
  uncaptured[5] = capture(2, kW);  // another bucket: the replays' (4, kW) was never captured
  EXPECT_EQ(run(uncaptured), "cmd.replay_T");
  auto narrow = s;
  narrow[6].rows[1].T = 2;
  EXPECT_EQ(run(narrow), "cmd.rows.T");
  auto prefill = s;
  prefill.erase(prefill.begin() + 4);  // nobody prefilled: the replay's rows are prefill chunks
  EXPECT_EQ(run(prefill), "cmd.rows");
  auto too_many = s;
  too_many[7].pad_at = {0, 1};  // 3 rows and 2 PAD rows in a bucket of 4
  EXPECT_EQ(run(too_many), "cmd.graph");
}

TEST(GraphReplay, AReplayRoundTripsThroughJsonAndAnEagerOneIsRefused) {
  const Cmd c = script()[7];
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(j.at("replay_T"), kW);
  const Cmd back = Cmd::from_json(j);
  EXPECT_EQ(back.replay_T, kW);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_NE(c.str().find("replays rows=4 T=3"), std::string::npos) << c.str();
  nlohmann::json eager = script()[4].to_json();
  eager["replay_T"] = kW;
  EXPECT_EQ(field_of([&] { Cmd::from_json(eager); }), "cmd.replay_T");
  nlohmann::json zero = j;
  zero["replay_T"] = 0;
  EXPECT_EQ(field_of([&] { Cmd::from_json(zero); }), "cmd.replay_T");
}

// A default campaign on a target that claims graph replay replays captured buckets, some of them with other slots,
// another live row count and other accepted counts than the bucket's first replay; its coverage JSON carries the
// counts.
TEST(GraphReplay, ACampaignReplaysBucketsWithOtherSlotsLiveRowsAndCounts) {
  fuzz::FuzzOptions o;
  o.target = "replay";
  o.cfg = preset("tiny-gdn");
  o.seed = 5;
  o.cases = 30;
  o.dump_dir = ::testing::TempDir() + "graph_replay_" + std::to_string(::getpid());
  const auto r = fuzz::run_fuzz(o, nullptr);
  ASSERT_FALSE(r.failed) << r.reason;
  const auto& w = r.coverage.work;
  EXPECT_GT(w.graph_replays, 0);
  EXPECT_GT(w.replays_other_slots, 0);
  EXPECT_GT(w.replays_other_live_rows, 0);
  EXPECT_GT(w.replays_other_accepted, 0);
  const auto j = r.coverage.to_json();
  EXPECT_EQ(j.at("graph_replays").at("replays"), w.graph_replays);
  EXPECT_EQ(fuzz::Coverage::from_json(j).work.replays_other_accepted, w.replays_other_accepted);
}
