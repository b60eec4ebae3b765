// Prefix snapshots and migration, pinned event by event on both engine designs (raw-payload replay and spec
// ring): the track step rule (the snapshot sits at the last block boundary a committed call crossed, with the
// state at exactly that boundary; rejected drafts never count), the ring's forced flush into the snapshot, a
// hit restoring into a private slot with an empty ring, and a migration that moves every ring record. One
// fixed sequence passes on the correct engines under both commit modes, and each snapshot / migration fault
// of the catalogue fails it at the check it names.
#include <gtest/gtest.h>

#include "engine_level.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;
namespace el = ref::engine_level;

namespace {
constexpr std::int32_t kBlock = 4;

el::EngineLevelSetup tiny(el::CommitMode c) {
  auto cfg = preset("tiny-gdn");
  cfg.num_layers = 2;
  cfg.state_dtype = DType::F32;  // the ring is bit-exact against the truth with an F32 state
  return el::make_engine_level_setup(cfg, 23, 2, 4, el::EngineOptions{2, c, el::Buffering::InPlace, kBlock});
}
el::Event make(el::Event::Kind k, std::int32_t req, std::int32_t from = 0, std::int32_t prompt = 0,
               std::int32_t max_new = 0) {
  el::Event e;
  e.kind = k;
  e.req = req;
  e.from = from;
  e.prompt = prompt;
  e.max_new = max_new;
  e.seed = 300 + static_cast<std::uint64_t>(req);
  return e;
}
el::Event step(std::vector<el::StepEntry> entries) {
  el::Event e;
  e.kind = el::Event::Kind::Step;
  e.entries = std::move(entries);
  return e;
}
el::StepEntry entry(std::int32_t req, std::int32_t T, std::int32_t accepted, std::uint64_t seed) {
  return el::StepEntry{req, T, accepted, 0, seed};
}

// Ring geometry of make_setup: B = max_T + 2 = 6, T = 4, L = 10: is_flush once write_pos + 8 > 10.
std::vector<el::Event> sequence() {
  using K = el::Event::Kind;
  return {
      make(K::Admit, 0, 0, 3, 16),
      step({entry(0, 4, 0, 1)}),  // prefill 3: committed 3, no boundary
      step({entry(0, 4, 3, 2)}),  // 3 -> 6 crosses 4: the snapshot is the state after token 4, not 6
      step({entry(0, 4, 1, 3)}),  // 6 -> 7 (a flush step); the window reaches 10 but its drafts past 7 are rejected
      make(K::SnapshotHit, 1, 0, 2, 4),  // req 1: req 0's first 4 tokens, restored, then 2 prompt tokens
      step({entry(1, 4, 0, 4), entry(0, 2, 1, 5)}),  // req 1 prefills 4 -> 6 (crosses nothing new); req 0 7 -> 8
      make(K::Migrate, 0),                           // req 0 moves with its live records
      step({entry(0, 3, 3, 6), entry(1, 2, 2, 7)}),  // 8 -> 11, 6 -> 8 (crosses 8)
  };
}

std::string run(const std::string& engine, el::EngineFault f, el::CommitMode c) {
  const auto s = tiny(c);
  return fuzz::replay_events(s, engine, f, sequence(), {s.options});
}
}  // namespace

TEST(EngineLevelSnapshots, BothDesignsPassThePinnedSequence) {
  for (auto c : {el::CommitMode::SameIteration, el::CommitMode::NextStep})
    for (const char* engine : {"reference", "ring"})
      EXPECT_EQ(run(engine, el::EngineFault::None, c), "") << engine << " " << el::to_string(c);
}

TEST(EngineLevelSnapshots, EachSnapshotAndMigrationFaultFailsIt) {
  struct Want {
    const char* engine;
    el::EngineFault fault;
    const char* says;  // the check that must name it
  };
  const Want wants[] = {
      {"reference", el::EngineFault::SnapshotAtRunEnd, "prefix snapshot at 4 tokens differs"},
      {"reference", el::EngineFault::SnapshotCountsRejectedDrafts, "prefix snapshot is at 8 tokens"},
      {"ring", el::EngineFault::SnapshotWithoutFlush, "prefix snapshot at 4 tokens differs"},
      {"ring", el::EngineFault::CowKeepsWritePos, "request 1 layer 0: committed state differs"},
      {"ring", el::EngineFault::MigrationDropsRingRecords, "request 0 layer 0: committed state differs"},
  };
  for (auto c : {el::CommitMode::SameIteration, el::CommitMode::NextStep})
    for (const auto& w : wants) {
      const std::string why = run(w.engine, w.fault, c);
      EXPECT_NE(why.find(w.says), std::string::npos)
          << w.engine << " with " << el::to_string(w.fault) << " (" << el::to_string(c) << "): expected a failure saying '"
          << w.says << "', got: " << (why.empty() ? "(passed)" : why);
    }
}

// A fault the spec-ring engine does not carry would leave it correct and the campaign green ("ok" for a fault
// run): `engine:ring` refuses it, naming `fault`; under `engine:reference` the ring engines in lock step run
// without it.
TEST(EngineLevelSnapshots, RingEngineRefusesTheReferenceEnginesFaults) {
  int refused = 0;
  for (const el::EngineFault f : el::all_engine_faults()) {
    if (el::ring_engine_has_fault(f)) {
      EXPECT_NO_THROW(el::make_request_engine("ring", f)) << el::to_string(f);
      continue;
    }
    try {
      el::make_request_engine("ring", f);
      ADD_FAILURE() << "engine:ring accepted " << el::to_string(f);
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "fault") << e.what();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 8);
}

TEST(EngineLevelSnapshots, RingEngineRefusesDoubleBuffersAndSnapshotlessEnginesRefuseABlock) {
  auto s = tiny(el::CommitMode::SameIteration);
  s.options.buffers = el::Buffering::Double;
  auto ring = el::make_request_engine("ring");
  try {
    ring->setup(s);
    ADD_FAILURE() << "the ring engine accepted double buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "options.buffers") << e.what();
  }
  // snapshot_hit without a block is an invalid event for the truth, named by its field.
  auto t = tiny(el::CommitMode::SameIteration);
  t.options.block = 0;
  el::RequestTruth truth(t);
  truth.apply(make(el::Event::Kind::Admit, 0, 0, 3, 4));
  try {
    truth.apply(make(el::Event::Kind::SnapshotHit, 1, 0, 2, 4));
    ADD_FAILURE() << "a snapshot_hit was accepted without prefix snapshots";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "event.kind") << e.what();
  }
}
