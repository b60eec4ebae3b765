// What one step may mix (ref::StepMix, protocol 1.7): its JSON form, the engine's refusal of a step that mixes
// more than the setup allows (naming the field), the PAD and graph tail rows a narrowed step gets (one width
// per step, a stale tail from the last captured step of that width), the generator forming only such steps
// while still varying them, and the coverage requirement that a target allowing a mix sees it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <unistd.h>

#include "coverage.hpp"
#include "lifecycle.hpp"
#include "trace_gen.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/testing/field_of.hpp"
#include "replayssm/testing/lifecycle_cmds.hpp"

using namespace replayssm;
using ref::Cmd;
using ref::StepMix;

namespace {

using replayssm::testing::admit;
using replayssm::testing::row;
using replayssm::testing::step;

ref::EngineSetup setup_with(StepMix mix) {
  auto s = ref::make_setup(preset("tiny-gdn"), 5, 6, 6);
  s.step_mix = mix;
  return s;
}
std::string field_of(ref::Engine& e, const Cmd& c) {
  return replayssm::testing::field_of([&] { e.execute(c); });
}

}  // namespace

TEST(StepMix, JsonRoundTripsAndRefusesUnknownKeysAndNonBooleans) {
  const StepMix m{true, false};
  EXPECT_EQ(StepMix::from_json(m.to_json(), "f"), m);
  EXPECT_EQ(StepMix::from_json(nlohmann::json::object(), "f"), StepMix{});
  auto field = [](const nlohmann::json& j) {
    return replayssm::testing::field_of([&] { (void)StepMix::from_json(j, "setup.step_mix"); });
  };
  EXPECT_EQ(field(nlohmann::json{{"one_width", 1}}), "setup.step_mix.one_width");
  EXPECT_EQ(field(nlohmann::json{{"widths", true}}), "setup.step_mix.widths");
  EXPECT_EQ(field(nlohmann::json::array()), "setup.step_mix");
  EXPECT_EQ(StepMix{}.str(), "any");
  EXPECT_EQ((StepMix{true, true}).str(), "one_width+prefill_apart");

  // The setup carries step_mix only when it narrows the mix, and reads it back.
  auto s = setup_with({});
  EXPECT_FALSE(s.to_json().contains("step_mix"));
  s.step_mix = {false, true};
  const auto back = ref::EngineSetup::from_json(s.to_json(), s.params, s.poison);
  EXPECT_EQ(back.step_mix, s.step_mix);
}

TEST(StepMix, TheEngineRefusesAStepThatMixesMoreNamingTheField) {
  {
    ref::Engine e(ref::make_target("full_state"), setup_with({true, false}));
    e.execute(admit(0, 0, 3));
    e.execute(admit(1, 1, 5));
    EXPECT_EQ(field_of(e, step({row(0, 3), row(1, 2)})), "cmd.rows.T");  // chunks of 3 and 2
    e.execute(step({row(0, 3), row(1, 3)}));  // one width: both chunks 3 long
    e.execute(step({row(0, 2), row(1, 3)}));  // a verify row of 2 beside the last chunk, 2 long (min(3, pending))
    EXPECT_EQ(field_of(e, step({row(0, 1), row(1, 2)})), "cmd.rows.T");  // verify rows of 1 and 2
  }
  {
    ref::Engine e(ref::make_target("full_state"), setup_with({false, true}));
    e.execute(admit(0, 0, 2));
    e.execute(step({row(0, 2)}));  // prefilled: request 0 verifies from here on
    e.execute(admit(1, 1, 4));
    EXPECT_EQ(field_of(e, step({row(0, 2), row(1, 3)})), "cmd.rows");          // verify beside a prefill chunk
    EXPECT_EQ(field_of(e, step({row(1, 3)}, {0})), "cmd.pad_at");              // a padded prefill step
    EXPECT_EQ(field_of(e, step({row(1, 3)}, {}, 4, false)), "cmd.graph");      // a captured prefill step
    e.execute(step({row(0, 2)}, {0, 1}, 4, false));                           // a padded verify step
    e.execute(step({row(1, 3)}));                                             // a prefill step alone
  }
  {  // the default mix takes all of it
    ref::Engine e(ref::make_target("full_state"), setup_with({}));
    e.execute(admit(0, 0, 2));
    e.execute(step({row(0, 2)}));
    e.execute(admit(1, 1, 4));
    e.execute(step({row(0, 2), row(1, 3)}, {0}, 8, false));
  }
}

