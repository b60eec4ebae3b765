// The kernel-level count rules, pinned by hand (docs/lifecycle.md, "Commands"): an early stop at accepted token s
// commits exactly s tokens and ends the request; a verify row's accepted count belongs to its own request, wherever
// PAD rows sit around it and in whatever order the rows come. The expected counts are written here, not computed by
// the engine or by the generator's bookkeeping model, so one slip made in both (the judge compares them with each
// other) still fails: both are checked against these numbers.
#include <gtest/gtest.h>

#include <map>

#include "lifecycle.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/testing/lifecycle_cmds.hpp"

using namespace replayssm;

namespace {

using replayssm::testing::admit;
using replayssm::testing::row;

ref::Cmd step(std::vector<ref::RowSpec> rows, std::vector<std::int32_t> pad_at = {}) {
  return replayssm::testing::step(std::move(rows), std::move(pad_at));
}

struct Want {
  int committed;
  bool finished;
};

// Runs the commands through the engine (the oracle's) and the generator's model, and checks both against `want`
// after the last command.
void expect_counts(const std::vector<ref::Cmd>& cmds, const std::map<int, Want>& want) {
  const auto setup = ref::make_setup(preset("tiny-gdn"), 5, 4, 6);
  ref::Engine engine(ref::make_target("full_state"), setup);
  fuzz::LifecycleModel model;
  model.num_slots = setup.num_slots;
  model.max_T = setup.max_T;
  for (const auto& c : cmds) {
    engine.execute(c);
    model.apply(c);
  }
  for (const auto& [id, w] : want) {
    const auto& r = engine.requests().at(id);
    EXPECT_EQ(r.history[0].T, w.committed) << "engine: request " << id;
    EXPECT_EQ(r.finished, w.finished) << "engine: request " << id;
    const auto& m = model.reqs.at(id);
    EXPECT_EQ(m.committed, w.committed) << "model: request " << id;
    EXPECT_EQ(m.status == fuzz::ModelRequest::Status::Finished, w.finished) << "model: request " << id;
  }
}

}  // namespace

TEST(CountRules, AnEarlyStopAtSCommitsExactlySAndEndsTheRequest) {
  // 3 prompt tokens, then a window of 4 with 3 accepted and the stop token at accepted token 2: 3 + 2 = 5.
  expect_counts({admit(0, 0, 3), step({row(0, 3, 3)}), step({row(0, 4, 3, 2)})}, {{0, {5, true}}});
  // The stop token as the last accepted token: 3 + 3.
  expect_counts({admit(0, 0, 3), step({row(0, 3, 3)}), step({row(0, 4, 3, 3)})}, {{0, {6, true}}});
  // The stop token as the first: 3 + 1.
  expect_counts({admit(0, 0, 3), step({row(0, 3, 3)}), step({row(0, 5, 5, 1)})}, {{0, {4, true}}});
  // No stop: every accepted token, the request running.
  expect_counts({admit(0, 0, 3), step({row(0, 3, 3)}), step({row(0, 4, 3)})}, {{0, {6, false}}});
}

TEST(CountRules, AnAcceptedCountBelongsToItsRequestWhateverThePadRowsAround) {
  const std::vector<ref::Cmd> prefill{admit(0, 0, 2), admit(1, 2, 1), step({row(0, 2, 2), row(1, 1, 1)})};
  // req 0: 2 + 1, req 1: 1 + 4; the same counts with PAD rows before, between and after, and in the other order.
  for (const auto& pads : std::vector<std::vector<std::int32_t>>{{}, {0}, {1}, {2}, {0, 1, 2}, {1, 1}}) {
    auto a = prefill;
    a.push_back(step({row(0, 4, 1), row(1, 4, 4)}, pads));
    expect_counts(a, {{0, {3, false}}, {1, {5, false}}});
    auto b = prefill;
    b.push_back(step({row(1, 4, 4), row(0, 4, 1)}, pads));
    expect_counts(b, {{0, {3, false}}, {1, {5, false}}});
  }
  // n = 0 next to a full accept: nothing for the first, everything for the second.
  auto c = prefill;
  c.push_back(step({row(0, 3, 0), row(1, 3, 3)}, {1}));
  expect_counts(c, {{0, {2, false}}, {1, {4, false}}});
}
