// Trace format 1.1 (docs/fixture-format.md 9.2): captured steps with a graph tail and the null_block / pad_slot
// PAD conventions. A 1.1 trace is written only when it uses them, a reader refuses what a 1.0 file cannot hold
// and a tail slot missing from `unchanged`, a target without graph_padding or the trace's convention is not
// covered, and each committed hazard trace fails the catalogue fault it is named for.
#include <gtest/gtest.h>

#include <filesystem>

#include "replayssm/error.hpp"
#include "replayssm/fixtures/trace_replay.hpp"
#include "trace_gen.hpp"

using namespace replayssm;

namespace {
fuzz::TraceSetOptions options(const char* preset_name, ref::PadConvention c, bool graph) {
  fuzz::TraceSetOptions o;
  o.cfg = preset(preset_name);
  o.seed = 20261129;
  o.max_commands = 20;
  o.pad_convention = c;
  o.graph_padding = graph;
  return o;
}
// The field named by the Error reading f throws ("" when it reads).
std::string refused_field(const Fixture& f) {
  try {
    ref::trace_from_fixture(f);
  } catch (const Error& e) {
    return e.field();
  }
  return "";
}
// The first step with a stale tail row (a real slot) that no live row writes: (command, row).
std::pair<std::size_t, std::size_t> stale_tail_row(const ref::Trace& t) {
  for (std::size_t c = 0; c < t.commands.size(); ++c) {
    const auto& k = t.commands[c];
    if (k.op != ref::TraceCommand::Op::Step) continue;
    for (std::size_t i = 0; i < k.rows.size(); ++i) {
      const auto s = k.rows[i].row.slot;
      if (!k.rows[i].graph_tail || s < 0) continue;
      bool live = false;
      for (std::size_t j = 0; j < i; ++j) live = live || (!k.rows[j].graph_tail && k.rows[j].row.slot == s);
      if (!live) return {c, i};
    }
  }
  return {t.commands.size(), 0};
}
// A replay target that claims neither graph_padding nor any PAD convention but minus_one.
class EagerMinusOne : public ref::Target {
 public:
  EagerMinusOne() : t_(ref::make_target("replay")) {}
  std::string name() const override { return "eager-minus-one"; }
  bool bit_exact() const override { return t_->bit_exact(); }
  bool out_of_place_commit() const override { return true; }
  void setup(const ref::EngineSetup& s) override { t_->setup(s); }
  void allocate(std::int32_t s) override { t_->allocate(s); }
  std::vector<std::vector<float>> step(const std::vector<ref::TargetRow>& r,
                                       const std::vector<ref::SequenceInputs>& in) override {
    return t_->step(r, in);
  }
  void commit(const std::vector<ref::TargetRow>& r) override { t_->commit(r); }
  void copy_slot(std::int32_t a, std::int32_t b) override { t_->copy_slot(a, b); }
  std::vector<float> committed_state(std::int32_t l, std::int32_t s) const override { return t_->committed_state(l, s); }
  std::vector<float> pool(std::int32_t l) const override { return t_->pool(l); }

 private:
  std::unique_ptr<ref::Target> t_;
};
const std::string kTraces = std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/traces/";
}  // namespace

TEST(TraceGraph, VersionIs1_1ExactlyWhenATraceHasAGraphTailOrAnotherConvention) {
  using PC = ref::PadConvention;
  const auto eager = fuzz::make_set_trace(options("tiny-gdn", PC::MinusOne, false), 0);
  EXPECT_FALSE(ref::trace_has_graph_tail(eager));
  EXPECT_EQ(ref::trace_to_fixture(eager).extra_metadata.at("trace_version"), "1.0");
  EXPECT_EQ(ref::trace_to_fixture(eager).extra_metadata.count("pad_convention"), 0u);
  const auto graph = fuzz::make_set_trace(options("tiny-gdn", PC::MinusOne, true), 0);
  ASSERT_TRUE(ref::trace_has_graph_tail(graph));
  const Fixture fg = ref::trace_to_fixture(graph);
  EXPECT_EQ(fg.extra_metadata.at("trace_version"), "1.1");
  EXPECT_EQ(fg.extra_metadata.at("pad_convention"), "minus_one");
  EXPECT_NE(fg.extra_metadata.at("commands").find("\"live_rows\""), std::string::npos);
  for (PC c : {PC::NullBlock, PC::PadSlot}) {
    const Fixture f = ref::trace_to_fixture(fuzz::make_set_trace(options("tiny-kda", c, false), 0));
    EXPECT_EQ(f.extra_metadata.at("trace_version"), "1.1");
    EXPECT_EQ(f.extra_metadata.at("pad_convention"), ref::to_string(c));
    EXPECT_EQ(refused_field(f), "");
  }
  // Round trip: writing what was read gives the same metadata.
  EXPECT_EQ(ref::trace_to_fixture(ref::trace_from_fixture(fg)).extra_metadata, fg.extra_metadata);
}

