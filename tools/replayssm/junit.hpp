// JUnit XML reports (`--junit FILE` of conform, fuzz, check and `report merge`): one <testcase> per fixture and
// per fuzz campaign, built from the same JSON records the --json reports hold, so a merged JSON report gives
// the same JUnit file the shards would have. A failure's message names the worst element (fixtures) or the
// first disagreement (campaigns) and its text holds the command that reproduces it; a campaign the target
// does not cover is <skipped/>. Written atomically: a CI system never reads half a file.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace replayssm::cli {

struct JUnitCase {
  enum class Status { Passed, Failed, Skipped };
  std::string classname;
  std::string name;
  double seconds = 0;
  Status status = Status::Passed;
  std::string message;  // one line: why it failed or was skipped
  std::string text;     // details: the repro command, the shrunk counterexample, per-tensor lines
};

struct JUnitSuite {
  std::string name;
  std::vector<JUnitCase> cases;
};

// One fixture's check record (FixtureCheck::to_json, plus "classname" when the caller sets one).
JUnitCase junit_fixture(const nlohmann::json& record, const std::string& classname);
// One campaign's record (FuzzReport::to_json plus the CLI's "preset" and "rerun").
JUnitCase junit_campaign(const nlohmann::json& record, const std::string& classname);

// The XML document (UTF-8; characters XML 1.0 cannot hold are replaced by '?').
std::string junit_xml(const std::vector<JUnitSuite>& suites);
// junit_xml written atomically to path; Error("junit") when it cannot be written.
void write_junit(const std::string& path, const std::vector<JUnitSuite>& suites);

}  // namespace replayssm::cli
