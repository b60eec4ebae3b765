// libFuzzer harness: fixture loading and schema validation (core/src/fixture.cpp) and the golden checks that
// validate a fixture's expectations and re-run the reference on it (reference/fixtures/src/fixture_check.cpp).
#include "harness.hpp"
#include "replayssm/error.hpp"
#include "replayssm/fixture.hpp"
#include "replayssm/fixtures/golden.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Fixture f;
  try {
    f = fixture_from_safetensors(parse_safetensors(fuzzing::bytes_of(data, size), "fuzz"));
  } catch (const Error&) {
    return 0;
  }
  // A loaded fixture writes back and reads again as the same fixture.
  const Fixture g = fixture_from_safetensors(parse_safetensors(serialize_safetensors(fixture_to_safetensors(f))));
  REPLAYSSM_FUZZ_CHECK(g.op == f.op && g.config == f.config && g.seed == f.seed && g.tensors.size() == f.tensors.size());
  // The check never throws; anything but a replayssm::Error inside it is reported as an internal error.
  const ref::FixtureCheck r = ref::check_fixture(f, "fuzz");
  if (r.error.rfind(ref::kInternalErrorPrefix, 0) == 0) {
    std::fprintf(stderr, "check_fixture: %s\n", r.error.c_str());
    std::abort();
  }
  return 0;
}
