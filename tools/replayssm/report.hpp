// The CLI's machine-readable reports: written atomically, turned into JUnit suites, and merged across shards
// (`replayssm report merge`). Every report carries "command" (conform, fuzz, check, merge) and, when sharded,
// "shard": {"index", "count"}; a campaign record carries "campaign" (the command line that runs the whole
// campaign) and "rerun" (the one that reruns this shard of it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "junit.hpp"

namespace replayssm::cli {

// report.dump(2) written atomically to path; Error(field) when it cannot be written.
void write_json_report(const std::string& path, const nlohmann::json& report, const std::string& field = "json");

// The JUnit suites of a report of any command: "fixtures" (check, merge), "committed_fixtures" and
// "determinism" (conform), "campaigns" (fuzz, merge) and "fuzz" (conform).
std::vector<JUnitSuite> junit_suites(const nlohmann::json& report);

// Merges shard reports (`names` are their files, for messages): fixtures concatenated, campaigns with the
// same "campaign" summed (cases_passed, seconds; failed if any shard failed, every failure kept with its
// repro). "problems" lists what makes the merged verdict a failure besides a failing fixture or campaign: a
// shard missing, given twice or of another shard count. "ok" is the verdict.
nlohmann::json merge_reports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names);

}  // namespace replayssm::cli
