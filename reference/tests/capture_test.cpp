// Capturing a new CUDA-graph bucket while requests are live (H13): the capture command, scripted. Every
// reference target passes the script under every PAD convention; capture_writes_live_state (the warm-up run on
// the index buffer's current contents and committed) fails it at the capture; shapes outside the setup and
// targets that do not capture are refused naming the field; the generator sends no capture to a target that
// does not claim it.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <nlohmann/json.hpp>

#include "fuzz_case.hpp"
#include "lifecycle.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using ref::Cmd;
using ref::Fault;
using ref::PadConvention;
using replayssm::testing::field_of;

namespace {
ref::EngineSetup setup_with(PadConvention c, std::int32_t slots = 6) {
  auto s = ref::make_setup(preset("tiny-gdn"), 13, slots, 3);
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
Cmd step(const std::vector<std::int32_t>& reqs, std::int32_t n) {
  Cmd c;
  c.kind = Cmd::Kind::Step;
  for (auto r : reqs) c.rows.push_back(ref::RowSpec{r, 3, n, 0, 9000 + static_cast<std::uint64_t>(r)});
  return c;
}
Cmd capture(std::int32_t rows, std::int32_t T) {
  Cmd c;
  c.kind = Cmd::Kind::Capture;
  c.graph = rows;
  c.capture_T = T;
  return c;
}
Cmd finish(std::int32_t req) {
  Cmd c;
  c.kind = Cmd::Kind::Finish;
  c.req = req;
  return c;
}
// Three live requests (slots 3, 1, 4), prefilled and verified, then buckets captured between steps: of 2 rows
// (fewer than the live batch), of the capacity, after a request finished (its slot now free).
std::vector<Cmd> script() {
  return {admit(0, 3), admit(1, 1), admit(2, 4), step({0, 1, 2}, 0), step({2, 0, 1}, 2),
          capture(2, 3),          // command 5: the first capture while live
          step({1, 2, 0}, 1), capture(6 + 8, 1), finish(1), capture(4, 2), step({0, 2}, 3)};
}
}  // namespace

TEST(Capture, LeavesEveryLiveRequestAloneOnEveryReferenceTarget) {
  for (auto conv : ref::all_pad_conventions())
    for (const std::string t : {"replay", "ring", "full_state", "replay_tf32"})
      EXPECT_EQ(fuzz::replay_sequence(setup_with(conv), t, Fault::None, script()), "") << t << " / " << ref::to_string(conv);
}

TEST(Capture, AWarmUpOnTheLiveIndexBufferIsCaughtAtTheCapture) {
  for (auto conv : ref::all_pad_conventions()) {
    const std::string why = fuzz::replay_sequence(setup_with(conv), "replay", Fault::CaptureWritesLiveState, script());
    EXPECT_EQ(why.rfind("command 5 (capture rows=2 T=3)", 0), 0u) << ref::to_string(conv) << ": " << why;
    // The live request in the buffer's first row (slot 3) took the dummy window: check 3 sees it first.
    EXPECT_NE(why.find("request 0 (slot 3) layer 0: committed state differs"), std::string::npos) << why;
  }
}

TEST(Capture, WritesNothingButThePadSlot) {
  for (auto conv : ref::all_pad_conventions()) {
    ref::Engine e(ref::make_target("replay"), setup_with(conv));
    for (const auto& c : script()) e.execute(c);
    e.execute(capture(3, 2));
    const std::vector<std::int32_t> want =
        conv == PadConvention::PadSlot ? std::vector<std::int32_t>{5} : std::vector<std::int32_t>{};
    EXPECT_EQ(e.last_written(), want) << ref::to_string(conv);
    EXPECT_TRUE(e.last_rows().empty());
  }
}

TEST(Capture, ShapesOutsideTheSetupAreRefused) {
  ref::Engine e(ref::make_target("replay"), setup_with(PadConvention::MinusOne));
  e.execute(admit(0, 1));
  EXPECT_EQ(field_of([&] { e.execute(capture(0, 1)); }), "cmd.graph");
  EXPECT_EQ(field_of([&] { e.execute(capture(6 + 8 + 1, 1)); }), "cmd.graph");
  EXPECT_EQ(field_of([&] { e.execute(capture(2, 0)); }), "cmd.T");
  EXPECT_EQ(field_of([&] { e.execute(capture(2, 4)); }), "cmd.T");  // max_T = 3
}

namespace {
// full_state without the capture capability: Target::capture's default refusal.
class NoCapture : public ref::Target {
 public:
  NoCapture() : inner_(ref::make_target("full_state")) {}
  std::string name() const override { return "no_capture"; }
  bool bit_exact() const override { return true; }
  void setup(const ref::EngineSetup& s) override { inner_->setup(s); }
  void allocate(std::int32_t slot) override { inner_->allocate(slot); }
  std::vector<std::vector<float>> step(const std::vector<ref::TargetRow>& rows,
                                       const std::vector<ref::SequenceInputs>& in) override {
    return inner_->step(rows, in);
  }
  void commit(const std::vector<ref::TargetRow>& rows) override { inner_->commit(rows); }
  void copy_slot(std::int32_t src, std::int32_t dst) override { inner_->copy_slot(src, dst); }
  std::vector<float> committed_state(std::int32_t l, std::int32_t slot) const override {
    return inner_->committed_state(l, slot);
  }
  std::vector<float> pool(std::int32_t l) const override { return inner_->pool(l); }

