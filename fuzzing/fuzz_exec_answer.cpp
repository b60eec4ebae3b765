// libFuzzer harness: answers of an implementation in its own process (conformance/exec/answers.cpp), without a
// process: the frame is decoded, then read as an error answer, a hello answer (with its capabilities), a
// digest and a pool answer of two geometries.
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
    (void)exec::parse_pool_answer(a, 3, 8, DType::F32);
  } catch (const Error&) {
  }
  try {
    (void)exec::parse_pool_answer(a, 1, 2, DType::BF16);
  } catch (const Error&) {
  }
  return 0;
}
