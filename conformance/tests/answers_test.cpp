// Parsing of an implementation's answers without a process (conformance/exec/answers.hpp). Hostile answers
// found while fuzzing (docs/fuzzing.md) escaped as nlohmann::json exceptions that name no field.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "answers.hpp"
#include "exec_conv.hpp"
#include "exec_mrope.hpp"
#include "replayssm/lifecycle/conv_component.hpp"
#include "replayssm/error.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using nlohmann::json;

namespace {
using replayssm::testing::field_of;
json hello() { return json{{"ok", true}, {"protocol", "replayssm.target"}, {"version", {1, 0}}}; }
}  // namespace

TEST(ExecAnswers, OkMustBeTrue) {
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json{{"ok", true}}, "step"); }), "<no error>");
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json{{"ok", false}}, "step"); }), "target.step");
  // "ok": "yes" and "ok": 1 threw nlohmann::json::type_error (value("ok", false) on a non-boolean).
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json{{"ok", "yes"}}, "step"); }), "target.step");
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json{{"ok", 1}}, "step"); }), "target.step");
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json::array(), "step"); }), "target.step");
  EXPECT_EQ(field_of([] {
              exec::check_answer_ok(json{{"ok", false}, {"error", {{"field", "rows[1]"}, {"message", "no"}}}}, "commit");
            }),
            "target.commit.rows[1]");
  // An answer whose text is not valid UTF-8 is still reported (dump() threw type_error 316 before).
  EXPECT_EQ(field_of([] { exec::check_answer_ok(json{{"ok", false}, {"x", std::string("\xff")}}, "pool"); }),
            "target.pool");
}

TEST(ExecAnswers, HelloIsCheckedWithoutTypeErrors) {
  EXPECT_NO_THROW(exec::parse_hello_answer(hello()));
  json h = hello();
  h["protocol"] = 7;  // value("protocol", "") threw type_error
  EXPECT_EQ(field_of([&] { exec::parse_hello_answer(h); }), "target.hello.protocol");
  h = hello();
  h["version"] = {4294967297ll, 0};  // get<int>() read 2^32 + 1 as major version 1
  EXPECT_EQ(field_of([&] { exec::parse_hello_answer(h); }), "target.hello.version");
  h = hello();
  h["version"] = {1.0, 0};
  EXPECT_EQ(field_of([&] { exec::parse_hello_answer(h); }), "target.hello.version");
  h = hello();
  h["capabilities"] = {{"max_T", "8"}};
  EXPECT_EQ(field_of([&] { exec::parse_hello_answer(h); }), "target.hello.capabilities.max_T");
}

TEST(ExecAnswers, Hex64) {
  EXPECT_EQ(exec::parse_hex64("ffffffffffffffff", "d"), 0xffffffffffffffffull);
  EXPECT_EQ(exec::parse_hex64("0A", "d"), 10u);
  for (const char* bad : {"", "-1", " 1", "0x1", "11111111111111111", "g"})
    EXPECT_EQ(field_of([&] { exec::parse_hex64(bad, "d"); }), "d") << bad;
  EXPECT_EQ(field_of([] { exec::parse_hex64(12, "d"); }), "d");
}