 private:
  std::unique_ptr<ref::Target> inner_;
};
const bool kRegistered = ref::register_target("test_no_capture", [](Fault) { return std::make_unique<NoCapture>(); });
}  // namespace

TEST(Capture, ATargetThatDoesNotCaptureIsRefusedAndNeverSentOne) {
  ASSERT_TRUE(kRegistered);
  ref::Engine e(ref::make_target("test_no_capture"), setup_with(PadConvention::MinusOne));
  e.execute(admit(0, 1));
  EXPECT_EQ(field_of([&] { e.execute(capture(2, 1)); }), "cmd.kind");
  NoCapture direct;
  EXPECT_EQ(field_of([&] { direct.capture(2, 1); }), "capture");
  // A campaign against it: any capture sent would be refused and fail the case.
  const auto setup = setup_with(PadConvention::MinusOne);
  const auto r = rc::check("no capture is sent to a target that does not claim it",
                           [&] { fuzz::check_lifecycle(setup, "test_no_capture", Fault::None); });
  EXPECT_TRUE(r);
}

TEST(CaptureJson, RoundTripsStrictlyAndIsCappedInCaseFiles) {
  const Cmd c = capture(4, 2);
  const Cmd back = Cmd::from_json(c.to_json());
  EXPECT_EQ(back.kind, Cmd::Kind::Capture);
  EXPECT_EQ(back.graph, 4);
  EXPECT_EQ(back.capture_T, 2);
  EXPECT_EQ(c.str(), "capture rows=4 T=2");
  auto j = c.to_json();
  j.erase("T");
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.T");
  j = c.to_json();
  j["graph"] = 0;
  EXPECT_EQ(field_of([&] { Cmd::from_json(j); }), "cmd.graph");
  j = c.to_json();
  j["req"] = 1;
  EXPECT_NE(field_of([&] { Cmd::from_json(j); }), "<no error>");

  fuzz::FuzzCase fc;
  fc.setup = setup_with(PadConvention::MinusOne, 3);
  fc.target = "replay";
  fc.commands = {admit(0, 1), capture(3 + 8, 3)};
  fc.reason = "r";
  EXPECT_EQ(fuzz::parse_fuzz_case(fuzz::fuzz_case_file(fc)).commands[1].graph, 11);
  fc.commands[1].graph = 3 + 8 + 1;
  EXPECT_NE(field_of([&] { fuzz::parse_fuzz_case(fuzz::fuzz_case_file(fc)); }).find(".graph"), std::string::npos);
  fc.commands[1] = capture(2, 4);
  EXPECT_NE(field_of([&] { fuzz::parse_fuzz_case(fuzz::fuzz_case_file(fc)); }).find(".T"), std::string::npos);
}
