// Trace fixtures must be able to fail: generation is deterministic, a corrupted expectation fails naming the
// command, layer, slot and worst element, an unknown major version is refused, the reference designs pass and
// faulty ones fail, and a dumped fuzz case exported as a trace fails where the judge failed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "campaign.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixtures/trace_replay.hpp"
#include "trace_gen.hpp"

using namespace replayssm;

namespace {
std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("replayssm-trace-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}
std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
fuzz::TraceSetOptions options(const std::string& preset_name, std::uint64_t seed) {
  fuzz::TraceSetOptions o;
  o.cfg = preset(preset_name);
  o.seed = seed;
  o.cases = 2;
  o.max_commands = 20;
  return o;
}
}  // namespace

TEST(Trace, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto a = temp_dir("det-a"), b = temp_dir("det-b"), c = temp_dir("det-c");
  const auto pa = fuzz::write_trace_set(options("tiny-gdn", 7), a.string());
  const auto pb = fuzz::write_trace_set(options("tiny-gdn", 7), b.string());
  const auto pc = fuzz::write_trace_set(options("tiny-gdn", 8), c.string());
  ASSERT_EQ(pa.size(), 2u);
  ASSERT_EQ(pb.size(), 2u);
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(std::filesystem::path(pa[i]).filename(), std::filesystem::path(pb[i]).filename());
    EXPECT_EQ(bytes(pa[i]), bytes(pb[i])) << pa[i];
    EXPECT_NE(bytes(pa[i]), bytes(pc[i])) << pc[i];
  }
  for (const auto& d : {a, b, c}) std::filesystem::remove_all(d);
}

