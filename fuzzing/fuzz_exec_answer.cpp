// libFuzzer harness: answers of an implementation in its own process (conformance/exec/answers.cpp), without a
// process: the frame is decoded, then read as an error answer, a hello answer (with its capabilities), a
// digest, a pool answer of two geometries and a fixture answer (the out.* tensors of a recurrent fixture).
#include "answers.hpp"
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
  return 0;
}
