#include "report.hpp"

#include "coverage.hpp"

#include <map>
#include <set>

#include "fuzz_args.hpp"
#include "replayssm/atomic_file.hpp"

namespace replayssm::cli {

using nlohmann::json;

namespace {

// Fixture records of a report, with the suite each belongs to.
void collect_fixtures(const json& report, std::vector<std::pair<std::string, json>>& out) {
  for (const auto& r : report.value("fixtures", json::array())) out.emplace_back(r.value("suite", "fixtures"), r);
  for (const auto& dir : report.value("committed_fixtures", json::array()))
    for (const auto& r : dir.value("results", json::array())) out.emplace_back("committed fixtures", r);
  if (report.contains("determinism"))
    for (const auto& r : report.at("determinism").value("results", json::array()))
      out.emplace_back("determinism", r);
}

json campaigns_of(const json& report) {
  if (report.contains("campaigns")) return report.at("campaigns");
  if (report.contains("fuzz")) return report.at("fuzz");
  return json::array();
}

std::string shard_text(const json& s) {
  return std::to_string(s.value("index", 0)) + "/" + std::to_string(s.value("count", 1));
}

// Indices 0..N-1 each exactly once, else a problem line per gap or repeat.
void check_indices(const std::string& what, int count, const std::multiset<int>& seen, json& problems) {
  for (int i = 0; i < count; ++i) {
    const auto n = seen.count(i);
    if (n == 0) problems.push_back(what + ": shard " + std::to_string(i) + "/" + std::to_string(count) + " is missing");
    if (n > 1) problems.push_back(what + ": shard " + std::to_string(i) + "/" + std::to_string(count) + " given " +
                                  std::to_string(n) + " times");
  }
}

}  // namespace

void write_json_report(const std::string& path, const json& report, const std::string& field) {
  write_file_atomic(path, report.dump(2) + "\n", field);
}

std::vector<JUnitSuite> junit_suites(const json& report) {
  std::vector<JUnitSuite> suites;
  auto suite = [&](const std::string& name) -> JUnitSuite& {
    for (auto& s : suites)
      if (s.name == name) return s;
    suites.push_back(JUnitSuite{name, {}});
    return suites.back();
  };
  std::vector<std::pair<std::string, json>> fixtures;
  collect_fixtures(report, fixtures);
  for (const auto& [name, r] : fixtures) suite(name).cases.push_back(junit_fixture(r, "replayssm." + r.value("op", "fixture")));
  // A committed fixture directory that could not be used at all is one failing case of its own.
  for (const auto& dir : report.value("committed_fixtures", json::array()))
    if (dir.contains("error") || (dir.contains("manifest_ok") && !dir.at("manifest_ok").get<bool>())) {
      JUnitCase c;
      c.classname = "replayssm.committed_fixtures";
      c.name = dir.value("dir", std::string("(not found)"));
      c.status = JUnitCase::Status::Failed;
      c.message = dir.contains("error") ? dir.at("error").get<std::string>()
                                       : "manifest: " + dir.value("manifest", std::string());
      suite("committed fixtures").cases.push_back(c);
    }
  // Fixtures run through an implementation (conform/check --target exec:): a fixture outside its capabilities is
  // a skipped case with the reason, never a pass; a failure's repro names the target.
  for (const auto& t : report.value("fixtures_through_target", json::array())) {
    const std::string target = t.value("target", std::string("?"));
    for (const auto& r : t.value("results", json::array())) {
      JUnitCase c = junit_fixture(r, "replayssm.through." + r.value("op", std::string("fixture")));
      if (!r.value("covered", true)) {
        c.status = JUnitCase::Status::Skipped;
        c.message = "not covered: " + r.value("why", std::string());
        c.text.clear();
      } else if (c.status == JUnitCase::Status::Failed) {
        const std::string from = "reproduce: replayssm check ", to = from + "--target " + shell_quote(target) + " ";
        for (std::string* s : {&c.message, &c.text})
          for (auto i = s->find(from); i != std::string::npos; i = s->find(from, i + to.size())) s->replace(i, from.size(), to);
      }
      suite("fixtures through " + target).cases.push_back(c);
    }
  }
  for (const auto& r : campaigns_of(report))
    suite("fuzz campaigns").cases.push_back(junit_campaign(r, "replayssm.fuzz." + r.value("preset", std::string("?"))));
  // The verdict of each target (verdict.hpp): CONFORMANT passes; NOT CONFORMANT and INCOMPLETE fail, the latter
  // with what was not exercised, so that a CI reading only the JUnit file sees what the exit status says.
  for (const auto& v : report.value("verdicts", json::array())) {
    JUnitCase c;
    c.classname = "replayssm.verdict";
    c.name = v.value("target", std::string("?"));
    const std::string level = v.value("verdict", std::string("?"));
    if (level != "CONFORMANT") {
      c.status = JUnitCase::Status::Failed;
      c.message = level;
      const auto unmet = v.value("unmet", json::array());
      if (!unmet.empty()) c.message += ": not exercised: " + unmet.front().get<std::string>();
      for (const auto& u : unmet) c.text += "not exercised: " + u.get<std::string>() + "\n";
    }
    suite("verdict").cases.push_back(c);
  }
  return suites;
}

json merge_reports(const std::vector<json>& reports, const std::vector<std::string>& names) {
  json problems = json::array();
  std::map<std::string, std::multiset<int>> report_shards;  // "command N" -> indices seen
  std::map<std::string, int> report_counts;
  json fixtures = json::array();
  std::vector<std::string> order;  // campaigns in first-seen order
  std::map<std::string, json> merged;
  std::map<std::string, std::multiset<int>> campaign_shards;
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const json& rep = reports[k];
    if (!rep.is_object() || !rep.contains("command")) {
      problems.push_back(names[k] + ": not a replayssm report (no \"command\" key)");
      continue;
    }
    const json shard = rep.value("shard", json{{"index", 0}, {"count", 1}});
    const std::string group = rep.at("command").get<std::string>() + " reports of " +
                              std::to_string(shard.value("count", 1)) + " shard(s)";
    report_shards[group].insert(shard.value("index", 0));
    report_counts[group] = shard.value("count", 1);
    if (rep.contains("committed_fixtures"))
      for (const auto& dir : rep.at("committed_fixtures"))
        if (dir.contains("error") || (dir.contains("manifest_ok") && !dir.at("manifest_ok").get<bool>()))
          problems.push_back(names[k] + ": committed fixtures: " +
                             (dir.contains("error") ? dir.at("error").get<std::string>()
                                                    : dir.value("dir", std::string()) + ": " +
                                                          dir.value("manifest", std::string())));
    std::vector<std::pair<std::string, json>> fx;
    collect_fixtures(rep, fx);
    for (auto& [suite, r] : fx) {
      r["suite"] = suite;
      fixtures.push_back(r);
    }
    for (const auto& c : campaigns_of(rep)) {
      const std::string key = c.value("campaign", c.value("target", std::string("?")));
      const json s = c.value("shard", json{{"index", 0}, {"count", 1}});
      campaign_shards[key].insert(s.value("index", 0));
      if (!merged.count(key)) {
        order.push_back(key);
        merged[key] = json{{"campaign", key},          {"target", c.value("target", "")},
                           {"preset", c.value("preset", "")}, {"op", c.value("op", "")}, {"covered", true},
                           {"not_covered", c.value("not_covered", "")}, {"cases_passed", 0},
                           {"seconds", 0.0},           {"failed", false},
                           {"failures", json::array()}, {"shards", s.value("count", 1)}};
      }
      json& m = merged[key];
      if (m["shards"].get<int>() != s.value("count", 1))
        problems.push_back(key + ": shards of different counts (" + std::to_string(m["shards"].get<int>()) + " and " +
                           std::to_string(s.value("count", 1)) + ")");
      m["covered"] = m["covered"].get<bool>() && c.value("covered", true);
      if (c.contains("level")) m["level"] = c.at("level");
      if (c.contains("envelope") && !m.contains("envelope")) m["envelope"] = c.at("envelope");
      if (c.contains("coverage")) {  // the shards' coverage summed: the merged verdict judges all of it
        auto cov = m.contains("coverage") ? fuzz::Coverage::from_json(m.at("coverage")) : fuzz::Coverage{};
        cov.merge(fuzz::Coverage::from_json(c.at("coverage"), names[k] + ": coverage"));
        m["coverage"] = cov.to_json();
      }
      m["cases_passed"] = m["cases_passed"].get<int>() + c.value("cases_passed", 0);
      m["seconds"] = m["seconds"].get<double>() + c.value("seconds", 0.0);
      if (c.value("failed", false)) {
        json f{{"shard", shard_text(s)},  {"reason", c.value("reason", "")}, {"rerun", c.value("rerun", "")},
               {"dump_path", c.value("dump_path", "")}, {"counterexample", c.value("counterexample", "")},
               {"report", names[k]}};
        if (!m["failed"].get<bool>()) {  // the first failure is the campaign's reason and repro
          for (const char* key2 : {"reason", "rerun", "dump_path", "counterexample"}) m[key2] = f[key2];
        }
        m["failed"] = true;
        m["failures"].push_back(f);
      }
    }
  }
  for (const auto& [group, seen] : report_shards) check_indices(group, report_counts[group], seen, problems);
  json campaigns = json::array();
  for (const auto& key : order) {
    json& m = merged[key];
    check_indices(key, m["shards"].get<int>(), campaign_shards[key], problems);
    const double s = m["seconds"].get<double>();
    m["cases_per_second"] = s > 0 ? m["cases_passed"].get<int>() / s : 0.0;
    campaigns.push_back(m);
  }
  int fx_failed = 0;
  for (const auto& r : fixtures) fx_failed += r.value("ok", false) ? 0 : 1;
  int cp_failed = 0;
  for (const auto& c : campaigns) cp_failed += c.value("failed", false) ? 1 : 0;
  return json{{"command", "merge"},
              {"merged_from", names},
              {"fixtures", fixtures},
              {"fixtures_passed", static_cast<int>(fixtures.size()) - fx_failed},
              {"fixtures_failed", fx_failed},
              {"campaigns", campaigns},
              {"campaigns_failed", cp_failed},
              {"problems", problems},
              {"ok", fx_failed == 0 && cp_failed == 0 && problems.empty()}};
}

}  // namespace replayssm::cli
