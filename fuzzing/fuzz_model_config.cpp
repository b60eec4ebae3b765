// libFuzzer harness: model configuration JSON (core/src/config.cpp config_from_json), read from text as every
// file format of the project reads it (strict_json.hpp). An accepted config survives to_json and back.
#include "harness.hpp"
#include "replayssm/config.hpp"
#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ModelConfig c;
  try {
    c = config_from_json(parse_strict_json(fuzzing::text_of(data, size), "config"));
  } catch (const Error&) {
    return 0;
  }
  const nlohmann::json j = to_json(c);
  REPLAYSSM_FUZZ_CHECK(to_json(config_from_json(j)) == j);
  return 0;
}
