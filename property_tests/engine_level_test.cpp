// The engine level: the project's reference engine (in place and ping-pong slots, same-iteration and
// next-step commits) passes the engine-level judge and the independent bookkeeping model over generated
// request-event sequences; every engine-level catalogue fault is caught within the default case budget and
// shrunk; a dumped case replays.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <rapidcheck/detail/Configuration.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "engine_campaign.hpp"
#include "engine_case.hpp"
#include "engine_level.hpp"
#include "gen.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;
namespace el = ref::engine_level;

namespace {
// Small models (GDN or KDA, 1-2 layers, F32 or BF16 state), 2-4 live requests, windows up to 6, and engine
// options covering both commit modes and both bufferings.
rc::Gen<el::EngineLevelSetup> engine_setup() {
  return rc::gen::exec([] {
    ModelConfig cfg = *testgen::small_config();
    cfg.num_layers = *testgen::in(1, 3);
    cfg.state_dtype = *rc::gen::element(DType::F32, DType::BF16);
    const int live = *testgen::in(2, 5);
    return el::make_engine_level_setup(cfg, *testgen::seed(), live, *testgen::in(1, 7), *fuzz::engine_options(live));
  });
}
}  // namespace

namespace replayssm::ref::engine_level {
inline void showValue(const EngineLevelSetup& s, std::ostream& os) {
  os << s.base.to_json().dump() << " options " << s.options.to_json().dump();
}
}  // namespace replayssm::ref::engine_level

// Every commit mode and buffering judged in lock step on each sequence.
RC_GTEST_PROP(EngineLevel, ReferenceEngineMatchesPerRequestTruth, ()) {
  const auto setup = *engine_setup();
  fuzz::check_engine_level(setup, "reference", el::EngineFault::None, nullptr, nullptr,
                           fuzz::option_variants(setup.options.max_live));
}

// The spec-ring engine on its own, under both commit modes, on every drawn setup: bit-exact with an F32 state
// (where it also joins the property above in lock step), at its tolerance with a BF16 one.
RC_GTEST_PROP(EngineLevel, RingEngineMatchesPerRequestTruth, ()) {
  const auto setup = *engine_setup();
  fuzz::check_engine_level(setup, "ring", el::EngineFault::None, nullptr, nullptr,
                           fuzz::option_variants(setup.options.max_live, std::nullopt, el::Buffering::InPlace));
}

// The two commit protocols give the same observable states: one event sequence, judged on every
// combination of commit mode and buffering (each against the same slot-free truth).
RC_GTEST_PROP(EngineLevel, CommitModesAgreeOnOneSequence, ()) {
  auto setup = *engine_setup();
  const auto events =
      fuzz::generate_events(setup.options.max_live, setup.base.max_T, *testgen::seed(), 60, setup.options.block);
  for (auto c : {el::CommitMode::SameIteration, el::CommitMode::NextStep})
    for (auto b : {el::Buffering::InPlace, el::Buffering::Double}) {
      setup.options.commit = c;
      setup.options.buffers = b;
      const auto why = fuzz::replay_events(setup, "reference", el::EngineFault::None, events);
      RC_ASSERT(why.empty());
    }
}

// --- teeth -------------------------------------------------------------------------------------------------
namespace {
struct Hunt {
  bool caught = false;
  int cases = 0;             // generated sequences until the first failure (the failing one included)
  std::size_t shrunk = 0;    // events of the shrunk sequence
  std::string text;
};

Hunt hunt(el::EngineFault fault) {
  std::vector<el::Event> seq;
  std::string reason;
  auto prop = [&] {
    const auto setup = *engine_setup();
    fuzz::check_engine_level(setup, "reference", fault, &seq, &reason, fuzz::option_variants(setup.options.max_live));
  };
  rc::detail::TestMetadata meta;
  meta.id = "engine-teeth/" + el::to_string(fault);
  meta.description = meta.id;
  const auto result = rc::detail::checkTestable(prop, meta, rc::detail::configuration().testParams);
  Hunt h;
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    h.caught = true;
    h.cases = failure.numSuccess + 1;
    h.shrunk = seq.size();
    std::ostringstream os;
    rc::detail::printResultMessage(failure, os);
    h.text = os.str() + "\nlast failure: " + reason;
  } else {
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    h.text = os.str();
  }
  return h;
}
}  // namespace

class EngineTeeth : public ::testing::TestWithParam<el::EngineFault> {};

