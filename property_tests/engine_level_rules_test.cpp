// Pinned engine-level rules, event by event: the stop token and the max_new cap in one accepted run (which
// wins, how many tokens are committed); a next-step commit really is deferred (the pool keeps its bytes until
// the next step, while the committed-state query already answers the logical state); ping-pong buffers commit
// out of place and flip; a fork copies (its slot differs from the donor's).
#include <gtest/gtest.h>

#include <cstring>

#include "engine_level.hpp"

using namespace replayssm;
namespace el = ref::engine_level;

namespace {
el::EngineLevelSetup tiny(el::CommitMode c, el::Buffering b) {
  auto cfg = preset("tiny-gdn");
  cfg.num_layers = 1;
  return el::make_engine_level_setup(cfg, 11, 3, 4, el::EngineOptions{3, c, b});
}
el::Event admit(std::int32_t req, std::int32_t prompt, std::int32_t max_new) {
  el::Event e;
  e.kind = el::Event::Kind::Admit;
  e.req = req;
  e.prompt = prompt;
  e.max_new = max_new;
  e.seed = 100 + static_cast<std::uint64_t>(req);
  return e;
}
el::Event step(std::vector<el::StepEntry> entries) {
  el::Event e;
  e.kind = el::Event::Kind::Step;
  e.entries = std::move(entries);
  return e;
}
el::StepEntry verify(std::int32_t req, std::int32_t T, std::int32_t accepted, std::int32_t eog_at = 0) {
  return el::StepEntry{req, T, accepted, eog_at, 7 + static_cast<std::uint64_t>(req)};
}
}  // namespace

TEST(EngineLevelRules, StopTokenAndCapInOneRunTheEarlierWins) {
  struct Case {
    std::int32_t max_new, accepted, eog_at, committed;
  };
  // (budget, accepted run, stop token position) -> generated tokens committed; the request ends in every case.
  for (const Case k : {Case{2, 4, 3, 2}, Case{3, 4, 1, 1}, Case{3, 4, 3, 3}, Case{5, 4, 4, 4}, Case{1, 0, 0, 0}}) {
    el::EngineJudge judge(tiny(el::CommitMode::SameIteration, el::Buffering::InPlace), el::make_request_engine("reference"));
    ASSERT_EQ(judge.apply(admit(0, 2, k.max_new)), "");
    ASSERT_EQ(judge.apply(step({verify(0, 4, 0)})), "");  // the 2-token prompt
    ASSERT_EQ(judge.apply(step({verify(0, 4, k.accepted, k.eog_at)})), "");
    const auto& r = judge.truth().requests().at(0).status;
    EXPECT_EQ(r.generated, k.committed) << "max_new " << k.max_new << " accepted " << k.accepted << " eog_at " << k.eog_at;
    EXPECT_EQ(r.committed, 2 + k.committed);
    const bool ends = k.eog_at > 0 || k.accepted >= k.max_new;
    EXPECT_EQ(r.status, ends ? el::Status::Finished : el::Status::Running);
    // The engine agrees (the judge checked its table); the fault that ignores the stop token at the cap does not.
    el::EngineJudge faulty(tiny(el::CommitMode::SameIteration, el::Buffering::InPlace),
                           el::make_request_engine("reference", el::EngineFault::StopTokenIgnoredAtCap));
    ASSERT_EQ(faulty.apply(admit(0, 2, k.max_new)), "");
    ASSERT_EQ(faulty.apply(step({verify(0, 4, 0)})), "");
    const bool differs = k.eog_at > 0 && k.eog_at < k.max_new && k.accepted >= k.max_new;
    EXPECT_EQ(faulty.apply(step({verify(0, 4, k.accepted, k.eog_at)})).empty(), !differs);
  }
}

TEST(EngineLevelRules, NextStepCommitIsDeferredAndTheQueryDoesNotResolveIt) {
  const auto setup = tiny(el::CommitMode::NextStep, el::Buffering::InPlace);
  auto engine = el::make_request_engine("reference");
  el::RequestTruth truth(setup);
  engine->setup(setup);
  auto run = [&](const el::Event& e) {
    const auto windows = truth.step_windows(e);
    truth.apply(e);
    if (e.kind == el::Event::Kind::Admit) engine->admit(e.req, truth.prompt_inputs(e), e.max_new);
    if (e.kind == el::Event::Kind::Step) engine->step(e.entries, windows);
  };
  run(admit(0, 3, 10));
  run(step({verify(0, 4, 0)}));  // prefill: committed in the step in both modes
  const std::int32_t slot = engine->slot_map().at(0).at(0);
  const auto before = engine->pool(0);
  run(step({verify(0, 4, 3)}));  // verify, 3 accepted: deferred
  const auto after = engine->pool(0);
  const std::int64_t E = setup.base.cfg.state_elems(), stride = setup.base.pool_geometry().stride(setup.base.cfg);
  EXPECT_EQ(std::memcmp(before.data() + slot * stride, after.data() + slot * stride, E * sizeof(float)), 0)
      << "a next-step commit landed in its own step";
  EXPECT_EQ(engine->requests().at(0).committed, 6);  // the pending commit counts
  EXPECT_EQ(engine->committed_state(0, 0), truth.requests().at(0).state[0]);
  EXPECT_EQ(std::memcmp(after.data(), engine->pool(0).data(), after.size() * sizeof(float)), 0)
      << "the committed-state query resolved the deferred commit";
  run(step({verify(0, 1, 0)}));  // the next step lands it first
  const auto landed = engine->pool(0);
  EXPECT_TRUE(std::equal(landed.begin() + slot * stride, landed.begin() + slot * stride + E,
                         truth.requests().at(0).state[0].begin()));
}

TEST(EngineLevelRules, DoubleBuffersCommitOutOfPlaceAndForksCopy) {
  const auto setup = tiny(el::CommitMode::SameIteration, el::Buffering::Double);
  el::EngineJudge judge(setup, el::make_request_engine("reference"));
  ASSERT_EQ(judge.apply(admit(0, 2, 10)), "");
  const auto pair = judge.sut().slot_map().at(0);
  ASSERT_EQ(pair.size(), 2u);
  ASSERT_EQ(judge.apply(step({verify(0, 4, 0)})), "");  // prefill reads buffer 0, writes buffer 1
  const std::int64_t stride = setup.base.pool_geometry().stride(setup.base.cfg);
  const auto pool = judge.sut().pool(0);
  const auto& want = judge.truth().requests().at(0).state[0];
  EXPECT_TRUE(std::equal(want.begin(), want.end(), pool.begin() + pair[1] * stride));
  EXPECT_FALSE(std::equal(want.begin(), want.end(), pool.begin() + pair[0] * stride));
  el::Event fork;
  fork.kind = el::Event::Kind::Fork;
  fork.req = 1;
  fork.from = 0;
  ASSERT_EQ(judge.apply(fork), "");
  const auto forked = judge.sut().slot_map().at(1);
  for (auto s : forked)
    for (auto d : pair) EXPECT_NE(s, d) << "a fork shares its donor's slot";
  ASSERT_EQ(judge.apply(step({verify(1, 3, 2), verify(0, 2, 1)})), "");
}
