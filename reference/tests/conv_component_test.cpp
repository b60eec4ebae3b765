// The conv component inside the kernel-level lifecycle (conv_component.hpp): its truth, its setup's JSON form,
// the engine's refusal of a target without conv windows, and the judge's check 6 on pinned sequences: every
// reference target passes; each conv fault of the catalogue fails at the command and the check that see it; a
// target that writes a conv window outside the write set, or the gap after one, is caught.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "fuzz_case.hpp"
#include "lifecycle.hpp"
#include "trace_gen.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/judge.hpp"
#include "replayssm/fixtures/recording_target.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using ref::Cmd;
using ref::Fault;

namespace {
ref::EngineSetup conv_setup(std::int32_t W = 4, DType window = DType::F32, std::int32_t slots = 5) {
  auto s = ref::make_setup(preset("tiny-gdn"), 21, slots, 4);
  s.conv = ref::make_conv_setup(s.cfg, 77, W, window, ref::ConvActivation::Silu, true);
  return s;
}
Cmd admit(std::int32_t req, std::int32_t slot, std::int32_t prompt) {
  Cmd c;
  c.kind = Cmd::Kind::Admit;
  c.req = req;
  c.slot = slot;
  c.prompt = prompt;
  c.seed = 300 + static_cast<std::uint64_t>(req);
  return c;
}
Cmd simple(Cmd::Kind k, std::int32_t req, std::int32_t req2 = 0, std::int32_t slot = 0) {
  Cmd c;
  c.kind = k;
  c.req = req;
  c.req2 = req2;
  c.slot = slot;
  return c;
}
// One row per (req, T, accepted); a PAD row before the first.
Cmd step(const std::vector<std::array<std::int32_t, 3>>& rows, std::uint64_t seed) {
  Cmd c;
  c.kind = Cmd::Kind::Step;
  for (const auto& r : rows) c.rows.push_back(ref::RowSpec{r[0], r[1], r[2], 0, seed++});
  c.pad_at = {0};
  return c;
}

// A prompt in two chunks, partial and zero acceptances, a copy, a finish and slot reuse by a new tenant, a
// preemption and a resume: every conv rule of the lifecycle once.
std::vector<Cmd> script() {
  return {admit(0, 1, 5),
          admit(1, 3, 2),
          step({{{0, 3, 0}}, {{1, 2, 0}}}, 10),              // prefill: 3 of 5 tokens of req 0, all of req 1
          step({{{0, 4, 0}}, {{1, 4, 2}}}, 20),              // req 0: last 2 prompt tokens; req 1 accepts 2 of 4
          step({{{0, 4, 1}}, {{1, 3, 0}}}, 30),              // 1 of 4; n = 0 (the window's bytes stay)
          simple(Cmd::Kind::Copy, 1, 2, 0),                  // fork req 1 into slot 0
          step({{{2, 4, 3}}, {{1, 4, 4}}, {{0, 2, 2}}}, 40),  // the copy advances from the copied window
          simple(Cmd::Kind::Finish, 1),
          admit(3, 3, 2),                                    // a new tenant in req 1's old slot, fresh from zeros
          step({{{3, 4, 0}}, {{0, 4, 1}}}, 50),
          simple(Cmd::Kind::Preempt, 0),
          simple(Cmd::Kind::Resume, 0, 0, 4),                // re-prefill of the whole history from zeros
          step({{{0, 4, 0}}, {{3, 3, 1}}}, 60),
          step({{{0, 4, 0}}, {{3, 3, 3}}}, 70),
          step({{{0, 4, 0}}, {{3, 3, 2}}}, 80),
          step({{{0, 4, 2}}, {{2, 4, 1}}}, 90)};
}

// Runs the script; returns (index, verdict) of the first failing command, or (-1, "").
std::pair<int, std::string> run(const ref::EngineSetup& s, const std::string& target, Fault fault = Fault::None) {
  ref::Judge j(s, target, fault);
  const auto cmds = script();
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    const auto why = j.apply(cmds[i]);
    if (!why.empty()) return {static_cast<int>(i), why};
  }
  return {-1, ""};
}
}  // namespace