TEST(Trace, GeneratedTracesCheckCleanAndRoundTrip) {
  const auto dir = temp_dir("clean");
  for (const char* p : {"tiny-gdn", "tiny-kda"}) {
    for (const auto& path : fuzz::write_trace_set(options(p, 3), dir.string())) {
      const auto r = ref::check_fixture_file(path);
      EXPECT_TRUE(r.ok) << path << ": " << r.error << (r.tensors.empty() ? "" : r.tensors[0].report.str());
      const auto t = ref::load_trace(path);
      EXPECT_FALSE(t.commands.empty());
      // Writing what was read gives the same file: nothing is lost between the two forms.
      EXPECT_EQ(fixture_to_safetensors(ref::trace_to_fixture(t)).metadata, read_safetensors(path).metadata) << path;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Trace, CorruptedStateExpectationFailsNamingCommandLayerSlotAndWorstElement) {
  const auto dir = temp_dir("corrupt-state");
  const auto path = fuzz::write_trace_set(options("tiny-gdn", 5), dir.string())[0];
  const ref::Trace t = ref::load_trace(path);
  // The last command that stores a new state: corrupt element 9 of the first state it stores.
  std::size_t c = t.commands.size();
  Fixture f = load_fixture(path);
  while (c-- > 0)
    if (f.tensors.count("out." + std::to_string(c) + ".states")) break;
  ASSERT_LT(c, t.commands.size());
  const std::string name = "out." + std::to_string(c) + ".states";
  auto v = f.tensors.at(name).to_f32();
  v[9] += 0.5f;
  f.tensors[name] = Tensor::from_f32(f.tensors.at(name).dtype, f.tensors.at(name).shape, v);
  save_fixture(path, f);
  const auto r = ref::check_fixture_file(path);
  ASSERT_FALSE(r.ok);
  ASSERT_FALSE(r.tensors.empty());
  const std::string msg = r.tensors[0].report.str();
  EXPECT_NE(msg.find("command " + std::to_string(c) + " ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("committed state differs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer "), std::string::npos) << msg;
  EXPECT_NE(msg.find("slot "), std::string::npos) << msg;
  EXPECT_NE(msg.find("worst element [hv 0, "), std::string::npos) << msg;  // element 9 of head 0
  EXPECT_EQ(r.tensors[0].report.worst_index, 9u) << msg;
  std::filesystem::remove_all(dir);
}

TEST(Trace, CorruptedOutputFailsNamingTheRowAndToken) {
  const auto dir = temp_dir("corrupt-out");
  const auto path = fuzz::write_trace_set(options("tiny-kda", 5), dir.string())[0];
  const ref::Trace t = ref::load_trace(path);
  // The first real row of a step (steps may hold PAD rows only, and PAD rows come anywhere in a batch).
  std::size_t c = 0, i = 0;
  for (; c < t.commands.size(); ++c) {
    if (t.commands[c].op != ref::TraceCommand::Op::Step) continue;
    for (i = 0; i < t.commands[c].rows.size() && t.commands[c].rows[i].row.slot == kPadSlot; ++i) {
    }
    if (i < t.commands[c].rows.size()) break;
  }
  ASSERT_LT(c, t.commands.size());
  Fixture f = load_fixture(path);
  const std::string name = "out." + std::to_string(c) + ".o";
  auto v = f.tensors.at(name).to_f32();
  const auto& row = t.commands[c].rows[i].row;
  const std::size_t per = static_cast<std::size_t>(t.setup.cfg.HV) * t.setup.cfg.V;
  v[static_cast<std::size_t>(row.token_offset) * per + 3] += 0.25f;  // layer 0, first token, hv 0, v 3
  f.tensors[name] = Tensor::from_f32(f.tensors.at(name).dtype, f.tensors.at(name).shape, v);
  save_fixture(path, f);
  const auto r = ref::check_fixture_file(path);
  ASSERT_FALSE(r.ok);
  const std::string msg = r.tensors.at(0).report.str();
  EXPECT_NE(msg.find("command " + std::to_string(c) + " (step"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 0, row " + std::to_string(i) + " (slot " + std::to_string(row.slot)), std::string::npos) << msg;
  EXPECT_NE(msg.find("[token " + std::to_string(row.token_offset) + ", hv 0, v 3]"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

TEST(Trace, UnknownMajorVersionAndNonExactToleranceAreRefusedNamingTheField) {
  const auto dir = temp_dir("version");
  const auto path = fuzz::write_trace_set(options("tiny-gdn", 5), dir.string())[0];
  Fixture f = load_fixture(path);
  Fixture v2 = f;
  v2.extra_metadata["trace_version"] = "2.0";
  try {
    ref::trace_from_fixture(v2);
    FAIL() << "a trace of major version 2 was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "__metadata__.trace_version");
  }
  Fixture minor = f;
  minor.extra_metadata["trace_version"] = "1.3";  // an unknown minor may change what rows mean (1.1 did)
  try {
    ref::trace_from_fixture(minor);
    FAIL() << "a trace of minor version 1.3 was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "__metadata__.trace_version");
  }
  Fixture loose = f;
  loose.tolerance.begin()->second = Tolerance::allclose(1e-3, 0);
  try {
    ref::trace_from_fixture(loose);
    FAIL() << "a trace with a non-exact tolerance was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "__metadata__.tolerance['" + loose.tolerance.begin()->first + "']");
  }
  std::filesystem::remove_all(dir);
}

TEST(Trace, ReferenceDesignsPassAndTheOracleIsBitExactAtEveryTier) {
  for (const char* p : {"tiny-gdn", "tiny-kda"}) {
    const auto t = fuzz::make_set_trace(options(p, 11), 0);
    for (const char* kind : {"full_state", "replay", "ring", "replay_tf32"}) {
      const auto target = ref::make_target(kind);
      const auto rep = ref::replay_trace(t, *target);
      EXPECT_TRUE(rep.ok) << p << " " << kind << ": " << (rep.first_failure() ? rep.first_failure()->message : "");
    }
    for (Tier tier : all_tiers()) {
      ref::TraceJudging j;
      j.mode = ref::TraceJudging::Mode::Tier;
      j.tier = tier;
      EXPECT_TRUE(ref::replay_trace(t, *ref::make_target("replay"), j).ok) << p << " " << to_string(tier);
    }
  }
}

TEST(Trace, ExportedFuzzCaseFailsAtTheCommandTheJudgeFailedAndPassesForCorrectTargets) {
  const auto dir = temp_dir("export");
  for (ref::Fault fault : {ref::Fault::OffByOneAccepted, ref::Fault::PadRowWritesSlot0, ref::Fault::StaleCursorOnSlotReuse,
                           ref::Fault::GraphTailProcessed, ref::Fault::PadIndexWraps}) {
    fuzz::FuzzOptions o;
    o.cfg = preset("tiny-gdn");
    o.target = ref::fault_targets(fault).at(0);
    o.fault = fault;
    o.cases = 100;
    o.seed = 3;
    o.dump_dir = dir.string();
    const auto r = fuzz::run_fuzz(o, nullptr);
    ASSERT_TRUE(r.failed) << ref::to_string(fault);
    const std::string why = fuzz::replay_dump(r.dump_path);
    ASSERT_EQ(why.rfind("command ", 0), 0u) << why;
    const int failing = std::stoi(why.substr(8));
    const auto trace_path = (dir / (ref::to_string(fault) + ".trace.safetensors")).string();
    const auto dumped = fuzz::load_dump(r.dump_path);
    fuzz::export_trace(dumped, trace_path, "test");
    const ref::Trace t = ref::load_trace(trace_path);
    EXPECT_EQ(t.lifecycle.size(), dumped.commands.size());
    EXPECT_TRUE(ref::check_fixture_file(trace_path).ok);
    const auto faulty = ref::make_target(o.target, fault);
    const auto rep = ref::replay_trace(t, *faulty);
    ASSERT_FALSE(rep.ok) << ref::to_string(fault) << ": the exported trace passed the faulty target";
    EXPECT_EQ(rep.first_failure()->lifecycle, failing)
        << ref::to_string(fault) << ": judge: " << why << "\ntrace: " << rep.first_failure()->message;
    EXPECT_TRUE(ref::replay_trace(t, *ref::make_target(o.target)).ok) << ref::to_string(fault);
  }
  std::filesystem::remove_all(dir);
}

// The committed traces have teeth: every catalogue fault that lives in a target (all but the engine's early-stop
// bookkeeping faults, which a target-level trace cannot express: its commits carry the trimmed n; the conv
// component's, which a trace does not carry; decode_path_drift, which only a self check sees; the graph replay
// faults, whose replays a trace does not announce) fails at least one. width_capped_at_8 needs a window wider than 8 (the *__widths_up_to_12__* trace), decay_weights_factored
// realistic gates (the *__realistic_gates__* traces), graph_tail_processed a captured step (the
// *__graph_stale_tail__* trace), capture_writes_live_state a capture while requests are live (the
// *__capture_while_live__* trace, format 1.2). A trace a target is not covered by (trace_not_covered) is not replayed on it.
TEST(Trace, CommittedTracesCatchEveryTargetFaultOfTheCatalogue) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/traces"))
    if (e.path().extension() == ".safetensors" && load_fixture(e.path().string()).op == ref::kTraceOp)
      paths.push_back(e.path().string());  // lifecycle traces (fixtures/traces/mrope holds MRoPE sessions)
  ASSERT_GE(paths.size(), 4u);
  std::vector<ref::Trace> traces;
  for (const auto& p : paths) traces.push_back(ref::load_trace(p));
  for (const auto& t : traces)  // without a fault every reference design passes, so a failure below is the fault's
    for (const char* kind : {"replay", "ring"}) {
      const auto target = ref::make_target(kind);
      if (!ref::trace_not_covered(t, *target).empty()) continue;
      const auto rep = ref::replay_trace(t, *target);
      EXPECT_TRUE(rep.ok) << kind << ": " << (rep.first_failure() ? rep.first_failure()->message : "");
    }
  for (ref::Fault fault : ref::all_faults()) {
    // Faults of an engine's bookkeeping (the trace replays target calls, no engine) or of the oracle too.
    if (ref::sut_engine_fault(fault) || ref::shared_engine_fault(fault) || ref::oracle_shares_fault(fault)) continue;
    // The conv component's faults: the trace format holds no conv windows (export_trace refuses such a case);
    // their teeth are ConvComponent.EachConvFaultFailsTheScriptWhereItActs and the teeth test.
    if (ref::conv_fault(fault)) continue;
    // A fault inside the tier its target claims, which only the implementation compared with itself shows (a
    // trace compares every call with the oracle's answer); its teeth are SelfCheck.* and the judge's teeth.
    if (ref::self_check_fault(fault)) continue;
    // A graph replay fault acts only on a step announced as a replay of a captured bucket (protocol 1.9), which the
    // trace format (up to 1.2) does not record; its teeth are GraphReplay.* and the teeth test.
    if (ref::graph_replay_fault(fault)) continue;
    bool caught = false;
    for (const auto& t : traces) {
      // A fault that lives in one ring reconstruction (decay_weights_factored: closed form) is replayed by a ring
      // running it; the trace's expectations do not depend on the implementation's reconstruction.
      ref::Trace as_run = t;
      if (const auto recon = ref::fault_reconstruction(fault)) as_run.setup.recon = *recon;
      const auto target = ref::make_target(ref::fault_targets(fault).at(0), fault);
      if (!ref::trace_not_covered(as_run, *target).empty()) continue;
      caught = caught || !ref::replay_trace(as_run, *target).ok;
    }
    EXPECT_TRUE(caught) << ref::to_string(fault) << " passes every committed trace";
  }
}
