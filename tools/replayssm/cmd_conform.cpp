// `replayssm conform`, the main job: the golden fixture check plus fuzz campaigns of every reference target at the
// preset's real dimensions and, unless --no-deep, full-depth bookkeeping campaigns on the small preset of the
// same recurrence; one summary line and exit status 1 when anything fails.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "fuzz_args.hpp"
#include "replayssm/reference/golden.hpp"

namespace replayssm::cli {

void register_conform(CLI::App& app) {
  auto* c = app.add_subcommand(
      "conform", "Main job: golden fixture check plus fuzz campaigns of every reference target, with a summary");
  auto a = std::make_shared<FuzzArgs>();
  // At the preset's real dimensions a case costs ~0.1-1 s, so the preset campaign is shorter than
  // `fuzz`'s default; the bookkeeping is then fuzzed at full depth (100 cases of up to 100 commands, the
  // budget at which the teeth test proves every catalogue fault is caught) on the small preset of the same
  // recurrence (tiny-gdn / tiny-kda).
  a->cases = 30;
  a->max_commands = 50;
  auto fixtures = std::make_shared<std::vector<std::string>>();
  auto json_out = std::make_shared<std::string>();
  auto seed = std::make_shared<std::uint64_t>(20261129);
  auto no_deep = std::make_shared<bool>(false);
  add_fuzz_options(c, *a);
  c->add_flag("--no-deep", *no_deep, "Skip the full-depth bookkeeping campaigns on the small preset");
  c->add_option("--target", a->target, "Targets to fuzz (reference = replay and ring)")->capture_default_str();
  c->add_option("--fixtures", *fixtures,
                "Fixture files/directories to check (default: generate the preset's golden set into a temporary "
                "directory and check it)");
  c->add_option("--fixture-seed", *seed, "Seed of the generated golden set")->capture_default_str();
  c->add_option("--json", *json_out, "Write the machine-readable report to this file");
  c->callback([a, fixtures, json_out, seed, no_deep] {
    nlohmann::json report{{"preset", a->preset}};
    std::vector<std::string> files;
    std::filesystem::path tmp;
    if (fixtures->empty()) {
      tmp = std::filesystem::temp_directory_path() /
            ("replayssm-conform-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
      files = ref::write_golden_set(preset(a->preset), *seed, tmp.string());
      std::cout << "== golden set: " << files.size() << " fixtures for " << a->preset << " generated in " << tmp
                << "\n";
    } else {
      files = collect_fixtures(*fixtures);
    }
    std::cout << "== fixture check\n";
    nlohmann::json fx;
    const int fx_fail = check_and_print(files, &fx, true);
    std::cout << (files.size() - fx_fail) << " passed, " << fx_fail << " failed\n";
    report["fixtures"] = {{"passed", files.size() - fx_fail}, {"failed", fx_fail}, {"results", fx}};
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
    std::cout << "== fuzz campaigns (" << a->cases << " cases each, " << a->layers << " layer(s) of " << a->preset
              << ")\n";
    auto camps = nlohmann::json::array();
    int fz_fail = 0;
    for (const auto& t : targets_for(a->target, a->fault)) {
      const auto r = fuzz::run_fuzz(options_for(*a, t), progress_stream());
      print_report(r, *a);
      camps.push_back(r.to_json());
      fz_fail += r.failed ? 1 : 0;
    }
    if (!*no_deep) {
      FuzzArgs deep = *a;
      deep.preset = preset(a->preset).op == Op::GDN ? "tiny-gdn" : "tiny-kda";
      deep.cases = 100;
      deep.max_commands = 100;
      std::cout << "== full-depth bookkeeping campaigns (" << deep.cases << " cases of up to " << deep.max_commands
                << " commands, " << deep.preset << ")\n";
      for (const auto& t : targets_for(a->target, a->fault)) {
        if (t != "replay" && t != "ring") continue;  // the small presets are reference-only dimensions
        const auto r = fuzz::run_fuzz(options_for(deep, t), progress_stream());
        print_report(r, deep);
        auto j = r.to_json();
        j["preset"] = deep.preset;
        camps.push_back(j);
        fz_fail += r.failed ? 1 : 0;
      }
    }
    report["fuzz"] = camps;
    const bool ok = fx_fail == 0 && fz_fail == 0;
    report["ok"] = ok;
    std::cout << "== summary: fixtures " << (fx_fail ? "FAIL" : "ok") << ", fuzz " << (fz_fail ? "FAIL" : "ok")
              << " -> " << (ok ? "CONFORMANT" : "NOT CONFORMANT") << "\n";
    if (!json_out->empty()) std::ofstream(*json_out) << report.dump(2) << "\n";
    if (!ok) exit_code = 1;
  });
}

}  // namespace replayssm::cli