TEST_P(EngineTeeth, DefaultPropertyCatchesFault) {
  const el::EngineFault fault = GetParam();
  const Hunt h = hunt(fault);
  EXPECT_TRUE(h.caught) << "engine-level fault " << el::to_string(fault) << " survived the default property:\n"
                        << h.text;
  if (h.caught)
    std::cout << "[engine-teeth] " << el::to_string(fault) << " (" << el::engine_fault_scope(fault)
              << "): caught after " << h.cases << " case(s); shrunk to " << h.shrunk << " events\n"
              << h.text << "\n";
}

INSTANTIATE_TEST_SUITE_P(Catalogue, EngineTeeth, ::testing::ValuesIn(el::all_engine_faults()),
                         [](const auto& info) { return el::to_string(info.param); });

// --- the campaign and its dump ----------------------------------------------------------------------------
TEST(EngineCampaign, FaultIsDumpedAndTheDumpReplays) {
  fuzz::EngineFuzzOptions o;
  o.cfg = preset("tiny-gdn");
  o.cfg.num_layers = 1;
  o.cases = 100;
  o.max_commands = 60;
  o.commit = el::CommitMode::NextStep;
  o.fault = el::EngineFault::DeferredCommitAfterFree;
  o.dump_dir = (std::filesystem::temp_directory_path() / "replayssm-engine-case-test").string();
  const auto rep = fuzz::run_engine_fuzz(o, nullptr);
  ASSERT_TRUE(rep.failed) << "the fault was not caught";
  ASSERT_FALSE(rep.dump_path.empty());
  const auto c = fuzz::read_engine_case(rep.dump_path);
  EXPECT_EQ(c.fault, el::EngineFault::DeferredCommitAfterFree);
  EXPECT_EQ(c.setup.options.commit, el::CommitMode::NextStep);
  EXPECT_FALSE(c.events.empty());
  EXPECT_TRUE(fuzz::is_engine_case(rep.dump_path));
  // The stored case fails again, and the same events pass on the correct engine.
  EXPECT_FALSE(fuzz::replay_engine_dump(rep.dump_path).empty());
  EXPECT_EQ(c.variants.size(), 2u);  // next_step, both bufferings
  EXPECT_EQ(fuzz::replay_events(c.setup, "reference", el::EngineFault::None, c.events, c.variants), "");
  // The file round-trips through its writer.
  const auto again = fuzz::parse_engine_case(fuzz::engine_case_file(c));
  EXPECT_EQ(again.events.size(), c.events.size());
  std::filesystem::remove_all(o.dump_dir);
}

TEST(EngineCampaign, CorrectEnginePassesACampaign) {
  fuzz::EngineFuzzOptions o;
  o.cfg = preset("tiny-kda");
  o.cfg.num_layers = 2;
  o.cases = 30;
  const auto rep = fuzz::run_engine_fuzz(o, nullptr);
  EXPECT_FALSE(rep.failed) << rep.reason << "\n" << rep.counterexample;
  EXPECT_EQ(rep.cases_passed, 30);
}

TEST(EngineCase, MalformedFilesNameTheField) {
  el::EngineLevelSetup s = el::make_engine_level_setup(preset("tiny-gdn"), 3, 2, 4, {});
  fuzz::EngineCase c{s, {s.options}, "reference", el::EngineFault::None, {}, ""};
  el::Event admit;
  admit.kind = el::Event::Kind::Admit;
  admit.prompt = 3;
  admit.max_new = 2;
  c.events.push_back(admit);
  auto f = fuzz::engine_case_file(c);
  auto expect_field = [](const SafetensorsFile& file, const std::string& field) {
    try {
      fuzz::parse_engine_case(file);
      ADD_FAILURE() << "accepted a file with a bad " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
  };
  auto g = f;
  g.metadata["events"] = R"([{"kind":"admit","req":0,"prompt":0,"max_new":2,"seed":"1"}])";
  expect_field(g, "__metadata__.events[0].prompt");
  g = f;
  g.metadata["events"] = R"([{"kind":"step","entries":[{"req":0,"T":9,"accepted":0,"eog_at":0,"seed":"1"}]}])";
  expect_field(g, "__metadata__.events[0].entries[0].T");
  g = f;
  g.metadata["options"] = R"([{"max_live":2,"commit":"later","buffers":"double"}])";
  expect_field(g, "__metadata__.options[0].commit");
  g = f;
  g.metadata["options"] = R"([])";
  expect_field(g, "__metadata__.options");
  g = f;
  g.metadata["fault"] = "no_such_fault";
  expect_field(g, "__metadata__.fault");
  g = f;
  g.metadata["extra"] = "x";
  expect_field(g, "__metadata__.extra");
}
