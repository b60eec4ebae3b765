// One RapidCheck run of a campaign property (the kernel-level and the engine-level campaigns share it): the
// campaign's own seed and budget (RC_PARAMS's seed does not apply), the outcome, and the file a failing case
// is dumped to.
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <sstream>
#include <string>

namespace replayssm::fuzz {

struct PropertyOutcome {
  enum class Kind { Passed, Failed, CouldNotRun } kind = Kind::Passed;
  int cases_passed = 0;         // successful cases before the failing one (or all of them)
  std::string description;      // RapidCheck's description of the failure / why it could not run
  std::string counterexample;   // the shrunk counterexample as RapidCheck prints it
};

// The budgets of one campaign (docs/testing.md, "Campaigns on slow targets"): shrinking bounded in candidate
// runs and seconds (or off), a time budget after which no new case starts, and a watchdog limit after which a
// campaign stuck in one case is ended as a failure naming its seed. Defaults keep a campaign on a slow target
// from shrinking without end.
struct CampaignControl {
  int shrink_steps = 500;        // shrink candidates run at most
  double shrink_seconds = 300;   // seconds of shrinking at most
  bool no_shrink = false;        // report the first failing case as found
  double time_budget = 0;        // seconds; 0: none. No case starts after it; the report says so
  double time_limit = 3600;      // seconds one case may run before the watchdog ends the process; 0: none
};

// A stop requested by SIGINT or SIGTERM (install_stop_signals): the running campaign starts no further case or
// shrink step, and its report says it was interrupted.
int stop_signal();                 // 0, or the signal number
void install_stop_signals();       // idempotent
// What the watchdog does after printing its message (the CLI writes its partial report here); then the process
// exits with status 1. Default: nothing.
void set_watchdog_handler(std::function<void(const std::string& message)> f);

// The state of one campaign's run, consulted by its property before every case: whether the case is skipped
// (budget, signal, shrink budget spent), the shrink progress line, and how the run ended.
class CampaignRun {
 public:
  CampaignRun(const CampaignControl& c, std::string name, std::ostream* progress);
  ~CampaignRun();  // disarms the watchdog
  // Before a case: false when it must not run (counted as nothing). Arms the watchdog for the case.
  bool begin_case(std::uint64_t case_seed, std::uint64_t campaign_seed);
  // After a case ran: `failed` tells whether it failed (the first failure starts shrinking); a case RapidCheck
  // discarded counts as nothing.
  void end_case(bool failed, std::size_t commands, bool discarded = false);
  bool shrinking() const { return shrinking_; }
  int cases_run() const { return cases_run_; }
  int shrink_steps() const { return shrink_steps_; }
  // "" when the run ran to its end; else "time budget of S s", "signal N", "shrink budget (K steps)".
  const std::string& ended_by() const { return ended_by_; }

 private:
  CampaignControl c_;
  std::string name_;
  std::ostream* progress_;
  std::chrono::steady_clock::time_point t0_, shrink_t0_;
  bool shrinking_ = false;
  int cases_run_ = 0, shrink_steps_ = 0;
  std::size_t best_ = 0;
  std::string ended_by_;
};

// Runs `prop` for `cases` cases of size up to `max_size` from `seed`, under the RapidCheck id `id`.
template <class Prop>
PropertyOutcome run_property(const Prop& prop, const std::string& id, std::uint64_t seed, int cases, int max_size,
                             bool no_shrink = false) {
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = cases;
  params.maxSize = max_size;
  params.disableShrinking = no_shrink;
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
