// libFuzzer harness: the safetensors reader (core/src/safetensors.cpp parse_safetensors).
// Accepted files must survive a write/read round trip unchanged; tight caps must refuse, never crash.
#include "harness.hpp"
#include "replayssm/error.hpp"
#include "replayssm/safetensors.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = fuzzing::bytes_of(data, size);
  try {
    (void)parse_safetensors(bytes, "fuzz", SafetensorsLimits{64, 4096});
  } catch (const Error&) {
  }
  SafetensorsFile file;
  try {
    file = parse_safetensors(bytes, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  const auto again = parse_safetensors(serialize_safetensors(file), "round trip");
  REPLAYSSM_FUZZ_CHECK(again == file);
  return 0;
}
