// Fixtures judged through an exec: target (conformance/exec/exec_fixtures.hpp), printed for `check --target`
// and `conform --target exec:...`.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "exec_fixtures.hpp"

namespace replayssm::cli {

ThroughCounts check_through_and_print(const std::string& command, const std::vector<std::string>& files,
                                      nlohmann::json* report, bool quiet) {
  ThroughCounts n;
  std::map<std::string, int> reasons;  // not covered: why -> how many
  auto arr = nlohmann::json::array();
  for (const auto& f : files) {
    const auto r = exec::check_fixture_through(command, f);
    if (!r.covered) {
      ++n.not_covered;
      ++reasons[r.why];
    } else if (r.ok) {
      ++n.passed;
    } else {
      ++n.failed;
    }
    if (!quiet || (r.covered && !r.ok)) std::cout << r.str() << "\n";
    arr.push_back(r.to_json());
  }
  if (quiet)
    for (const auto& [why, count] : reasons) std::cout << "not covered: " << count << " fixture(s): " << why << "\n";
  std::cout << n.passed << " passed, " << n.failed << " failed, " << n.not_covered << " not covered\n";
  if (report) *report = arr;
  return n;
}

}  // namespace replayssm::cli