// Under one_width every PAD and graph tail row has the step's width, and a stale tail comes from the last
// captured step of the same width (a bucket is one width), never from a step of another width.
TEST(StepMix, PadAndGraphTailRowsTakeTheStepsWidth) {
  ref::Engine e(ref::make_target("full_state"), setup_with({true, false}));
  e.execute(admit(0, 0, 1));
  e.execute(admit(1, 1, 1));
  e.execute(admit(2, 2, 1));
  e.execute(step({row(0, 1), row(1, 1), row(2, 1)}));  // all prefilled
  e.execute(step({row(0, 4), row(1, 4), row(2, 4)}, {}, 8, false));  // a captured bucket of width 4, 3 live rows
  auto widths = [&] {
    std::set<std::int32_t> w;
    for (const auto& r : e.last_rows()) w.insert(r.T);
    return w;
  };
  EXPECT_EQ(widths(), (std::set<std::int32_t>{4}));
  e.execute(step({row(0, 2)}, {0, 1}, 8, true));  // width 2: PAD rows of 2, no buffer of width 2 yet
  EXPECT_EQ(widths(), (std::set<std::int32_t>{2}));
  int stale = 0;
  for (const auto& r : e.last_rows()) stale += r.stale_tail;
  EXPECT_EQ(stale, 0) << "a width-2 step took its stale tail from the width-4 bucket";
  e.execute(step({row(1, 4)}, {}, 8, true));  // width 4 again: rows 1 and 2 of the buffer are the stale slots
  EXPECT_EQ(widths(), (std::set<std::int32_t>{4}));
  stale = 0;
  for (const auto& r : e.last_rows()) stale += r.stale_tail;
  EXPECT_EQ(stale, 2);
}

namespace {
struct Seen {
  int steps = 0, multi = 0, prefill_steps = 0, padded = 0, graphs = 0;
  std::set<std::int32_t> widths;
};
// Every generated step, executed by an engine under the mix, mixes no more than the mix allows (the engine
// refuses it otherwise, and the rows it formed are checked here as well).
Seen run_generated(StepMix mix) {
  Seen seen;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const auto setup = [&] {
      auto s = ref::make_setup(preset("tiny-gdn"), seed, 6, 8);
      s.step_mix = mix;
      return s;
    }();
    ref::Engine e(ref::make_target("full_state"), setup);
    for (const auto& c : fuzz::generate_commands(6, 8, true, seed, 40, false, -1, setup.max_rows(), mix)) {
      e.execute(c);
      if (c.kind != Cmd::Kind::Step) continue;
      ++seen.steps;
      bool prefill = false, verify = false, pad = false;
      std::set<std::int32_t> w;
      int live = 0;
      for (const auto& r : e.last_rows()) {
        w.insert(r.T);
        if (r.req < 0) pad = true;
        else {
          ++live;
          (r.prefill ? prefill : verify) = true;
        }
      }
      if (mix.one_width) EXPECT_EQ(w.size(), 1u) << "seed " << seed << ": " << c.str();
      if (mix.prefill_apart) {
        EXPECT_FALSE(prefill && verify) << "seed " << seed << ": " << c.str();
        EXPECT_FALSE(prefill && pad) << "seed " << seed << ": " << c.str();
      }
      seen.multi += live >= 2;
      seen.prefill_steps += prefill;
      seen.padded += pad;
      seen.graphs += c.graph > 0;
      seen.widths.insert(w.begin(), w.end());
    }
  }
  return seen;
}
}  // namespace

