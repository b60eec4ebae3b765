// Incremental positions equal from-scratch positions after any engine schedule.
//
// Model: the token accounting of a request (prompt description, prompt_len, seq_len, num_computed,
// finished). System under test: PositionTracker, which computes positions from its walk cursor. After every
// command the positions the tracker fed and its history of computed positions must equal a PromptPlan built
// from scratch on the model's current prompt; the accounting must match the model's.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>

#include "mrope_gen.hpp"

namespace {

using namespace mrope_prop;

struct Model {
  Preset preset;
  Request request;
  std::int64_t prompt_len = 0, seq_len = 0, computed = 0;
  bool finished = false;
};

struct Sut {
  PositionTracker tr;
};

using Cmd = rc::state::Command<Model, Sut>;

std::vector<Pos3> scratch(const Model& m, std::int64_t begin, std::int64_t count) {
  return PromptPlan(m.preset, m.request).positions(begin, count);
}

// Accounting and history after a command, against the model after the same command.
void check_state(const Model& after, const Sut& s) {
  RC_ASSERT(s.tr.prompt_len() == after.prompt_len);
  RC_ASSERT(s.tr.seq_len() == after.seq_len);
  RC_ASSERT(s.tr.num_computed() == after.computed);
  RC_ASSERT(s.tr.finished() == after.finished);
  RC_ASSERT(s.tr.history() == scratch(after, 0, after.computed));
}

Model applied(const Model& before, const Cmd& c) {
  Model m = before;
  c.apply(m);
  return m;
}

struct Prefill : Cmd {
  std::int64_t count = 1;
  explicit Prefill(const Model& m) {
    RC_PRE(!m.finished && m.seq_len > m.computed);
    // Small chunks are likely, so chunk boundaries often fall inside vision items.
    const std::int64_t room = m.seq_len - m.computed;
    count = *rc::gen::weightedOneOf<std::int64_t>(
        {{2, rc::gen::inRange<std::int64_t>(1, std::min<std::int64_t>(room, 4) + 1)},
         {1, rc::gen::inRange<std::int64_t>(1, room + 1)},
         {1, rc::gen::just(room)}});
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(!m.finished && count >= 1 && count <= m.seq_len - m.computed);
  }
  void apply(Model& m) const override {
    m.computed += count;
    if (m.computed == m.seq_len) ++m.seq_len;
  }
  void run(const Model& m, Sut& s) const override {
    const Window w = s.tr.prefill(count);
    const Model after = applied(m, *this);
    RC_ASSERT(w.begin == m.computed);
    RC_ASSERT(w.pos == scratch(after, m.computed, count));
    check_state(after, s);
  }
  void show(std::ostream& os) const override { os << "prefill(" << count << ")"; }
};

struct Verify : Cmd {
  std::int64_t T = 1, accepted = 1;
  explicit Verify(const Model& m) {
    RC_PRE(!m.finished && m.computed >= m.prompt_len && m.computed == m.seq_len - 1);
    T = *rc::gen::inRange<std::int64_t>(1, 8);
    accepted = *rc::gen::inRange<std::int64_t>(1, T + 1);
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(!m.finished && m.computed >= m.prompt_len && m.computed == m.seq_len - 1);
  }
  void apply(Model& m) const override {
    m.computed += accepted;
    m.seq_len = m.computed + 1;
  }
  void run(const Model& m, Sut& s) const override {
    const Window w = s.tr.verify(T, accepted);
    const Model after = applied(m, *this);
    // The window covers [num_computed, num_computed + T): KV slots are absolute indices.
    RC_ASSERT(w.begin == m.computed);
    RC_ASSERT(w.pos == scratch(after, m.computed, T));
    const PromptPlan plan(after.preset, after.request);
    for (std::size_t i = 0; i < w.pos.size(); ++i) {
      RC_ASSERT(w.pos[i] == text_position(w.slot(i), plan.delta()));
    }
    check_state(after, s);
  }
  void show(std::ostream& os) const override { os << "verify(T=" << T << ", accepted=" << accepted << ")"; }
};

struct Draft : Cmd {
  std::int64_t steps = 1;
  explicit Draft(const Model& m) {
    RC_PRE(m.computed >= m.prompt_len);
    steps = *rc::gen::inRange<std::int64_t>(0, 6);
  }
  void checkPreconditions(const Model& m) const override { RC_PRE(m.computed >= m.prompt_len); }
  void apply(Model&) const override {}
  void run(const Model& m, Sut& s) const override {
    const Window w = s.tr.draft(steps);
    RC_ASSERT(w.begin == m.computed);
    RC_ASSERT(w.pos == scratch(m, m.computed, steps));
    // Once the last computed token is generated text, draft j is the last accepted position + j.
    if (m.computed > m.prompt_len) {
      const Pos3 last = scratch(m, m.computed - 1, 1)[0];
      for (std::int64_t j = 1; j <= steps; ++j) {
        RC_ASSERT(w.pos[static_cast<std::size_t>(j - 1)] == (Pos3{last[0] + j, last[1] + j, last[2] + j}));
      }
    }
    check_state(m, s);
  }
  void show(std::ostream& os) const override { os << "draft(" << steps << ")"; }
};

struct Stop : Cmd {
  std::int64_t keep = 1;
  explicit Stop(const Model& m) {
    RC_PRE(!m.finished && m.seq_len > m.prompt_len);
    RC_PRE(*rc::gen::inRange(0, 2) == 0);  // let most turns run a few spec steps first
    keep = *rc::gen::inRange<std::int64_t>(m.prompt_len + 1, m.seq_len + 1);
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(!m.finished && keep > m.prompt_len && keep <= m.seq_len);
  }
  void apply(Model& m) const override {
    m.seq_len = keep;
    m.computed = std::min(m.computed, keep);
    m.finished = true;
  }
  void run(const Model& m, Sut& s) const override {
    s.tr.stop(keep);
    check_state(applied(m, *this), s);
  }
  void show(std::ostream& os) const override { os << "stop(keep=" << keep << ")"; }
};

struct Restart : Cmd {
  std::int64_t step = 0;
  explicit Restart(const Model& m) {
    RC_PRE(!m.finished);
    RC_PRE(*rc::gen::inRange(0, 4) == 0);  // valid in almost every state: keep it from dominating schedules
    // Preemption (0) or a prefix-cache restart at any computed step.
    step = *rc::gen::weightedOneOf<std::int64_t>(
        {{1, rc::gen::just<std::int64_t>(0)}, {2, rc::gen::inRange<std::int64_t>(0, m.computed + 1)}});
  }
  void checkPreconditions(const Model& m) const override { RC_PRE(!m.finished && step <= m.computed); }
  void apply(Model& m) const override { m.computed = step; }
  void run(const Model& m, Sut& s) const override {
    s.tr.restart_from(step);
    check_state(applied(m, *this), s);
  }
  void show(std::ostream& os) const override { os << "restart_from(" << step << ")"; }
};

struct Continue : Cmd {
  std::vector<Segment> turn;
  explicit Continue(const Model& m) {
    RC_PRE(m.finished);
    turn = *genSegments(m.preset, 1, 3);
  }
  void checkPreconditions(const Model& m) const override { RC_PRE(m.finished); }
  void apply(Model& m) const override {
    const std::int64_t generated = m.seq_len - m.prompt_len;
    if (generated > 0) m.request.segments.push_back(Segment::text(generated));
    m.request.segments.insert(m.request.segments.end(), turn.begin(), turn.end());
    m.prompt_len = m.seq_len + count_tokens(m.preset, turn);
    m.seq_len = m.prompt_len;
    m.finished = false;
  }
  void run(const Model& m, Sut& s) const override {
    s.tr.continue_turn(turn);
    const Model after = applied(m, *this);
    // Committed tokens keep their positions when a turn is appended.
    RC_ASSERT(scratch(after, 0, m.seq_len) == scratch(m, 0, m.seq_len));
    check_state(after, s);
  }
  void show(std::ostream& os) const override { os << "continue_turn(" << turn.size() << " segments)"; }
};

RC_GTEST_PROP(MropeTrackerProperties, IncrementalEqualsFromScratch, ()) {
  const Preset preset = get_preset(*genPresetName());
  const std::vector<Segment> prompt = *genSegments(preset, 1, 6);
  Model m;
  m.preset = preset;
  m.request = Request{prompt};
  m.prompt_len = count_tokens(preset, prompt);
  m.seq_len = m.prompt_len;
  Sut s{PositionTracker(preset, m.request)};
  rc::state::check(m, s, rc::state::gen::execOneOfWithArgs<Prefill, Verify, Draft, Stop, Restart, Continue>());
}

}  // namespace
