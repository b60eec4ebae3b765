// The verdict beside every run of fuzz, conform, check --target and report merge (docs/lifecycle.md, "Verdict
// levels"): per target, what its campaigns claimed (their envelopes), what they exercised (the coverage matrix)
// and whether anything failed, judged by fuzz::unmet and fuzz::level_of; printed with the matrix and written
// into the JSON and JUnit reports.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coverage.hpp"

namespace replayssm::cli {

struct TargetVerdict {
  std::string target;
  fuzz::Level level = fuzz::Level::Incomplete;
  std::vector<std::string> unmet;  // why INCOMPLETE
  fuzz::Coverage coverage;
  nlohmann::json to_json() const;
};

// The requirements of the command line (--min-cases-per-value, --min-rows, --exhaustive-accepted).
struct VerdictArgs {
  fuzz::Requirements requirements;
};

// One verdict per target of a report's "campaigns" (kernel level): their envelopes and coverage merged, the
// extra requirements (`also_unmet`, e.g. a fixture op none of whose fixtures ran) and failures (`also_failed`)
// of the same target added. A campaign not covered claims nothing.
std::vector<TargetVerdict> campaign_verdicts(const nlohmann::json& campaigns, const fuzz::Requirements& r,
                                             const std::vector<std::string>& also_unmet = {}, bool also_failed = false);
// The requirements as a report records them, and back (report merge judges merged coverage by them).
nlohmann::json requirements_json(const fuzz::Requirements& r);
fuzz::Requirements requirements_from(const nlohmann::json& report);
// The worst level of the verdicts (INCOMPLETE when there are none).
fuzz::Level overall(const std::vector<TargetVerdict>& v);
// Prints "== verdict for T: LEVEL", the coverage matrix and every unmet requirement.
void print_verdicts(const std::vector<TargetVerdict>& v);

}  // namespace replayssm::cli
