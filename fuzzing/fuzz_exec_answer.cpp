// libFuzzer harness: answers of an implementation in its own process (conformance/exec/answers.cpp), without a
// process: the frame is decoded, then read as an error answer, a hello answer (with its capabilities), a
// digest, a pool answer of two geometries, a fixture answer (the out.* tensors of a recurrent fixture) and the
// conv component's answers (protocol 1.5: conv_step, conv_committed_state, conv_pool through the judge's mirror)
// and an mrope_step answer (protocol 1.10).
#include "answers.hpp"
#include "exec_conv.hpp"
#include "exec_mrope.hpp"
#include "replayssm/lifecycle/conv_component.hpp"
#include "harness.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Frame a;
  try {
    a = decode_frame(fuzzing::bytes_of(data, size), "target.fuzz.frame");
  } catch (const Error&) {
    return 0;
  }
  try {
    exec::check_answer_ok(a.msg, "fuzz");
  } catch (const Error&) {
  }
  try {
    const exec::Capabilities c = exec::parse_hello_answer(a.msg);
    // What the judge prints and compares: the capabilities read back from their own JSON form.
    REPLAYSSM_FUZZ_CHECK(exec::Capabilities::from_json(c.to_json()).to_json() == c.to_json());
    (void)c.unsupported(preset("tiny-kda"), 4);
  } catch (const Error&) {
  }
  try {
    if (a.msg.contains("digest")) (void)exec::parse_hex64(a.msg.at("digest"), "target.fuzz.digest");
  } catch (const Error&) {
  }
  try {
    exec::parse_capture_answer(a);  // accepted only as an ok answer without tensors
    REPLAYSSM_FUZZ_CHECK(a.tensors.empty());
  } catch (const Error&) {
  }
  try {
    (void)exec::parse_pool_answer(a, 3, 8, DType::F32);
  } catch (const Error&) {
  }
  try {
    (void)exec::parse_pool_answer(a, 1, 2, DType::BF16);
  } catch (const Error&) {
  }
  try {
    const std::map<std::string, Tensor> expected{{"out.o", Tensor{DType::F32, {2, 1, 2}, {}}},
                                                 {"out.state", Tensor{DType::BF16, {1, 2, 2}, {}}}};
    const auto got = exec::parse_fixture_answer(a, expected);
    REPLAYSSM_FUZZ_CHECK(got.size() == expected.size());
    for (const auto& [name, t] : got)
      REPLAYSSM_FUZZ_CHECK(t.dtype == expected.at(name).dtype && t.shape == expected.at(name).shape);
  } catch (const Error&) {
  }
  try {  // protocol 1.10: an mrope_step answer of N = 3 tokens, 2 q heads, 1 k head, head_dim 4
    const auto m = exec::parse_mrope_step_answer(a, 3, 2, 1, 4);
    REPLAYSSM_FUZZ_CHECK(m.positions.size() == 9 && m.index.size() == 3 && m.q_rot.size() == 24 && m.k_rot.size() == 12);
  } catch (const Error&) {
  }
  static const ref::EngineSetup conv = [] {
    auto s = ref::make_setup(preset("tiny-gdn"), 1, 2, 4);
    s.conv = ref::make_conv_setup(s.cfg, 2, 3, DType::BF16);
    return s;
  }();
  try {
    const auto y = exec::parse_conv_step_answer(a, conv, 2);
    REPLAYSSM_FUZZ_CHECK(static_cast<std::int32_t>(y.size()) == conv.cfg.num_layers);
    for (const auto& v : y) REPLAYSSM_FUZZ_CHECK(static_cast<std::int64_t>(v.size()) == 2 * conv.conv->cfg.channels());
  } catch (const Error&) {
  }
  try {
    const auto w = exec::parse_conv_committed_state_answer(a, conv);
    REPLAYSSM_FUZZ_CHECK(static_cast<std::int64_t>(w.size()) == conv.conv->cfg.state_elems());
  } catch (const Error&) {
  }
  try {
    exec::ConvPoolMirror m;
    m.reset(conv);
    const auto& pool = m.apply(0, a);
    REPLAYSSM_FUZZ_CHECK(static_cast<std::int64_t>(pool.size()) == conv.num_slots * exec::conv_stride(*conv.conv));
  } catch (const Error&) {
  }
  return 0;
}
