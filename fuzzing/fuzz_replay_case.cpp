// libFuzzer harness: `replayssm fuzz --replay` case files (reference/fuzz/fuzz_case.cpp parse_fuzz_case), the
// parsing of a dump into (setup, target, fault, commands) without running the judge.
#include <nlohmann/json.hpp>

#include "fuzz_case.hpp"
#include "harness.hpp"
#include "replayssm/error.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::FuzzCase c;
  try {
    c = fuzz::parse_fuzz_case(parse_safetensors(fuzzing::bytes_of(data, size), "fuzz"));
  } catch (const Error&) {
    return 0;
  }
  const fuzz::FuzzCase d = fuzz::parse_fuzz_case(parse_safetensors(serialize_safetensors(fuzz::fuzz_case_file(c))));
  REPLAYSSM_FUZZ_CHECK(d.setup.to_json() == c.setup.to_json() && d.target == c.target && d.fault == c.fault &&
                       d.commands.size() == c.commands.size());
  for (std::size_t i = 0; i < c.commands.size(); ++i)
    REPLAYSSM_FUZZ_CHECK(d.commands[i].to_json() == c.commands[i].to_json());
  return 0;
}
