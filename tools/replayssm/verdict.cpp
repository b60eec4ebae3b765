// Verdicts per target from campaign records (verdict.hpp).
#include "verdict.hpp"

#include <iostream>
#include <map>

namespace replayssm::cli {

nlohmann::json TargetVerdict::to_json() const {
  return nlohmann::json{{"target", target}, {"verdict", fuzz::to_string(level)}, {"unmet", unmet},
                        {"coverage", coverage.to_json()}};
}

std::vector<TargetVerdict> campaign_verdicts(const nlohmann::json& campaigns, const fuzz::Requirements& r,
                                             const std::vector<std::string>& also_unmet, bool also_failed) {
  struct Acc {
    std::vector<fuzz::Claim> claims;
    fuzz::Coverage coverage;
    bool failed = false;
    bool engine = false;
    long engine_cases = 0;
  };
  std::map<std::string, Acc> by_target;
  std::vector<std::string> order;
  for (const auto& c : campaigns) {
    // An engine-level campaign is its own verdict: judged by request events, it claims no kernel envelope.
    const bool engine = c.value("level", std::string()) == "engine";
    const std::string name = c.value("target", std::string("?"));
    const std::string t = engine && name.rfind("engine:", 0) != 0 ? "engine:" + name : name;
    if (!by_target.count(t)) order.push_back(t);
    auto& a = by_target[t];
    a.failed = a.failed || c.value("failed", false);
    if (engine) {
      a.engine = true;
      a.engine_cases += c.value("cases_passed", 0);
      continue;
    }
    if (c.contains("coverage")) a.coverage.merge(fuzz::Coverage::from_json(c.at("coverage")));
    if (c.value("covered", false) && c.contains("envelope"))
      a.claims.push_back(fuzz::Claim{parse_op(c.value("op", std::string("gdn"))), fuzz::Envelope::from_json(c.at("envelope"))});
  }
  std::vector<TargetVerdict> out;
  for (const auto& t : order) {
    const auto& a = by_target.at(t);
    TargetVerdict v;
    v.target = t;
    if (a.engine) {
      v.level = fuzz::level_of(a.failed, a.engine_cases > 0, {});
      if (a.engine_cases == 0 && !a.failed) v.unmet.push_back("no engine-level case passed");
      out.push_back(std::move(v));
      continue;
    }
    v.coverage = a.coverage;
    v.unmet = fuzz::unmet(a.claims, a.coverage, r);
    v.unmet.insert(v.unmet.end(), also_unmet.begin(), also_unmet.end());
    v.level = fuzz::level_of(a.failed || also_failed, !a.claims.empty(), v.unmet);
    if (a.claims.empty()) v.unmet.insert(v.unmet.begin(), "the target covers none of the campaigns' configurations");
    out.push_back(std::move(v));
  }
  return out;
}

nlohmann::json requirements_json(const fuzz::Requirements& r) {
  return nlohmann::json{{"min_cases_per_value", r.min_cases_per_value}, {"min_rows", r.min_real_rows},
                        {"exhaustive_accepted", r.exhaustive_accepted_up_to}};
}

fuzz::Requirements requirements_from(const nlohmann::json& report) {
  fuzz::Requirements r;
  if (!report.contains("requirements")) return r;
  const auto& j = report.at("requirements");
  r.min_cases_per_value = j.value("min_cases_per_value", r.min_cases_per_value);
  r.min_real_rows = j.value("min_rows", r.min_real_rows);
  r.exhaustive_accepted_up_to = j.value("exhaustive_accepted", r.exhaustive_accepted_up_to);
  return r;
}

fuzz::Level overall(const std::vector<TargetVerdict>& v) {
  if (v.empty()) return fuzz::Level::Incomplete;
  fuzz::Level worst = fuzz::Level::Conformant;
  for (const auto& t : v) {
    if (t.level == fuzz::Level::NotConformant) return fuzz::Level::NotConformant;
    if (t.level == fuzz::Level::Incomplete) worst = fuzz::Level::Incomplete;
  }
  return worst;
}

void print_verdicts(const std::vector<TargetVerdict>& v) {
  for (const auto& t : v) {
    std::cout << "== verdict for " << t.target << ": " << fuzz::to_string(t.level) << "\n";
    if (t.coverage.cases > 0) std::cout << fuzz::matrix_text(t.coverage);
    for (const auto& u : t.unmet) std::cout << "  not exercised: " << u << "\n";
  }
}

}  // namespace replayssm::cli
