// MRoPE session campaigns (docs/target-protocol.md "MRoPE positions (1.10)"): drawn cases per claimed model
// through an implementation's mrope_* commands, judged per token against the reference tracker
// (replayssm/mrope/mrope_session.hpp). What `replayssm mrope fuzz` runs, and `conform` for a target claiming mrope.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/mrope/mrope_session.hpp"

namespace replayssm::cli {

struct MropeCampaignResult {
  std::string target;
  std::vector<std::string> models;  // the models run (the claimed ones, or those asked for)
  bool covered = true;              // false: the target does not claim mrope (why says so)
  std::string why;
  bool failed = false;
  std::uint64_t failing_seed = 0;
  std::string failing_model;
  std::optional<mrope::SessionFailure> failure;
  std::string reproduce;            // the command line that re-runs the failing case alone
  mrope::SessionCoverage coverage;
  std::vector<std::string> unmet;   // what the claim left unexercised
  nlohmann::ordered_json to_json() const;
};

// Case c of model m draws from seed + c. `target` is exec:'COMMAND' or "reference" (the reference session).
// `models` empty: every model the target claims. Stops at the first failing case; prints one line per model,
// the failure with its command and reproduce line, and the coverage line to `out`.
MropeCampaignResult run_mrope_campaign(const std::string& target, const std::vector<std::string>& models, int cases,
                                       std::uint64_t seed, std::ostream& out);

// The session target behind `target` (exec:'COMMAND' or "reference"); Error("target") otherwise.
std::unique_ptr<mrope::SessionTarget> mrope_session_target(const std::string& target);

}  // namespace replayssm::cli
