// One RapidCheck run of a campaign property (the kernel-level and the engine-level campaigns share it): the
// campaign's own seed and budget (RC_PARAMS's seed does not apply), the outcome, and the file a failing case
// is dumped to.
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>

#include <cstdint>
#include <sstream>
#include <string>

namespace replayssm::fuzz {

struct PropertyOutcome {
  enum class Kind { Passed, Failed, CouldNotRun } kind = Kind::Passed;
  int cases_passed = 0;         // successful cases before the failing one (or all of them)
  std::string description;      // RapidCheck's description of the failure / why it could not run
  std::string counterexample;   // the shrunk counterexample as RapidCheck prints it
};

// Runs `prop` for `cases` cases of size up to `max_size` from `seed`, under the RapidCheck id `id`.
template <class Prop>
PropertyOutcome run_property(const Prop& prop, const std::string& id, std::uint64_t seed, int cases, int max_size) {
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = cases;
  params.maxSize = max_size;
  rc::detail::TestMetadata meta;
  meta.id = id;
  meta.description = id;
  const auto result = rc::detail::checkTestable(prop, meta, params);
  PropertyOutcome out;
  rc::detail::SuccessResult ok;
  rc::detail::FailureResult bad;
  std::ostringstream os;
  if (result.match(ok)) {
    out.cases_passed = ok.numSuccess;
  } else if (result.match(bad)) {
    out.kind = PropertyOutcome::Kind::Failed;
    out.cases_passed = bad.numSuccess;
    out.description = bad.description;
    rc::detail::printResultMessage(bad, os);
    out.counterexample = os.str();
  } else {
    out.kind = PropertyOutcome::Kind::CouldNotRun;
    rc::detail::printResultMessage(result, os);
    out.description = os.str();
  }
  return out;
}

// DIR/fuzz-failure-<prefix><name>-<seed>.safetensors (DIR created; "." when empty). An exec: target's name is
// a command line (slashes, spaces): its file is named by the command's digest, exec-<digest64>.
std::string failure_dump_path(const std::string& dir, const std::string& prefix, const std::string& target,
                              std::uint64_t seed);

}  // namespace replayssm::fuzz
