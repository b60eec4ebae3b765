// Trace format 1.2 (docs/fixture-format.md 9.2): captures of a CUDA-graph bucket while requests are live (H13).
// Only a trace holding a capture is written as 1.2 (the others keep their version and bytes), a reader refuses a
// capture in a file that says 1.1, a capture out of range, and one whose `unchanged` set misses a slot; a target
// that does not claim captures is not covered; the committed capture trace passes the reference designs and
// fails capture_writes_live_state at a capture.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/fixtures/trace_replay.hpp"
#include "trace_gen.hpp"

using namespace replayssm;

namespace {
const std::string kTraces = std::string(REPLAYSSM_SOURCE_DIR) + "/fixtures/traces/";
const std::string kCapture = kTraces + "tiny-gdn/tiny-gdn__capture_while_live__0.safetensors";

fuzz::TraceSetOptions options(bool captures) {
  fuzz::TraceSetOptions o;
  o.cfg = preset("tiny-gdn");
  o.seed = 20261129;
  o.max_commands = 20;
  o.captures = captures;
  o.name = captures ? "capture_while_live" : "trace";
  return o;
}
std::string refused_field(const Fixture& f) {
  try {
    ref::trace_from_fixture(f);
  } catch (const Error& e) {
    return e.field();
  }
  return "";
}
std::string refused_message(const Fixture& f) {
  try {
    ref::trace_from_fixture(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
std::size_t first_capture(const ref::Trace& t) {
  for (std::size_t c = 0; c < t.commands.size(); ++c)
    if (t.commands[c].op == ref::TraceCommand::Op::Capture) return c;
  return t.commands.size();
}
// The replay design without the capture capability.
class NoCaptures : public ref::Target {
 public:
  NoCaptures() : t_(ref::make_target("replay")) {}
  std::string name() const override { return "no-captures"; }
  bool bit_exact() const override { return t_->bit_exact(); }
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
}  // namespace

// The committed file is what the generator writes (--captures --name capture_while_live), the same sequence
// with its captures, and the only 1.2 trace; without --captures a trace stays 1.0, and every other committed
// trace is written back to its own bytes.
TEST(TraceCapture, VersionIs1_2ExactlyWhenATraceHoldsACaptureAndOtherTracesKeepTheirBytes) {
  const auto with = fuzz::make_set_trace(options(true), 0), without = fuzz::make_set_trace(options(false), 0);
  ASSERT_TRUE(ref::trace_has_capture(with));
  EXPECT_FALSE(ref::trace_has_capture(without));
  EXPECT_EQ(ref::trace_to_fixture(with).extra_metadata.at("trace_version"), "1.2");
  EXPECT_EQ(ref::trace_to_fixture(without).extra_metadata.at("trace_version"), "1.0");
  std::vector<ref::Cmd> stripped;  // the captures are drawn apart: the other lifecycle commands are unchanged
  for (const auto& c : with.lifecycle)
    if (c.kind != ref::Cmd::Kind::Capture) stripped.push_back(c);
  ASSERT_EQ(stripped.size(), without.lifecycle.size());
  for (std::size_t i = 0; i < stripped.size(); ++i) EXPECT_EQ(stripped[i].str(), without.lifecycle[i].str()) << i;

  const auto dir = std::filesystem::temp_directory_path() / ("replayssm_trace_capture_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto o = options(true);
  o.cases = 1;
  const auto paths = fuzz::write_trace_set(o, dir.string());
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_TRUE(bytes(paths[0]) == bytes(kCapture)) << "regenerate with: replayssm fixtures generate --traces --preset "
                                                 "tiny-gdn --captures --name capture_while_live --cases 1";
  // Every committed trace reads and writes back to its own bytes, at its own version: 1.2 exactly for those
  // with captures (this one and the grouped traces, recorded with --captures).
  int captured = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(kTraces)) {
    const std::string p = e.path().string();
    if (e.path().extension() != ".safetensors" || load_fixture(p).op != ref::kTraceOp) continue;  // not MRoPE sessions
    const auto t = ref::load_trace(p);
    const auto fx = ref::trace_to_fixture(t);
    captured += ref::trace_has_capture(t);
    EXPECT_EQ(fx.extra_metadata.at("trace_version") == "1.2", ref::trace_has_capture(t)) << p;
    EXPECT_TRUE(p == kCapture || !ref::trace_has_capture(t) || p.find("/grouped/") != std::string::npos)
        << p << " has captures";
    const auto again = (dir / e.path().filename()).string();
    save_fixture(again, fx);
    EXPECT_TRUE(bytes(again) == bytes(p)) << p << " is not written back byte for byte";
  }
  EXPECT_GE(captured, 2);
  std::filesystem::remove_all(dir);
}

TEST(TraceCapture, ReaderRefusesACaptureItCannotHoldNamingTheField) {
  const Fixture f = load_fixture(kCapture);
  const auto t = ref::trace_from_fixture(f);
  const std::size_t c = first_capture(t);
  ASSERT_LT(c, t.commands.size());
  EXPECT_GE(t.commands[c].capture_rows, 1);
  const std::string cf = "__metadata__.commands[" + std::to_string(c) + "]";

  Fixture as11 = f;  // a 1.1 file holds no capture: a 1.1 reader would not know the command
  as11.extra_metadata["trace_version"] = "1.1";
  EXPECT_EQ(refused_field(as11), cf + ".op");
  EXPECT_NE(refused_message(as11).find("1.2"), std::string::npos) << refused_message(as11);
  Fixture as13 = f;  // a later minor is refused naming the version
  as13.extra_metadata["trace_version"] = "1.3";
  EXPECT_EQ(refused_field(as13), "__metadata__.trace_version");

  const auto cmds = nlohmann::json::parse(f.extra_metadata.at("commands"));
  for (const auto& [key, value] : {std::pair<const char*, int>{"rows", 0}, {"rows", t.setup.max_rows() + 1},
                                   {"T", 0}, {"T", t.setup.max_T + 1}}) {
    Fixture bad = f;
    auto j = cmds;
    j[c][key] = value;
    bad.extra_metadata["commands"] = j.dump();
    EXPECT_EQ(refused_field(bad), cf + "." + key) << key << " = " << value;
  }
  Fixture written = f;  // a capture that would be allowed to write a slot
  auto j = cmds;
  auto& u = j[c]["unchanged"];
  u.erase(u.begin());
  written.extra_metadata["commands"] = j.dump();
  EXPECT_EQ(refused_field(written), cf + ".unchanged");
}

TEST(TraceCapture, TargetsWithoutCapturesAreNotCovered) {
  const auto t = ref::load_trace(kCapture);
  NoCaptures no;
  EXPECT_NE(ref::trace_not_covered(t, no).find("captures"), std::string::npos);
  EXPECT_EQ(ref::trace_not_covered(ref::load_trace(kTraces + "tiny-gdn/tiny-gdn__trace__0.safetensors"), no), "");
}

// The reference designs pass; capture_writes_live_state (the warm-up commits a dummy window into the last step's
// live slots) fails at a capture, naming a slot the capture must leave unchanged.
TEST(TraceCapture, CaptureTraceCatchesCaptureWritesLiveStateAtACapture) {
  const auto t = ref::load_trace(kCapture);
  std::size_t live_captures = 0;  // captures while a request holds a committed state
  for (const auto& c : t.commands) live_captures += c.op == ref::TraceCommand::Op::Capture && !c.states.empty();
  EXPECT_GE(live_captures, 1u);
  for (const char* kind : {"replay", "ring"}) {
    const auto rep = ref::replay_trace(t, *ref::make_target(kind));
    EXPECT_TRUE(rep.ok) << kind << ": " << (rep.first_failure() ? rep.first_failure()->message : "");
  }
  const auto fault = ref::Fault::CaptureWritesLiveState;
  const auto target = ref::make_target(ref::fault_targets(fault).at(0), fault);
  ASSERT_EQ(ref::trace_not_covered(t, *target), "");
  const auto rep = ref::replay_trace(t, *target);
  ASSERT_FALSE(rep.ok);
  const auto* f = rep.first_failure();
  EXPECT_EQ(t.commands[f->index].op, ref::TraceCommand::Op::Capture) << f->message;
  EXPECT_TRUE(f->check == "state" || f->check == "unchanged") << f->message;
  EXPECT_GE(f->slot, 0);
}