// The narrowed generator still forms multi-row, prefill, padded and captured steps of many widths (a generator
// that fell back to lone T = 1 rows would pass the first test vacuously).
TEST(StepMix, TheGeneratorFormsOnlyAllowedStepsAndStillVariesThem) {
  for (const StepMix mix : {StepMix{true, false}, StepMix{false, true}, StepMix{true, true}}) {
    const Seen s = run_generated(mix);
    SCOPED_TRACE(mix.str());
    EXPECT_GT(s.steps, 300);
    EXPECT_GT(s.multi, 50);
    EXPECT_GT(s.prefill_steps, 30);
    EXPECT_GT(s.padded, 50);
    EXPECT_GT(s.graphs, 30);
    EXPECT_EQ(s.widths.size(), 8u);  // every width 1..max_T = 8
    std::cout << "[step mix] " << mix.str() << ": " << s.steps << " steps, " << s.multi << " multi-row, "
              << s.prefill_steps << " with prefill, " << s.padded << " padded, " << s.graphs << " captured\n";
  }
}

TEST(StepMix, ACoverageWithoutMixedStepsIsUnmetOnlyWhereTheMixIsAllowed) {
  fuzz::Coverage c;  // nothing mixed
  auto lines = [&](StepMix mix) {
    fuzz::Claim cl;
    cl.envelope.max_T = 4;
    cl.envelope.step_mix = mix;
    int n = 0;
    for (const auto& l : fuzz::unmet({cl}, c, {})) n += l.rfind("step mix:", 0) == 0;
    return n;
  };
  EXPECT_EQ(lines({}), 2);
  EXPECT_EQ(lines({true, false}), 1);
  EXPECT_EQ(lines({true, true}), 0);
  c.work.mixed_width_steps = 1;
  c.work.prefill_verify_steps = 1;
  EXPECT_EQ(lines({}), 0);
}

// The committed grouped traces (fixtures/traces/grouped/) are what the narrowed generator writes today, byte for
// byte: a change to the narrowed draws shows here and the traces are regenerated with it (commands in the test).
TEST(StepMix, TheGroupedTracesAreWhatTheGeneratorWrites) {
  const auto dir = std::filesystem::temp_directory_path() / ("replayssm_grouped_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::filesystem::path committed = std::filesystem::path(REPLAYSSM_SOURCE_DIR) / "fixtures" / "traces" / "grouped";
  int n = 0;
  for (const char* p : {"tiny-gdn", "tiny-kda"}) {
    fuzz::TraceSetOptions o;
    o.cfg = preset(p);
    o.cases = std::string(p) == "tiny-gdn" ? 3 : 2;
    o.max_commands = 50;
    o.num_slots = 4;
    o.max_T = 8;
    o.graph_padding = true;
    o.out_of_place = o.captures = std::string(p) == "tiny-gdn";
    o.step_mix = StepMix{true, true};
    o.name = "grouped";
    for (const auto& path : fuzz::write_trace_set(o, dir.string())) {
      const auto want = committed / std::filesystem::path(path).filename();
      auto bytes = [](const std::filesystem::path& f) {
        std::ifstream in(f, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
      };
      EXPECT_TRUE(std::filesystem::exists(want) && bytes(path) == bytes(want))
          << want << " differs: regenerate with replayssm fixtures generate --traces --preset " << p
          << " --step-mix both --graph-padding" << (o.captures ? " --captures --out-of-place" : "")
          << " --slots 4 --max-T 8 --max-commands 50 --cases " << o.cases << " --name grouped --out fixtures/traces/grouped";
      ++n;
    }
  }
  EXPECT_EQ(n, 5);
  std::filesystem::remove_all(dir);
}
