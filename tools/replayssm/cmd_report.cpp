// `replayssm report merge A.json B.json ...`: the --json reports of a sharded campaign (conform or fuzz run with
// --shard I/N, e.g. one per CI matrix job) merged into one verdict: cases summed per campaign, fixtures
// concatenated, every failure kept with its repro; exit 1 when anything failed or a shard is missing.
// `replayssm report html INPUT -o OUT.html`: a page to look at for a dump or a report (report_html.hpp).
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "replayssm/atomic_file.hpp"
#include "replayssm/error.hpp"
#include "report.hpp"
#include "report_html.hpp"
#include "verdict.hpp"

namespace replayssm::cli {

namespace {

nlohmann::json read_report(const std::string& path) {
  std::ifstream in(path);
  require(static_cast<bool>(in), "reports", "cannot open '", path, "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("reports", "'", path, "' is not JSON: ", e.what());
  }
}

}  // namespace

void register_report(CLI::App& app) {
  auto* rp = app.add_subcommand("report", "Work with the --json reports of conform, fuzz and check");
  rp->require_subcommand(1);
  auto* merge = rp->add_subcommand("merge", "Merge the --json reports of the shards of a campaign into one verdict");
  auto files = std::make_shared<std::vector<std::string>>();
  auto json_out = std::make_shared<std::string>();
  auto junit_out = std::make_shared<std::string>();
  merge->add_option("reports", *files, "The shards' --json reports")->required();
  merge->add_option("--json", *json_out, "Write the merged report to this file (atomically)");
  merge->add_option("--junit", *junit_out, "Write the merged JUnit XML report to this file (atomically)");
  merge->callback([files, json_out, junit_out] {
    std::vector<nlohmann::json> reports;
    for (const auto& f : *files) reports.push_back(read_report(f));
    auto m = merge_reports(reports, *files);
    // The merged verdict: the shards' coverage summed per target, judged by the requirements the shards ran with.
    const fuzz::Requirements req = reports.empty() ? fuzz::Requirements{} : requirements_from(reports.front());
    const auto verdicts = campaign_verdicts(m["campaigns"], req, {}, m["fixtures_failed"].get<int>() > 0);
    fuzz::Level level = m["campaigns"].empty() ? (m["ok"].get<bool>() ? fuzz::Level::Conformant : fuzz::Level::NotConformant)
                                               : overall(verdicts);
    if (!m["problems"].empty()) level = fuzz::Level::NotConformant;  // a shard missing or given twice
    for (const auto& v : verdicts) m["verdicts"].push_back(v.to_json());
    m["requirements"] = requirements_json(req);
    m["verdict"] = fuzz::to_string(level);
    m["ok"] = level == fuzz::Level::Conformant;
    print_verdicts(verdicts);
    int cases = 0;
    for (const auto& c : m["campaigns"]) {
      cases += c["cases_passed"].get<int>();
      std::cout << (c["failed"].get<bool>() ? "FAIL " : c["covered"].get<bool>() ? "ok   " : "SKIP ")
                << c["campaign"].get<std::string>() << ": " << c["cases_passed"].get<int>() << " cases passed over "
                << c["shards"].get<int>() << " shard(s)\n";
      for (const auto& f : c["failures"])
        std::cout << "     shard " << f["shard"].get<std::string>() << ": " << f["reason"].get<std::string>()
                  << "\n     rerun: " << f["rerun"].get<std::string>() << "\n";
    }
    for (const auto& f : m["fixtures"])
      if (!f.value("ok", false)) std::cout << "FAIL " << f.value("path", std::string("?")) << "\n";
    for (const auto& p : m["problems"]) std::cout << "problem: " << p.get<std::string>() << "\n";
    std::cout << "merged " << files->size() << " report(s): fixtures " << m["fixtures_passed"].get<int>()
              << " passed, " << m["fixtures_failed"].get<int>() << " failed; campaigns " << m["campaigns"].size()
              << " (" << cases << " cases passed), " << m["campaigns_failed"].get<int>() << " failed -> "
              << fuzz::to_string(level) << "\n";
    if (!json_out->empty()) write_json_report(*json_out, m);
    if (!junit_out->empty()) write_junit(*junit_out, junit_suites(m));
    exit_code = fuzz::exit_status(level);
  });

  auto* html = rp->add_subcommand("html", "Write one self-contained HTML page for a fuzz failure dump or a --json report: "
                                          "verdicts and coverage, the failing case as a timeline with the first "
                                          "divergent command marked, the worst tensor drawn per head");
  auto input = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  html->add_option("input", *input, "A fuzz failure dump (.safetensors) or a --json report of fuzz or conform")->required();
  html->add_option("-o,--output", *out, "The page to write (atomically)")->required();
  html->callback([input, out] {
    const bool dump = input->size() > 12 && input->compare(input->size() - 12, 12, ".safetensors") == 0;
    const nlohmann::json data = dump ? html_data_from_dump(*input) : html_data_from_report(read_report(*input));
    write_file_atomic(*out, render_html(data), "output");
    std::cout << "wrote " << *out;
    if (data.contains("case")) {
      const long d = data["case"].value("divergent", -1L);
      std::cout << (d >= 0 ? " (first divergent command " + std::to_string(d) + ")" : std::string(" (no divergence replayed)"));
    }
    std::cout << "\n";
  });
}

}  // namespace replayssm::cli
