// libFuzzer harness: engine-level case files (reference/fuzz/engine_case.cpp parse_engine_case), the parsing of
// a dump into (setup, engine options, target, fault, events) without running the judge.
#include <nlohmann/json.hpp>

#include "engine_case.hpp"
#include "harness.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::EngineCase c;
  try {
    c = fuzz::parse_engine_case(parse_safetensors(fuzzing::bytes_of(data, size), "fuzz"));
  } catch (const Error&) {
    return 0;
  }
  const fuzz::EngineCase d =
      fuzz::parse_engine_case(parse_safetensors(serialize_safetensors(fuzz::engine_case_file(c))));
  REPLAYSSM_FUZZ_CHECK(d.setup.base.to_json() == c.setup.base.to_json() && d.target == c.target &&
                       d.fault == c.fault && d.events.size() == c.events.size() &&
                       d.variants.size() == c.variants.size());
  for (std::size_t i = 0; i < c.variants.size(); ++i)
    REPLAYSSM_FUZZ_CHECK(d.variants[i].to_json() == c.variants[i].to_json());
  for (std::size_t i = 0; i < c.events.size(); ++i)
    REPLAYSSM_FUZZ_CHECK(d.events[i].to_json() == c.events[i].to_json());
  return 0;
}