TEST(ConvComponent, WindowOfHistoryIsTheLastRawInputsRoundedWithZerosBeforeTheFirst) {
  ref::ConvConfig c;
  c.H = 1, c.HV = 1, c.K = 1, c.V = 1;  // C = 3 channels
  c.kernel_size = 4;                     // 3 columns
  c.act_dtype = DType::F32;
  c.state_dtype = DType::BF16;
  const float odd = 1.0f + std::ldexp(1.0f, -12);  // rounds to 1 in bf16
  // Two tokens: column 0 is before the first token (zero), columns 1, 2 the tokens, rounded to bf16.
  const std::vector<float> x{odd, 2, 3, 4, 5, 6};
  EXPECT_EQ(ref::conv_window_of_history(c, x, 2), (std::vector<float>{0, 1, 4, 0, 2, 5, 0, 3, 6}));
  // Five tokens: the last three.
  const std::vector<float> x5{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  EXPECT_EQ(ref::conv_window_of_history(c, x5, 5), (std::vector<float>{7, 10, 13, 8, 11, 14, 9, 12, 15}));
  EXPECT_EQ(ref::conv_window_of_history(c, {}, 0), std::vector<float>(9, 0.0f));
  // The raw inputs of a token are its q | k | v.
  const ModelConfig m = preset("tiny-gdn");
  const auto in = ref::token_inputs(m, 0, 3, 5);
  const auto raw = ref::conv_raw_inputs(m, in, 1, 2);
  const std::size_t qk = static_cast<std::size_t>(m.H * m.K), v = static_cast<std::size_t>(m.HV * m.V);
  ASSERT_EQ(raw.size(), 2 * (2 * qk + v));
  EXPECT_EQ(raw[0], in.q[qk]);
  EXPECT_EQ(raw[qk], in.k[qk]);
  EXPECT_EQ(raw[2 * qk], in.v[v]);
  EXPECT_EQ(raw[2 * qk + v + 2 * qk - 1], in.k[3 * qk - 1]);
}

TEST(ConvComponent, SetupJsonRoundTripsAndIsReadStrictly) {
  const auto s = conv_setup(3, DType::BF16);
  const auto j = s.to_json();
  ASSERT_TRUE(j.contains("conv"));
  const auto back = ref::EngineSetup::from_json(j, s.params, s.poison);
  ASSERT_TRUE(back.conv.has_value());
  EXPECT_EQ(back.conv->cfg.kernel_size, 3);
  EXPECT_EQ(back.conv->cfg.state_dtype, DType::BF16);
  EXPECT_TRUE(back.conv->cfg.bias);
  EXPECT_EQ(back.conv->params[1].weight, s.conv->params[1].weight);  // regenerated from the seed
  EXPECT_FALSE(ref::make_setup(preset("tiny-gdn"), 21, 5, 4).to_json().contains("conv"));  // off: left out
  auto bad = [&](const char* key, nlohmann::json v, const std::string& field) {
    auto k = j;
    if (v.is_null())
      k["conv"].erase(key);
    else
      k["conv"][key] = v;
    try {
      ref::EngineSetup::from_json(k, s.params, s.poison);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
  };
  bad("kernel_size", 9, "setup.conv.kernel_size");
  bad("kernel_size", nullptr, "setup.conv.kernel_size");
  bad("activation", "gelu", "setup.conv.activation");
  bad("bias", 1, "setup.conv.bias");
  bad("state_dtype", "f16", "setup.conv.state_dtype");
  bad("seed", "012", "setup.conv.seed");
  bad("channels", 5, "setup.conv.channels");  // an unknown key
}

TEST(ConvComponent, EngineRefusesAConvSetupOnATargetWithoutConvWindows) {
  // The recording decorator keeps no conv windows (a trace cannot hold them): refused, naming the field.
  try {
    ref::Engine e(std::make_unique<ref::RecordingTarget>(ref::make_target("replay")), conv_setup());
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "setup.conv") << e.what();
  }
}

TEST(ConvComponent, EveryReferenceTargetPassesTheScript) {
  for (const char* t : {"replay", "ring", "replay_tf32", "full_state"})
    for (DType window : {DType::F32, DType::BF16})
      for (int W : {2, 4, 5}) {
        auto s = conv_setup(W, window);
        if (std::string(t) == "ring") s.cfg.state_dtype = DType::F32;  // the ring is bit-exact with F32 states
        const auto [at, why] = run(s, t);
        EXPECT_EQ(at, -1) << t << " W=" << W << " " << dtype_name(window) << ": command " << at << ": " << why;
      }
}

// Each conv fault fails at the first command that can show it, with the check that sees it.
TEST(ConvComponent, EachConvFaultFailsTheScriptWhereItActs) {
  const auto s = conv_setup();
  {  // command 3: req 1 accepts 2 of 4; the window keeps the whole window's tail
    const auto [at, why] = run(s, "replay", Fault::ConvCommitKeepsWindowTail);
    EXPECT_EQ(at, 3) << why;
    EXPECT_NE(why.find("committed conv window differs"), std::string::npos) << why;
    EXPECT_NE(why.find("worst at channel"), std::string::npos) << why;
  }
  {  // command 5: the copy leaves slot 0's window as it was (poison)
    const auto [at, why] = run(s, "replay", Fault::ConvWindowNotCopied);
    EXPECT_EQ(at, 5) << why;
    EXPECT_NE(why.find("request 2 (slot 0)"), std::string::npos) << why;
  }
  {  // command 2: the first prefill starts from the slot's poison instead of zeros
    const auto [at, why] = run(s, "replay", Fault::ConvFreshKeepsTenantWindow);
    EXPECT_EQ(at, 2) << why;
    EXPECT_NE(why.find("conv outputs differ from the truth"), std::string::npos) << why;
  }
  // Without poison a fresh tenant on a never used slot starts from zeros anyway: the fault shows where a
  // slot is reused, at command 9 (req 3 takes req 1's old slot 3 and prefills from its window).
  auto clean = s;
  clean.poison = 0.0f;
  const auto [at, why] = run(clean, "replay", Fault::ConvFreshKeepsTenantWindow);
  EXPECT_EQ(at, 9) << why;
  EXPECT_NE(why.find("request 3"), std::string::npos) << why;
  // The faults act only on the conv component: without it the script passes.
  auto off = s;
  off.conv.reset();
  for (Fault f : {Fault::ConvCommitKeepsWindowTail, Fault::ConvWindowNotCopied, Fault::ConvFreshKeepsTenantWindow})
    EXPECT_EQ(run(off, "replay", f).first, -1) << ref::to_string(f);
}

namespace {
// The replay design whose conv pool reads back with one element changed after the n-th step: in the window of
// a slot (`slot`) or in the gap after it (gap = true).
class ConvScribble : public ref::Target {
 public:
  ConvScribble(std::int32_t slot, bool gap, int at_step) : inner_(ref::make_target("replay")), slot_(slot), gap_(gap), at_(at_step) {}
  std::string name() const override { return "conv_scribble"; }
  bool bit_exact() const override { return true; }
  bool conv_state() const override { return true; }
  void setup(const ref::EngineSetup& s) override {
    inner_->setup(s);
    elems_ = s.conv->cfg.state_elems();
  }
  void allocate(std::int32_t slot) override { inner_->allocate(slot); }
  std::vector<std::vector<float>> step(const std::vector<ref::TargetRow>& r, const std::vector<ref::SequenceInputs>& in) override {
    ++steps_;
    return inner_->step(r, in);
  }
  void commit(const std::vector<ref::TargetRow>& r) override { inner_->commit(r); }
  std::vector<std::vector<float>> conv_step(const std::vector<ref::TargetRow>& r, const std::vector<ref::SequenceInputs>& in) override {
    return inner_->conv_step(r, in);
  }
  void conv_commit(const std::vector<ref::TargetRow>& r) override { inner_->conv_commit(r); }
  void copy_slot(std::int32_t a, std::int32_t b) override { inner_->copy_slot(a, b); }
  std::vector<float> committed_state(std::int32_t l, std::int32_t s) const override { return inner_->committed_state(l, s); }
  std::vector<float> pool(std::int32_t l) const override { return inner_->pool(l); }
  std::vector<float> conv_committed_state(std::int32_t l, std::int32_t s) const override {
    return inner_->conv_committed_state(l, s);
  }
  std::vector<float> conv_pool(std::int32_t l) const override {
    auto p = inner_->conv_pool(l);
    if (steps_ >= at_) p[static_cast<std::size_t>(slot_ * (elems_ + 4) + (gap_ ? elems_ + 1 : 0))] = 42.0f;
    return p;
  }

 private:
  std::unique_ptr<ref::Target> inner_;
  std::int32_t slot_;
  bool gap_;
  int at_;
  int steps_ = 0;
  std::int64_t elems_ = 0;
};
const bool registered = ref::register_target("conv_scribble_free_slot", [](Fault) {
  return std::make_unique<ConvScribble>(2, false, 1);  // slot 2 is never allocated by the script
}) && ref::register_target("conv_scribble_gap", [](Fault) {
  return std::make_unique<ConvScribble>(1, true, 2);
}) && ref::register_target("conv_scribble_kept", [](Fault) {
  return std::make_unique<ConvScribble>(3, false, 3);  // the third step (command 4) commits n = 0 for slot 3
});
}  // namespace

TEST(ConvComponent, JudgeSeesAConvWindowWrittenOutsideTheWriteSetAndAWrittenGap) {
  ASSERT_TRUE(registered);
  const auto s = conv_setup();
  {
    const auto [at, why] = run(s, "conv_scribble_free_slot");
    EXPECT_EQ(at, 2) << why;
    EXPECT_NE(why.find("implementation: conv window of slot 2 (layer 0) changed although the command must not touch it"),
              std::string::npos) << why;
  }
  {
    const auto [at, why] = run(s, "conv_scribble_gap");
    EXPECT_EQ(at, 3) << why;
    EXPECT_NE(why.find("gap after conv window 1"), std::string::npos) << why;
  }
  {
    const auto [at, why] = run(s, "conv_scribble_kept");
    EXPECT_EQ(at, 4) << why;
    EXPECT_NE(why.find("conv window of slot 3 (layer 0) changed although the command committed n = 0 for it"),
              std::string::npos) << why;
  }
}

// A failing case with the conv component is dumped with `setup.conv` and replays with it (the reader is as
// strict about it as about the rest of the setup); a trace cannot hold it, so exporting one is refused.
TEST(ConvComponent, FuzzCaseWithConvRoundTripsReplaysAndIsNotExportedAsATrace) {
  fuzz::FuzzCase c;
  c.setup = conv_setup(3, DType::BF16);
  c.target = "replay";
  c.fault = Fault::ConvCommitKeepsWindowTail;
  c.commands = script();
  c.reason = "r";
  const auto file = fuzz::fuzz_case_file(c);
  const auto back = fuzz::parse_fuzz_case(file);
  ASSERT_TRUE(back.setup.conv.has_value());
  EXPECT_EQ(back.setup.to_json(), c.setup.to_json());
  const std::string why = fuzz::replay_sequence(back.setup, back.target, back.fault, back.commands);
  EXPECT_EQ(why.rfind("command 3 ", 0), 0u) << why;
  EXPECT_EQ(fuzz::replay_sequence(back.setup, back.target, Fault::None, back.commands), "");
  auto bad = file;
  auto j = nlohmann::json::parse(bad.metadata.at("setup"));
  j["conv"]["kernel_size"] = 1;
  bad.metadata["setup"] = j.dump();
  EXPECT_EQ(replayssm::testing::field_of([&] { fuzz::parse_fuzz_case(bad); }), "__metadata__.setup.conv.kernel_size");
  EXPECT_EQ(replayssm::testing::field_of([&] { fuzz::export_trace(back, "/nonexistent/never-written.safetensors", "test"); }),
            "setup.conv");
}

// A campaign hunting a conv fault without conv cases would pass a faulty target: refused, naming the option.
// With --conv mix it is caught; a correct target passes conv cases on every reference design.
TEST(ConvComponent, CampaignRunsConvCasesOnlyWhenAskedAndRefusesAConvFaultWithout) {
  fuzz::FuzzOptions o;
  o.cfg = preset("tiny-kda");
  o.target = "replay";
  o.fault = Fault::ConvWindowNotCopied;
  o.cases = 100;
  o.seed = 4;
  o.dump_dir = ::testing::TempDir() + "conv_component_" + std::to_string(::getpid());  // this process's own dumps
  EXPECT_EQ(replayssm::testing::field_of([&] { fuzz::run_fuzz(o, nullptr); }), "conv");
  o.conv = fuzz::ConvMix::Mix;
  const auto r = fuzz::run_fuzz(o, nullptr);
  EXPECT_TRUE(r.failed) << r.reason;
  EXPECT_NE(r.reason.find("conv window"), std::string::npos) << r.reason;
  if (!r.dump_path.empty()) std::filesystem::remove(r.dump_path);
  o.fault = Fault::None;
  o.conv = fuzz::ConvMix::On;
  o.cases = 30;
  for (const char* t : {"replay", "ring", "full_state"}) {
    o.target = t;
    const auto ok = fuzz::run_fuzz(o, nullptr);
    EXPECT_FALSE(ok.failed) << t << ": " << ok.reason;
    EXPECT_EQ(ok.not_covered, "") << t;
  }
}