TEST(ExecAnswers, PoolAnswer) {
  Frame a;
  a.msg = json{{"ok", true}, {"digests", {"1", "2", "3", "4"}}, {"slots", {1}}};
  a.tensors["values"] = Tensor::zeros(DType::F32, {1, 8});
  const auto p = exec::parse_pool_answer(a, 2, 8, DType::F32);
  EXPECT_EQ(p.digests, (std::vector<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(p.slots, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(p.values.size(), 8u);
  EXPECT_EQ(field_of([&] { exec::parse_pool_answer(a, 3, 8, DType::F32); }), "target.pool.digests");
  EXPECT_EQ(field_of([&] { exec::parse_pool_answer(a, 2, 8, DType::BF16); }), "target.pool.values");
  a.msg["slots"] = {1, 1};
  a.tensors["values"] = Tensor::zeros(DType::F32, {2, 8});
  EXPECT_EQ(field_of([&] { exec::parse_pool_answer(a, 2, 8, DType::F32); }), "target.pool.slots");
  a.msg["slots"] = {2};
  EXPECT_EQ(field_of([&] { exec::parse_pool_answer(a, 2, 8, DType::F32); }), "target.pool.slots");
  a.msg = json::array();
  EXPECT_EQ(field_of([&] { exec::parse_pool_answer(a, 2, 8, DType::F32); }), "target.pool.digests");
}

// The fixture-op capability: op names are checked, and only an implementation answering 1.1 or later runs them.
TEST(ExecAnswers, FixtureOpsAndTheMinorVersion) {
  auto h = hello();
  h["capabilities"] = {{"fixture_ops", {"recurrent", "mtp_batch"}}};
  const auto v10 = exec::parse_hello_answer(h);
  EXPECT_EQ(v10.protocol_minor, 0);
  EXPECT_FALSE(v10.runs_fixture_op("recurrent"));  // 1.0 has no fixture command
  h["version"] = {1, 1};
  const auto v11 = exec::parse_hello_answer(h);
  EXPECT_TRUE(v11.runs_fixture_op("recurrent") && v11.runs_fixture_op("mtp_batch"));
  EXPECT_FALSE(v11.runs_fixture_op("chunked"));
  h["version"] = {1, 7};  // a newer minor is read
  EXPECT_TRUE(exec::parse_hello_answer(h).runs_fixture_op("recurrent"));
  h["version"] = {1, -1};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.version");
  h["version"] = {1, 1};
  for (const json& bad : {json{"mtp-verify"}, json{"recurrent", "recurrent"}, json{3}, json("recurrent")}) {
    h["capabilities"] = {{"fixture_ops", bad}};
    EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.fixture_ops")
        << bad.dump();
  }
}

// A fixture answer holds exactly the expected out.* tensors, each of the expected dtype and shape.
TEST(ExecAnswers, FixtureAnswer) {
  const std::map<std::string, Tensor> want{{"out.o", Tensor{DType::F32, {2, 1, 2}, {}}},
                                           {"out.state", Tensor{DType::BF16, {1, 2, 2}, {}}}};
  Frame a;
  a.tensors["out.o"] = Tensor::zeros(DType::F32, {2, 1, 2});
  a.tensors["out.state"] = Tensor::zeros(DType::BF16, {1, 2, 2});
  EXPECT_EQ(exec::parse_fixture_answer(a, want).size(), 2u);
  auto field = [&](const Frame& f) { return field_of([&] { (void)exec::parse_fixture_answer(f, want); }); };
  Frame missing = a;
  missing.tensors.erase("out.state");
  EXPECT_EQ(field(missing), "target.fixture.out.state");
  Frame extra = a;
  extra.tensors["out.bonus"] = Tensor::zeros(DType::F32, {1});
  EXPECT_EQ(field(extra), "target.fixture.out.bonus");
  Frame dtype = a;
  dtype.tensors["out.state"] = Tensor::zeros(DType::F32, {1, 2, 2});
  EXPECT_EQ(field(dtype), "target.fixture.out.state");
  Frame shape = a;
  shape.tensors["out.o"] = Tensor::zeros(DType::F32, {2, 2, 1});
  EXPECT_EQ(field(shape), "target.fixture.out.o");
  Frame unprefixed = a;
  unprefixed.tensors["o"] = unprefixed.tensors.at("out.o");
  unprefixed.tensors.erase("out.o");
  EXPECT_EQ(field(unprefixed), "target.fixture.o");
}

// Protocol 1.2: the PAD conventions and graph padding an implementation claims (defaults: minus_one, none).
TEST(ExecAnswers, PadConventionsAndGraphPaddingCapabilities) {
  const auto plain = exec::parse_hello_answer(hello());
  EXPECT_EQ(plain.pad_conventions, std::vector<ref::PadConvention>{ref::PadConvention::MinusOne});
  EXPECT_FALSE(plain.graph_padding);
  json h = hello();
  h["version"] = {1, 2};
  h["capabilities"] = {{"pad_conventions", {"null_block", "pad_slot"}}, {"graph_padding", true}};
  const auto c = exec::parse_hello_answer(h);
  EXPECT_EQ(c.pad_conventions, (std::vector<ref::PadConvention>{ref::PadConvention::NullBlock, ref::PadConvention::PadSlot}));
  EXPECT_TRUE(c.graph_padding);
  EXPECT_EQ(exec::Capabilities::from_json(c.to_json()).pad_conventions, c.pad_conventions);
  for (const json& bad : {json{{"pad_conventions", {"zero"}}}, json{{"pad_conventions", json::array()}},
                          json{{"pad_conventions", "null_block"}}})
    EXPECT_EQ(field_of([&] { exec::Capabilities::from_json(bad); }), "target.hello.capabilities.pad_conventions")
        << bad.dump();
  EXPECT_EQ(field_of([] { exec::Capabilities::from_json(json{{"graph_padding", 1}}); }),
            "target.hello.capabilities.graph_padding");
}

// Protocol 1.4: the capture capability counts only from an implementation answering 1.4 or later, and a capture's
// answer carries no tensor.
TEST(ExecAnswers, CaptureIsClaimedOnlyFrom1_4AndAnswersNoTensor) {
  EXPECT_FALSE(exec::parse_hello_answer(hello()).captures());
  json h = hello();
  h["capabilities"] = {{"capture", true}};
  h["version"] = {1, 3};
  const auto older = exec::parse_hello_answer(h);
  EXPECT_TRUE(older.capture);
  EXPECT_FALSE(older.captures());  // a 1.3 implementation is never sent the command, whatever it claims
  h["version"] = {1, 4};
  EXPECT_TRUE(exec::parse_hello_answer(h).captures());
  EXPECT_TRUE(exec::Capabilities::from_json(exec::parse_hello_answer(h).to_json()).capture);
  EXPECT_EQ(field_of([] { exec::Capabilities::from_json(json{{"capture", "yes"}}); }), "target.hello.capabilities.capture");

  Frame a;
  a.msg = json{{"ok", true}, {"compute_s", 0.1}};
  EXPECT_EQ(field_of([&] { exec::parse_capture_answer(a); }), "<no error>");
  a.tensors["o.0"] = Tensor::zeros(DType::F32, {1, 2});
  EXPECT_EQ(field_of([&] { exec::parse_capture_answer(a); }), "target.capture.o.0");
  Frame refused;
  refused.msg = json{{"ok", false}, {"error", {{"field", "rows"}, {"message", "too many"}}}};
  EXPECT_EQ(field_of([&] { exec::parse_capture_answer(refused); }), "target.capture.rows");
}

// Protocol 1.5: the conv component counts only from an implementation answering 1.5 or later; its answers are
// parsed strictly (exact tensor names, dtypes, shapes) and a conv_pool answer cannot change a slot's digest
// without sending its values.
namespace {
ref::EngineSetup conv_case() {
  auto s = ref::make_setup(preset("tiny-gdn"), 21, 3, 4);
  s.conv = ref::make_conv_setup(s.cfg, 77, 4, DType::BF16, ref::ConvActivation::Silu, true);
  return s;
}
}  // namespace

TEST(ExecAnswers, ConvStateIsClaimedOnlyFrom1_5) {
  json h = hello();
  h["capabilities"] = {{"conv_state", true}};
  h["version"] = {1, 4};
  const auto older = exec::parse_hello_answer(h);
  EXPECT_TRUE(older.conv_state);
  EXPECT_FALSE(older.conv_states());  // a 1.4 implementation is never sent setup.conv nor a conv command
  h["version"] = {1, 5};
  EXPECT_TRUE(exec::parse_hello_answer(h).conv_states());
  EXPECT_TRUE(exec::Capabilities::from_json(exec::parse_hello_answer(h).to_json()).conv_state);
  EXPECT_EQ(field_of([] { exec::Capabilities::from_json(json{{"conv_state", 1}}); }),
            "target.hello.capabilities.conv_state");
}

TEST(ExecAnswers, ConvStepAndCommittedStateAnswersAreStrict) {
  const auto s = conv_case();
  const std::int64_t C = s.conv->cfg.channels(), N = 5;
  auto step = [&](std::function<void(Frame&)> edit) {
    Frame a;
    a.msg = json{{"ok", true}};
    for (int l = 0; l < s.cfg.num_layers; ++l)
      a.tensors["y." + std::to_string(l)] = Tensor::zeros(s.cfg.act_dtype, {N, C});
    edit(a);
    return field_of([&] { exec::parse_conv_step_answer(a, s, N); });
  };
  EXPECT_EQ(step([](Frame&) {}), "<no error>");
  EXPECT_EQ(step([](Frame& a) { a.tensors.erase("y.0"); }), "target.conv_step.y.0");
  EXPECT_EQ(step([&](Frame& a) { a.tensors["y.0"] = Tensor::zeros(s.cfg.act_dtype, {N + 1, C}); }), "target.conv_step.y.0");
  EXPECT_EQ(step([&](Frame& a) { a.tensors["y.0"] = Tensor::zeros(DType::F32 == s.cfg.act_dtype ? DType::BF16 : DType::F32, {N, C}); }),
            "target.conv_step.y.0");
  EXPECT_EQ(step([&](Frame& a) { a.tensors["o.0"] = Tensor::zeros(s.cfg.act_dtype, {N, C}); }), "target.conv_step.o.0");

  Frame st;
  st.msg = json{{"ok", true}};
  st.tensors["state"] = Tensor::zeros(DType::BF16, {C, 3});
  EXPECT_EQ(field_of([&] { exec::parse_conv_committed_state_answer(st, s); }), "<no error>");
  st.tensors["state"] = Tensor::zeros(DType::F32, {C, 3});
  EXPECT_EQ(field_of([&] { exec::parse_conv_committed_state_answer(st, s); }), "target.conv_committed_state.state");
  st.tensors["state"] = Tensor::zeros(DType::BF16, {C, 4});
  EXPECT_EQ(field_of([&] { exec::parse_conv_committed_state_answer(st, s); }), "target.conv_committed_state.state");
}

TEST(ExecAnswers, ConvPoolMirrorNeedsTheValuesOfEveryChangedSlot) {
  const auto s = conv_case();
  const std::int64_t stride = exec::conv_stride(*s.conv);
  EXPECT_EQ(stride, s.conv->cfg.channels() * 3 + 4);
  exec::ConvPoolMirror m;
  m.reset(s);
  EXPECT_FALSE(m.valid(0));
  EXPECT_EQ(m.request(0).msg.at("op"), "conv_pool");
  EXPECT_EQ(m.request(0).msg.at("known").size(), 6u);
  Frame a;
  a.msg = json{{"ok", true}, {"digests", {"1", "2", "0", "0", "0", "0"}}, {"slots", {0}}};
  a.tensors["values"] = Tensor::from_f32(DType::BF16, {1, stride}, std::vector<float>(static_cast<std::size_t>(stride), 1.0f));
  const auto& pool = m.apply(0, a);
  EXPECT_EQ(pool[0], 1.0f);
  EXPECT_TRUE(std::isnan(pool[static_cast<std::size_t>(stride)]));  // slot 1 keeps the poison
  EXPECT_TRUE(m.valid(0));
  m.invalidate();
  EXPECT_FALSE(m.valid(0));
  Frame stale;
  stale.msg = json{{"ok", true}, {"digests", {"1", "2", "5", "0", "0", "0"}}, {"slots", json::array()}};
  EXPECT_EQ(field_of([&] { m.apply(0, stale); }), "target.conv_pool.slots");
  Frame wrong = a;
  wrong.tensors["values"] = Tensor::from_f32(DType::F32, {1, stride}, std::vector<float>(static_cast<std::size_t>(stride), 1.0f));
  EXPECT_EQ(field_of([&] { m.apply(0, wrong); }), "target.conv_pool.values");
  EXPECT_EQ(field_of([&] { m.valid(1); }), "<no error>");
  EXPECT_EQ(field_of([&] { m.valid(s.cfg.num_layers); }), "layer");
}

// l2norm forms by formula and the forms beyond rsqrt_mul / div_sqrt are protocol 1.6: an implementation answering
// 1.5 may not claim them (named error), one answering 1.6 may, by name or by formula.
TEST(ExecAnswers, L2normFormulasNeedProtocol16) {
  auto h = hello();
  h["capabilities"] = {{"l2norms", {"rsqrt_mul", "x / (sqrt(sum(x^2)) + eps)"}}};
  h["version"] = {1, 5};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.l2norms");
  h["version"] = {1, 6};
  const auto c = exec::parse_hello_answer(h);
  ASSERT_EQ(c.l2norms.size(), 2u);
  EXPECT_EQ(c.l2norms[1], L2Norm::DivNormPlusEps);
  h["capabilities"] = {{"l2norms", {"x / sqrt(sum(x^2) + eps)"}}};  // a 1.5 form by its formula
  h["version"] = {1, 5};
  EXPECT_EQ(exec::parse_hello_answer(h).l2norms.at(0), L2Norm::DivSqrt);
  h["capabilities"] = {{"l2norms", {"x / (sum(x^2) + eps)"}}};  // no such form
  h["version"] = {1, 6};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.l2norms");
}

// step_mix is protocol 1.7: parsed strictly whatever the version (a malformed claim names its field), honoured
// only from an implementation answering 1.7 (an older one is sent steps of any mix).
TEST(ExecAnswers, StepMixIsHonouredOnlyFrom1_7) {
  auto h = hello();
  h["capabilities"] = {{"step_mix", {{"one_width", true}}}};
  h["version"] = {1, 6};
  auto c = exec::parse_hello_answer(h);
  EXPECT_TRUE(c.step_mix.one_width);
  EXPECT_TRUE(c.step_mixes().any());
  h["version"] = {1, 7};
  c = exec::parse_hello_answer(h);
  EXPECT_TRUE(c.step_mixes().one_width);
  EXPECT_FALSE(c.step_mixes().prefill_apart);
  h["capabilities"] = {{"step_mix", {{"one_width", "yes"}}}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.step_mix.one_width");
  h["capabilities"] = {{"step_mix", {{"widths", true}}}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.step_mix.widths");
  h["capabilities"] = {{"step_mix", true}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.step_mix");
}

// self_check is protocol 1.8: parsed strictly whatever the version, honoured only from an implementation answering
// 1.8 (an older one is held to the default claim: no kind exact, fp32).
TEST(ExecAnswers, SelfCheckClaimIsHonouredOnlyFrom1_8) {
  auto h = hello();
  h["capabilities"] = {{"self_check", {{"exact", {"repeat"}}, {"tier", "tf32"}}}};
  h["version"] = {1, 7};
  auto c = exec::parse_hello_answer(h);
  EXPECT_EQ(c.self_check.tier, Tier::Tf32);
  EXPECT_TRUE(c.self_claims().is_default());
  h["version"] = {1, 8};
  c = exec::parse_hello_answer(h);
  EXPECT_EQ(c.self_claims().tier, Tier::Tf32);
  EXPECT_EQ(c.self_claims().exact, std::set<ref::SelfCheckKind>{ref::SelfCheckKind::Repeat});
  h["capabilities"] = {{"self_check", {{"exact", {"repeat", "shuffle"}}}}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.self_check.exact[1]");
  h["capabilities"] = {{"self_check", {{"tier", "fp8"}}}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.self_check.tier");
  h["capabilities"] = {{"self_check", "exact"}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.self_check");
}

TEST(ExecAnswers, GraphReplayIsHonouredOnlyFrom1_9WithCaptureAndGraphPadding) {
  auto h = hello();
  h["capabilities"] = {{"capture", true}, {"graph_padding", true}, {"graph_replay", true}};
  h["version"] = {1, 8};
  auto c = exec::parse_hello_answer(h);
  EXPECT_TRUE(c.graph_replay);
  EXPECT_FALSE(c.graph_replays());  // a 1.8 implementation is never sent a replay
  h["version"] = {1, 9};
  EXPECT_TRUE(exec::parse_hello_answer(h).graph_replays());
  EXPECT_TRUE(exec::parse_hello_answer(h).to_json().at("graph_replay").get<bool>());
  h["capabilities"] = {{"capture", true}, {"graph_replay", true}};  // no graph padding
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.graph_replay");
  h["capabilities"] = {{"graph_padding", true}, {"graph_replay", true}};  // no capture
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.graph_replay");
  h["capabilities"] = {{"capture", true}, {"graph_padding", true}, {"graph_replay", "yes"}};
  EXPECT_EQ(field_of([&] { (void)exec::parse_hello_answer(h); }), "target.hello.capabilities.graph_replay");
}

TEST(ExecAnswers, MropeIsHonouredOnlyFrom1_10AndParsedStrictly) {
  auto h = hello();
  h["capabilities"] = {{"mrope", {{"models", {"qwen3.5", "qwen2-vl"}}}}, {"fixture_ops", {"mrope.rotary"}}};
  h["version"] = {1, 9};
  auto c = exec::parse_hello_answer(h);
  EXPECT_EQ(c.mrope_models, (std::vector<std::string>{"qwen3.5", "qwen2-vl"}));
  EXPECT_TRUE(c.mrope_pad_zero);
  EXPECT_FALSE(c.mropes());                         // a 1.9 implementation is never sent an MRoPE command
  EXPECT_FALSE(c.runs_fixture_op("mrope.rotary"));  // nor the fixture op
  h["version"] = {1, 10};
  c = exec::parse_hello_answer(h);
  EXPECT_TRUE(c.mropes());
  EXPECT_TRUE(c.runs_fixture_op("mrope.rotary"));
  h["capabilities"] = {{"mrope", {{"models", {"qwen3.5"}}, {"pad_positions", "any"}}}};
  EXPECT_FALSE(exec::parse_hello_answer(h).mrope_pad_zero);
  for (const nlohmann::json& bad :
       {nlohmann::json{{"models", {"qwen3.5"}}, {"pad", "zero"}}, nlohmann::json{{"models", nlohmann::json::array()}},
        nlohmann::json{{"models", {"qwen4"}}}, nlohmann::json{{"models", {"qwen3.5", "qwen3.5"}}},
        nlohmann::json{{"models", {"qwen3.5"}}, {"pad_positions", "stale"}}, nlohmann::json("qwen3.5")}) {
    h["capabilities"] = {{"mrope", bad}};
    const std::string f = field_of([&] { (void)exec::parse_hello_answer(h); });
    EXPECT_EQ(f.rfind("target.hello.capabilities.mrope", 0), 0u) << bad.dump() << " -> " << f;
  }
}

TEST(ExecAnswers, MropeStepAnswersAreParsedStrictly) {
  auto answer = [] {
    Frame a;
    a.msg = {{"ok", true}};
    a.tensors["positions"] = Tensor::from_i64({3, 2}, {0, 1, 0, 1, 0, 1});
    a.tensors["index"] = Tensor::from_i64({2}, {0, 1});
    a.tensors["q_rot"] = Tensor::from_f32(DType::F32, {2, 1, 4}, std::vector<float>(8, 0.5f));
    a.tensors["k_rot"] = Tensor::from_f32(DType::F32, {2, 1, 4}, std::vector<float>(8, 0.5f));
    return a;
  };
  const auto ok = exec::parse_mrope_step_answer(answer(), 2, 1, 1, 4);
  EXPECT_EQ(ok.index, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(ok.positions.size(), 6u);
  auto missing = answer();
  missing.tensors.erase("index");
  EXPECT_EQ(field_of([&] { (void)exec::parse_mrope_step_answer(missing, 2, 1, 1, 4); }), "target.mrope_step.index");
  auto extra = answer();
  extra.tensors["delta"] = Tensor::from_i64({}, {0});
  EXPECT_EQ(field_of([&] { (void)exec::parse_mrope_step_answer(extra, 2, 1, 1, 4); }), "target.mrope_step.delta");
  auto i32 = answer();
  i32.tensors["positions"] = Tensor::from_i32({3, 2}, {0, 1, 0, 1, 0, 1});
  EXPECT_EQ(field_of([&] { (void)exec::parse_mrope_step_answer(i32, 2, 1, 1, 4); }), "target.mrope_step.positions");
  EXPECT_EQ(field_of([&] { (void)exec::parse_mrope_step_answer(answer(), 2, 2, 1, 4); }), "target.mrope_step.q_rot");
}