TEST(TraceGraph, ReaderRefusesWhatA1_0FileCannotHoldNamingTheField) {
  using PC = ref::PadConvention;
  const auto graph = fuzz::make_set_trace(options("tiny-gdn", PC::MinusOne, true), 0);
  const Fixture fg = ref::trace_to_fixture(graph);
  const auto [c, i] = stale_tail_row(graph);
  ASSERT_LT(c, graph.commands.size()) << "the captured trace has no stale tail row";
  const std::string cf = "__metadata__.commands[" + std::to_string(c) + "]";
  std::size_t first_tail = 0;
  while (!graph.commands[c].rows[first_tail].graph_tail) ++first_tail;

  Fixture as10 = fg;  // a 1.0 reader would take the tail as live rows
  as10.extra_metadata["trace_version"] = "1.0";
  const std::string f10 = refused_field(as10);
  EXPECT_NE(f10.find(".graph_tail"), std::string::npos) << f10;

  auto cmds = nlohmann::json::parse(fg.extra_metadata.at("commands"));
  Fixture wrong_live = fg;
  auto j = cmds;
  j[c]["live_rows"] = j[c]["live_rows"].get<int>() + 1;
  wrong_live.extra_metadata["commands"] = j.dump();
  EXPECT_EQ(refused_field(wrong_live), cf + ".live_rows");

  for (const auto& [key, value] : {std::pair<const char*, int>{"slot", 99}, {"write_slot", -2}, {"accepted", 99}}) {
    Fixture bad = fg;  // a tail row outside the pool, or accepting more than its window (the kit refused these)
    j = cmds;
    j[c]["rows"][i][key] = value;
    bad.extra_metadata["commands"] = j.dump();
    EXPECT_EQ(refused_field(bad), cf + ".rows[" + std::to_string(i) + "]." + key) << key;
  }

  Fixture untouched = fg;  // the stale slot dropped from the slots that must stay unchanged
  j = cmds;
  const auto slot = graph.commands[c].rows[i].row.slot;
  auto& u = j[c]["unchanged"];
  u.erase(std::remove(u.begin(), u.end(), nlohmann::json(slot)), u.end());
  untouched.extra_metadata["commands"] = j.dump();
  EXPECT_EQ(refused_field(untouched), cf + ".unchanged");

  const Fixture fn = ref::trace_to_fixture(fuzz::make_set_trace(options("tiny-gdn", PC::NullBlock, false), 0));
  Fixture n10 = fn;
  n10.extra_metadata["trace_version"] = "1.0";
  EXPECT_EQ(refused_field(n10), "__metadata__.config.setup.pad_convention");
  Fixture other = fn;
  other.extra_metadata["pad_convention"] = "pad_slot";
  EXPECT_EQ(refused_field(other), "__metadata__.pad_convention");
  Fixture missing = fn;
  missing.extra_metadata.erase("pad_convention");
  EXPECT_EQ(refused_field(missing), "__metadata__.pad_convention");
}

TEST(TraceGraph, TargetsWithoutGraphPaddingOrTheConventionAreNotCovered) {
  EagerMinusOne eager;
  const auto g = ref::load_trace(kTraces + "tiny-gdn/tiny-gdn__graph_stale_tail__0.safetensors");
  EXPECT_NE(ref::trace_not_covered(g, eager).find("graph_padding"), std::string::npos);
  for (const char* p : {"tiny-gdn/tiny-gdn__pad_null_block__0", "tiny-kda/tiny-kda__pad_slot__0"}) {
    const auto t = ref::load_trace(kTraces + p + ".safetensors");
    EXPECT_NE(ref::trace_not_covered(t, eager).find("PAD convention"), std::string::npos) << p;
    EXPECT_EQ(ref::trace_not_covered(t, *ref::make_target("replay")), "") << p;
  }
  EXPECT_EQ(ref::trace_not_covered(ref::load_trace(kTraces + "tiny-gdn/tiny-gdn__trace__0.safetensors"), eager), "");
}

// Each hazard trace passes the reference designs and fails the fault it is named for (the fault's catalogue
// target, which claims graph_padding and every convention).
TEST(TraceGraph, HazardTracesCatchTheirFaults) {
  const std::pair<const char*, ref::Fault> named[] = {
      {"tiny-gdn/tiny-gdn__graph_stale_tail__0", ref::Fault::GraphTailProcessed},
      {"tiny-gdn/tiny-gdn__graph_stale_tail__0", ref::Fault::PadIndexWraps},
      {"tiny-kda/tiny-kda__pad_slot__0", ref::Fault::PadSentinelZero},
      {"tiny-kda/tiny-kda__pad_slot__0", ref::Fault::PadRowWritesSlot0},
  };
  for (const auto& [p, fault] : named) {
    const auto t = ref::load_trace(kTraces + p + ".safetensors");
    for (const char* kind : {"replay", "ring"})
      EXPECT_TRUE(ref::replay_trace(t, *ref::make_target(kind)).ok) << p << " " << kind;
    const auto target = ref::make_target(ref::fault_targets(fault).at(0), fault);
    ASSERT_EQ(ref::trace_not_covered(t, *target), "") << p;
    const auto rep = ref::replay_trace(t, *target);
    EXPECT_FALSE(rep.ok) << ref::to_string(fault) << " passes " << p;
  }
}

// A target that takes the null block for a real slot (it follows minus_one: the PAD rows' slot 0 is run as an
// ordinary row) writes slot 0, which is in no write set: the null_block trace fails it.
TEST(TraceGraph, NullBlockTraceFailsATargetThatRunsItsPadRowsIntoSlot0) {
  auto t = ref::load_trace(kTraces + "tiny-gdn/tiny-gdn__pad_null_block__0.safetensors");
  ASSERT_EQ(t.setup.pad_convention, ref::PadConvention::NullBlock);
  ASSERT_TRUE(ref::replay_trace(t, *ref::make_target("replay")).ok);
  t.setup.pad_convention = ref::PadConvention::MinusOne;  // what the target is set up with
  const auto rep = ref::replay_trace(t, *ref::make_target("replay"));
  ASSERT_FALSE(rep.ok);
  EXPECT_EQ(rep.first_failure()->slot, 0) << rep.first_failure()->message;
}
